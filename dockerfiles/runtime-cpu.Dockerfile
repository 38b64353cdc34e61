# syntax=docker/dockerfile:1
# The CPU runtime image: every role of an experiment (`surreal-kube-role <role>`), CPU-only torch.
#
# Context: the repository root; runtime-cpu.Dockerfile.dockerignore (next to this file) keeps it
# to what `pip install` needs. `surreal-kube build NAME` tags it by the content hash of this file
# and that context. By hand:
#   docker build -f dockerfiles/runtime-cpu.Dockerfile -t surreal-kube/runtime-cpu:dev .
#
# Build arguments (defaults are for real use; the offline tests override them):
#   PYTHON_IMAGE  a Debian-based image with python3.11 and its venv module
#   PIP_ARGS      extra `pip install` arguments: the CPU build of torch comes from PyTorch's index
#                 (far smaller than the CUDA build PyPI serves)
#   VENV_ARGS     extra `python3 -m venv` arguments
#   APT_PACKAGES  runtime libraries: OSMesa for MuJoCo's offscreen rendering without a GPU
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ARG PIP_ARGS="--extra-index-url https://download.pytorch.org/whl/cpu"
ARG VENV_ARGS=""
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1
RUN python3 -m venv ${VENV_ARGS} /opt/surreal
COPY pyproject.toml README.md /src/
COPY surreal_kube /src/surreal_kube
RUN /opt/surreal/bin/pip install ${PIP_ARGS} /src && rm -rf /src

FROM ${PYTHON_IMAGE}
ARG APT_PACKAGES="libosmesa6 libgl1 libglib2.0-0"
RUN if [ -n "${APT_PACKAGES}" ]; then \
      apt-get update \
      && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ${APT_PACKAGES} \
      && rm -rf /var/lib/apt/lists/*; \
    fi \
    && useradd --uid 10001 --user-group --no-create-home --home-dir /tmp \
         --shell /usr/sbin/nologin surreal
COPY --from=build /opt/surreal /opt/surreal
# The pods run with a read-only root filesystem and a writable /tmp: every cache goes there.
ENV PATH=/opt/surreal/bin:${PATH} \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/tmp \
    MPLCONFIGDIR=/tmp/matplotlib \
    MUJOCO_GL=osmesa \
    PYOPENGL_PLATFORM=osmesa
USER 10001:10001
WORKDIR /tmp
CMD ["surreal-kube-role", "--help"]
