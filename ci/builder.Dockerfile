# syntax=docker/dockerfile:1
# forkpatch SM70 builder image: builds 1Cat-vLLM wheels for Tesla V100 (7.0).
#
# The fork's own docker/Dockerfile is upstream vLLM's (CUDA 13, no 7.0), so the
# SM70 builder is ours. Target stack (fork RELEASE.md / "Source Build"):
# CUDA 12.8 (CMake keeps 7.0 only for 12.8 <= CUDA < 13), Python 3.12,
# torch 2.10.0 + torchvision 0.25.0 + torchaudio 2.10.0 from the cu128 index.
#
# forkpatch builds this through the docker SDK with a generated build context:
#   Dockerfile                      this file
#   ci/container-build.sh           the in-container build script (same in both modes)
#   requirements/build/cuda.txt     copied from the fork tree being built
#   requirements/cuda.txt           (cuda.txt includes common.txt with -r, so the
#   requirements/common.txt          layout of requirements/ is kept)
#   tools/                          optional prebuilt binaries (e.g. tools/sccache)
#   cuda-wheels.lock                the hash-pinned wheel set of TOOLCHAIN=wheels
# and tags it forkpatch-builder:<hash of all of the above + base image + args>.
#
# Three toolchain routes, one Dockerfile (ARG TOOLCHAIN); every step after the
# toolchain (tools, /src, /out, the build script, the cache wiring) is shared:
#   apt (default)  the production SM70 builder: nvidia/cuda:12.8.1-devel base,
#                  Python from the deadsnakes PPA, torch from the PyTorch cu128
#                  index, the fork's requirement files. Needs network.
#   wheels         torch 2.10.0 (cu128, with its nvidia-* CUDA 12.8 libraries) and
#                  the fork's build requirements from PyPI wheels pinned by sha256
#                  in cuda-wheels.lock (pip --require-hashes). WHEELHOUSE_URL set:
#                  offline, from that --find-links location (forkpatch serves a local
#                  wheelhouse directory on the host's loopback for the image build);
#                  unset: straight from PyPI. The CUDA *compiler* must be in the base
#                  image: PyPI's cu12 nvcc wheel carries ptxas and libnvvm but no
#                  nvcc driver, cicc, cudafe++, fatbinary or nvlink.
#   none           no installs at all, for the stand-in base of the synthetic-fork
#                  tests (ci/standin-image.sh; venv with --system-site-packages).
# The build context also carries cuda-wheels.lock (always; only `wheels` reads it).

# The production base is pinned by digest. sha256:a99a1860... is the multi-arch
# index digest of nvidia/cuda:12.8.1-devel-ubuntu22.04 (its linux/amd64 manifest
# is sha256:6617a625f4090c76c545a0e7d63f2e441718ef9af7f4efe7dd1242a29e289fd7), as
# recorded by several independent public projects that pull it. No registry is
# reachable from this project's machines, so it was NOT checked against the
# registry here: verify with `docker buildx imagetools inspect
# nvidia/cuda:12.8.1-devel-ubuntu22.04` before relying on it, and override with
# --base-image / build.base-image (or BASE_IMAGE) if NVIDIA re-pushed the tag.
# Upstream vLLM builds cu128 wheels on the same -devel-ubuntu22.04 base; cuDNN is
# not needed at build time (torch's wheels bring their own).
ARG BASE_IMAGE=nvidia/cuda:12.8.1-devel-ubuntu22.04@sha256:a99a1860ba8e2916e5c3e73b72ec4c4301653a84586e05bfc9a2aa2d58027e97
FROM ${BASE_IMAGE}

ARG BASE_IMAGE
ARG TOOLCHAIN=apt
ARG PYTHON_VERSION=3.12
ARG TORCH_VERSION=2.10.0
ARG TORCHVISION_VERSION=0.25.0
ARG TORCHAUDIO_VERSION=2.10.0
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cu128
ARG WHEELHOUSE_URL=

ENV DEBIAN_FRONTEND=noninteractive \
    LANG=C.UTF-8 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONUNBUFFERED=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:/usr/local/cuda/bin:${PATH}

