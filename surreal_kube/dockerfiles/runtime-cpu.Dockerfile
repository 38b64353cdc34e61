# syntax=docker/dockerfile:1
# The CPU runtime image: every role of an experiment (`surreal-kube-role <role>`) and the operator
# (`surreal-kube-operator`), with torch on the CPU.
#
# Context: the folder that holds the `surreal_kube` package (a checkout's root, or the
# site-packages of a pip install: this file ships inside the package, so `surreal-kube build`
# works wherever surreal-kube is installed); runtime-cpu.Dockerfile.dockerignore (next to this
# file) keeps it to the package. The package is installed with package.pyproject.toml as its build
# recipe. `surreal-kube build NAME` tags the image by the content hash of this file, that context
# and the platform (linux/amd64 by default). By hand, from a checkout:
#   docker build --platform linux/amd64 -f surreal_kube/dockerfiles/runtime-cpu.Dockerfile \
#     -t surreal-kube/runtime-cpu:dev .
#
# Packages: runtime-cpu.requirements.txt pins every one (--no-deps), so the image holds exactly
# the closure of the project's dependencies minus what a CPU process never loads.
#
# Why torch still brings some nvidia libraries (measured on torch 2.15.0 from PyPI, the only torch
# build reachable here; the CPU-only index is not): `import torch` loads torch/_C, whose
# libtorch_python.so and libtorch.so have DT_NEEDED entries on libtorch_cuda.so, and those need
#   libcudart.so.13 libcupti.so.13 libcublas.so.13 libcublasLt.so.13 libcufft.so.12 libcufile.so.0
#   libcusparse.so.12 libcusparseLt.so.0 libnccl.so.2 libnvrtc.so.13 libnvshmem_host.so.3
#   libcudnn.so.9
# (`readelf -d torch/lib/*.so`). Without them `import torch` fails with "OSError: libcudart.so.13:
# cannot open shared object file". Everything else of PyPI's nvidia-* wheels is loaded later, by
# dlopen, and only on a GPU: cuDNN's engine and graph libraries (libcudnn.so.9 is a 132 KB loader
# that opens them on the first cuDNN call), cusolver (through torch/lib/libtorch_cuda_linalg.so,
# itself opened lazily), nvJitLink, nvrtc-builtins, nvperf, the nvshmem transports, the headers
# and static archives. So the build keeps only the sonames above (KEEP_NVIDIA_LIBS) and removes the
# rest, and never installs triton (GPU kernels of torch.compile) or the cuda-toolkit metapackages:
# about 2.5 GB less than `pip install torch`. With no driver in the pod, libcudart answers "no
# device" and torch.cuda.is_available() is False; no other nvidia library is ever called.
# tests/launch/kube/test_runtime_image_podman.py checks import, a CPU training step and MuJoCo in
# the built image.
#
# Build arguments (defaults are for real use; `surreal-kube build --wheelhouse` and the offline
# tests override them):
#   PYTHON_IMAGE  a Debian bookworm image with python3.11 and its venv module
#   WHEELS_IMAGE  an image holding the pinned wheels at its root (`surreal-kube build
#                 --wheelhouse` makes it): the install then reads them and no index at all.
#                 `scratch` (the default): pip downloads from its index.
#   PIP_ARGS      extra `pip install` arguments
#   VENV_ARGS     extra `python3 -m venv` arguments
#   REQUIREMENTS  1: install runtime-cpu.requirements.txt; 0: only the project (offline tests)
#   APT_PACKAGES  runtime libraries: OSMesa for MuJoCo's offscreen rendering without a GPU
ARG PYTHON_IMAGE=python:3.11-slim-bookworm
ARG WHEELS_IMAGE=scratch

FROM ${WHEELS_IMAGE} AS wheels

# The dependencies, in a stage (and so a final layer) of their own: a change to the project's
# code reuses them, layer and all.
FROM ${PYTHON_IMAGE} AS deps
ARG PIP_ARGS=""
ARG VENV_ARGS=""
ARG REQUIREMENTS=1
ARG KEEP_NVIDIA_LIBS="libcudart.so.13 libcupti.so.13 libcublas.so.13 libcublasLt.so.13 \
libcufft.so.12 libcufile.so.0 libcusparse.so.12 libcusparseLt.so.0 libnccl.so.2 libnvrtc.so.13 \
libnvshmem_host.so.3 libcudnn.so.9"
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1
RUN python3 -m venv ${VENV_ARGS} /opt/surreal
COPY surreal_kube/dockerfiles/runtime-cpu.requirements.txt /src/requirements.txt
RUN --mount=type=bind,from=wheels,target=/wheels \
    set -e; \
    if [ "${REQUIREMENTS}" = 1 ]; then \
      index=""; \
      if ls /wheels/*.whl >/dev/null 2>&1; then index="--no-index --find-links /wheels/"; fi; \
      /opt/surreal/bin/pip install ${index} ${PIP_ARGS} --no-deps --only-binary=:all: \
        -r /src/requirements.txt; \
      site=$(echo /opt/surreal/lib/python3*/site-packages); \
      keep=""; for lib in ${KEEP_NVIDIA_LIBS}; do keep="${keep} ! -name ${lib}"; done; \
      find "${site}/nvidia" -type f ! -name '*.py' ${keep} -delete; \
      find "${site}/nvidia" -depth -type d -empty -delete; \
      rm -rf "${site}/torch/include" "${site}/torch/lib/libtorch_cuda_linalg.so"; \
      for lib in ${KEEP_NVIDIA_LIBS}; do \
        test -n "$(find "${site}/nvidia" -name "${lib}")" || { echo "no ${lib}" >&2; exit 1; }; \
      done; \
    fi; \
    rm -rf /src

FROM ${PYTHON_IMAGE}
ARG PIP_ARGS=""
ARG APT_PACKAGES="libosmesa6 libgl1 libglib2.0-0"
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
