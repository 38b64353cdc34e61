# syntax=docker/dockerfile:1
# The CUDA runtime image: the same roles, with the CUDA build of torch for pods holding GPUs.
#
# The torch wheels on PyPI bundle the CUDA runtime libraries (nvidia-* wheels), so the base is a
# plain Python image; the node's driver (libcuda.so.1, libnvidia-*) comes from the node:
# - GKE's device plugin mounts the driver at /usr/local/nvidia (lib64, bin) in every container that
#   asks for nvidia.com/gpu and sets nothing else up, so LD_LIBRARY_PATH must name
#   /usr/local/nvidia/lib64 or `import torch` finds no driver (torch.cuda.is_available() False).
# - The NVIDIA container toolkit (kind, k3s, on-premises) injects the driver into /usr/lib and
#   reads NVIDIA_DRIVER_CAPABILITIES (graphics: EGL for MuJoCo rendering) from the image.
# NVIDIA_VISIBLE_DEVICES is not set here: the device plugin sets it to the GPUs a pod was given;
# `all` baked into the image would hand every GPU of the node to any pod of this image that runs
# there without asking for one (a CPU component placed on a GPU node).
# tests/launch/kube/test_images.py reads these ENV lines (a CUDA build is too heavy for the tests).
#
# Context: the folder that holds the `surreal_kube` package (as for runtime-cpu.Dockerfile);
# runtime-cuda.Dockerfile.dockerignore keeps it to the package. By hand, from a checkout:
#   docker build --platform linux/amd64 -f surreal_kube/dockerfiles/runtime-cuda.Dockerfile \
#     -t surreal-kube/runtime-cuda:dev .
#
# Packages: runtime-cuda.requirements.txt pins every one (--no-deps): the closure of the
# project's dependencies with the CUDA build of torch and all of its nvidia-* wheels, as
# requirements/dev.lock resolved them (tests/test_version.py). Those wheels are built for CUDA 13:
# the node's driver must be >= 580.65.06, which the learner checks at start (rl/device.py).
#
# Build arguments (defaults are for real use; `surreal-kube build --wheelhouse` and the offline
# tests override them):
#   PYTHON_IMAGE  a Debian-based image with python3.11 and its venv module
#   WHEELS_IMAGE  an image holding the pinned wheels at its root (`surreal-kube build
#                 --wheelhouse` makes it); `scratch` (the default): pip downloads from its index
#   PIP_ARGS      extra `pip install` arguments
#   VENV_ARGS     extra `python3 -m venv` arguments
#   REQUIREMENTS  1: install runtime-cuda.requirements.txt; 0: only the project (offline tests)
#   APT_PACKAGES  runtime libraries: EGL for MuJoCo's GPU offscreen rendering
ARG PYTHON_IMAGE=python:3.11-slim-bookworm
ARG WHEELS_IMAGE=scratch

FROM ${WHEELS_IMAGE} AS wheels

# The dependencies in a stage (and a final layer) of their own: a code change reuses them.
FROM ${PYTHON_IMAGE} AS deps
ARG PIP_ARGS=""
ARG VENV_ARGS=""
ARG REQUIREMENTS=1
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1
RUN python3 -m venv ${VENV_ARGS} /opt/surreal
COPY surreal_kube/dockerfiles/runtime-cuda.requirements.txt /src/requirements.txt
RUN --mount=type=bind,from=wheels,target=/wheels \
    set -e; \
    if [ "${REQUIREMENTS}" = 1 ]; then \
      index=""; \
      if ls /wheels/*.whl >/dev/null 2>&1; then index="--no-index --find-links /wheels/"; fi; \
      /opt/surreal/bin/pip install ${index} ${PIP_ARGS} --no-deps --only-binary=:all: \
        -r /src/requirements.txt; \
    fi; \
    rm -rf /src

FROM ${PYTHON_IMAGE}
ARG PIP_ARGS=""
ARG APT_PACKAGES="libegl1 libgl1 libglib2.0-0"
RUN if [ -n "${APT_PACKAGES}" ]; then \
      apt-get update \
      && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ${APT_PACKAGES} \
      && rm -rf /var/lib/apt/lists/*; \
    fi \
    && useradd --uid 10001 --user-group --no-create-home --home-dir /tmp \
         --shell /usr/sbin/nologin surreal
COPY --from=deps /opt/surreal /opt/surreal
COPY surreal_kube /src/surreal_kube
COPY surreal_kube/dockerfiles/package.pyproject.toml /src/pyproject.toml
RUN /opt/surreal/bin/pip install --no-cache-dir --disable-pip-version-check --no-index \
      --no-deps --no-build-isolation ${PIP_ARGS} /src \
    && rm -rf /src
# The pods run with a read-only root filesystem and a writable /tmp: every cache goes there.
ENV PATH=/opt/surreal/bin:/usr/local/nvidia/bin:${PATH} \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/tmp \
    MPLCONFIGDIR=/tmp/matplotlib \
    MUJOCO_GL=egl \
    PYOPENGL_PLATFORM=egl \
    LD_LIBRARY_PATH=/usr/local/nvidia/lib64:/usr/local/nvidia/lib \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility,graphics
USER 10001:10001
WORKDIR /tmp
CMD ["surreal-kube-role", "--help"]