# 1. System toolchain and the venv. apt/wheels: Python ${PYTHON_VERSION}; when the
#    base lacks it (ubuntu22.04's python3 is 3.10) it comes from the deadsnakes
#    PPA, as upstream vLLM's cu128 Dockerfile does; compilers/ccache/git from apt
#    only when missing, so an offline base that has them needs no network.
RUN set -eux; \
    case "${TOOLCHAIN}" in apt|wheels|none) ;; *) echo "TOOLCHAIN=${TOOLCHAIN}: use apt, wheels or none" >&2; exit 2 ;; esac; \
    if [ "${TOOLCHAIN}" = none ]; then \
        # Stand-in: Debian's python3; setuptools/wheel/build from Debian packages,
        # seen through --system-site-packages.
        python3 -m venv --system-site-packages /opt/venv; \
    else \
        missing=""; \
        for t in git ccache g++ make; do command -v "$t" >/dev/null || missing="$missing $t"; done; \
        command -v "python${PYTHON_VERSION}" >/dev/null && "python${PYTHON_VERSION}" -m venv --help >/dev/null 2>&1 \
            || missing="$missing python${PYTHON_VERSION}"; \
        if [ -n "$missing" ]; then \
            echo "installing from apt:$missing"; \
            apt-get update -y; \
            apt-get install -y --no-install-recommends \
                ca-certificates curl git ccache software-properties-common gnupg \
                build-essential libnuma-dev; \
            if ! command -v "python${PYTHON_VERSION}" >/dev/null; then \
                for i in 1 2 3; do add-apt-repository -y ppa:deadsnakes/ppa && break || sleep 5; done; \
                apt-get update -y; \
            fi; \
            apt-get install -y --no-install-recommends \
                python${PYTHON_VERSION} python${PYTHON_VERSION}-dev python${PYTHON_VERSION}-venv; \
            rm -rf /var/lib/apt/lists/*; \
        fi; \
        "python${PYTHON_VERSION}" -m venv /opt/venv; \
    fi; \
    python --version; python -m pip --version

# 2. Python packages: torch and the fork's build requirements.
COPY requirements/ /opt/forkpatch/requirements/
COPY cuda-wheels.lock /opt/forkpatch/cuda-wheels.lock
RUN set -eux; \
    if [ "${TOOLCHAIN}" = apt ]; then \
        python -m pip install --upgrade pip uv; \
        uv pip install --index-strategy unsafe-best-match \
            --extra-index-url "${TORCH_INDEX_URL}" \
            "torch==${TORCH_VERSION}" "torchvision==${TORCHVISION_VERSION}" \
            "torchaudio==${TORCHAUDIO_VERSION}"; \
        for f in build/cuda.txt cuda.txt common.txt; do \
            test -s "/opt/forkpatch/requirements/$f" || { echo "missing requirements/$f in the build context" >&2; exit 1; }; \
        done; \
        # torch pins in these files resolve against the cu128 index too.
        uv pip install --index-strategy unsafe-best-match \
            --extra-index-url "${TORCH_INDEX_URL}" \
            -r /opt/forkpatch/requirements/build/cuda.txt \
            -r /opt/forkpatch/requirements/cuda.txt \
            -r /opt/forkpatch/requirements/common.txt \
            build ninja cmake sccache; \
    elif [ "${TOOLCHAIN}" = wheels ]; then \
        if [ -n "${WHEELHOUSE_URL}" ]; then \
            src="--no-index --find-links ${WHEELHOUSE_URL}"; \
        else \
            src=""; \
        fi; \
        # Every file is checked against its sha256 in the lock; nothing unlisted installs.
        python -m pip install --require-hashes --only-binary=:all: $src \
            -r /opt/forkpatch/cuda-wheels.lock; \
        python -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"; \
    fi; \
    python -c "import setuptools, wheel; print('setuptools', setuptools.__version__)"; \
    if [ "${TOOLCHAIN}" != none ]; then \
        command -v nvcc >/dev/null || { \
            echo "TOOLCHAIN=${TOOLCHAIN}: no nvcc in the base image ${BASE_IMAGE:-}." \
                 "The CUDA compiler comes from the base (nvidia/cuda:12.8.1-devel-*);" \
                 "PyPI's nvidia-cuda-nvcc-cu12 wheel has ptxas and libnvvm but no nvcc/cicc/cudafe++." >&2; \
            exit 1; }; \
        nvcc --version | tail -2; \
    fi

# Optional prebuilt tools from the context (tests put the host's sccache here,
# since stand-in containers have no network).
COPY tools/ /opt/forkpatch/tools/
RUN set -eux; \
    if [ -f /opt/forkpatch/tools/sccache ]; then \
        install -m 0755 /opt/forkpatch/tools/sccache /usr/local/bin/sccache; \
    fi; \
    rm -rf /opt/forkpatch/tools; \
    mkdir -p /src /out /root/.ccache; \
    (command -v ccache && ccache --version | head -1) || echo "no ccache in this image"; \
    (command -v sccache && sccache --version) || echo "no sccache in this image"

COPY ci/container-build.sh /opt/forkpatch/container-build.sh
RUN chmod 0755 /opt/forkpatch/container-build.sh

WORKDIR /src
CMD ["/opt/forkpatch/container-build.sh"]
