#!/usr/bin/env bash
# Download Debian's NVIDIA CUDA 12.4 compiler packages (non-free) into DIR, for
# the CUDA stand-in base image (ci/standin-image.sh with FORKPATCH_STANDIN_DEBS=DIR).
#
# Why: PyPI's CUDA 12.8 wheels (nvidia-cuda-nvcc-cu12==12.8.93 and friends) carry
# ptxas, libnvvm, libdevice and the headers, but not the compiler driver (nvcc),
# its front end (cicc, cudafe++), fatbinary or nvlink, so no .cu file compiles
# from wheels alone. Debian's nvidia-cuda-toolkit 12.4 is the newest NVIDIA nvcc
# that a machine with only PyPI and Debian reachable can install; it still
# targets sm_70. A real build uses nvidia/cuda:12.8.1-devel instead.
#
# Uses a private apt state under DIR/.apt (the host's apt sources are untouched).
# About 1.6 GB. usage: ci/cuda-debs.sh DIR
set -euo pipefail
DIR="${1:?usage: ci/cuda-debs.sh DIR}"
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
mkdir -p "$DIR/.apt/lists/partial" "$DIR/.apt/cache/archives/partial"
echo "deb $MIRROR trixie main contrib non-free" >"$DIR/.apt/sources.list"
A=(-o "Dir::Etc::sourcelist=$DIR/.apt/sources.list" -o Dir::Etc::sourceparts=/nonexistent
   -o "Dir::State::Lists=$DIR/.apt/lists" -o "Dir::Cache=$DIR/.apt/cache"
   -o APT::Sandbox::User=root)
apt-get "${A[@]}" update >&2
V=12.4.127~12.4.1-2
cd "$DIR"
apt-get "${A[@]}" download \
    nvidia-cuda-toolkit=12.4.131~12.4.1-2 libnvvm4=12.4.131~12.4.1-2 \
    nvidia-cuda-dev=$V libcudart12=$V libnvrtc12=$V libnvrtc-builtins12.4=$V \
    libnvjitlink12=$V libnvtoolsext1=$V \
    libcublas12=12.4.5.8~12.4.1-2 libcublaslt12=12.4.5.8~12.4.1-2 \
    libcufft11=11.2.1.3~12.4.1-2 libcurand10=11.1.1+~10.3.5.147~12.4.1-2 \
    libcusparse12=12.3.1.170~12.4.1-2 libcusolver11=11.6.1.9~12.4.1-2 \
    libcub-dev=2.3.2-2 libthrust-dev=2.3.2-2 libcu++-dev=2.3.2-2 >&2
sha256sum ./*.deb >SHA256SUMS
echo "cuda-debs: $(wc -l <SHA256SUMS) packages in $DIR" >&2
