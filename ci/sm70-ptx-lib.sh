#!/usr/bin/env bash
# Build the fork's SM70 FP8 kernels as one compute_70 PTX library for the gpu-jit smoke
# tier (forkpatch smoke --tier gpu-jit --ptx-lib PATH), and print its path.
#
# The fork's TurboMind units are read from the fork repository at the series' base
# (never copied into this project) and compiled by forkpatch.smoke.ptxbuild with a
# CUDA 12.x nvcc: CUDA 13 cannot emit compute_70. Without FORKPATCH_NVCC, Debian
# trixie's nvidia-cuda-toolkit 12.4 is downloaded by ci/cuda-debs.sh (private apt
# state, about 1.6 GB) and unpacked with dpkg -x into a private prefix, once. The
# library is cached by fork commit, compiler and interface (~/.cache/forkpatch/sm70-ptx);
# about 5 minutes cold on 2 cores (the fork's objects; 1 to 2 once they are cached), then seconds.
#
# usage: ci/sm70-ptx-lib.sh [--fork-repo GIT_DIR] [--commit REV] [--jobs N] [--list-sources]
#                          [--fault-switch]   (the test-only build for the negative controls)
# env:   FORKPATCH_FORK_REPO   the fork (default: ../shared/fixtures/1cat-vllm.git)
#        FORKPATCH_NVCC        a CUDA 12.x nvcc to use (e.g. /usr/local/cuda-12.8/bin/nvcc)
#        FORKPATCH_CUDA12_PREFIX  where Debian's 12.4 toolkit is unpacked
#                              (default ~/.cache/forkpatch/cuda12.4)
#        PYTHON                the interpreter that has forkpatch (default python3)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
fork=${FORKPATCH_FORK_REPO:-$root/../shared/fixtures/1cat-vllm.git}
commit=$(sed -n '/^base:/,/^[a-z]/s/^  commit: *//p' "$root/series.yaml")
jobs=2
list=
fault=()
while [ $# -gt 0 ]; do
    case "$1" in
        --fork-repo) fork=$2; shift 2 ;;
        --commit) commit=$2; shift 2 ;;
        --jobs) jobs=$2; shift 2 ;;
        --list-sources) list=1; shift ;;
        --fault-switch) fault=(--fault-switch); shift ;;
        *) echo "usage: ci/sm70-ptx-lib.sh [--fork-repo GIT_DIR] [--commit REV] [--jobs N] [--list-sources] [--fault-switch]" >&2; exit 2 ;;
    esac
done
py=${PYTHON:-python3}
if [ -n "$list" ]; then
    exec "$py" -m forkpatch.smoke.ptxbuild --list-sources --fork-repo "$fork" --commit "$commit"
fi
nvcc=${FORKPATCH_NVCC:-}
if [ -z "$nvcc" ]; then
    prefix=${FORKPATCH_CUDA12_PREFIX:-$HOME/.cache/forkpatch/cuda12.4}
    nvcc=$prefix/usr/lib/nvidia-cuda-toolkit/bin/nvcc
    if [ ! -x "$nvcc" ] || [ ! -f "$prefix/.unpacked" ]; then
        debs=$prefix-debs
        [ -f "$debs/SHA256SUMS" ] || bash "$here/cuda-debs.sh" "$debs"
        (cd "$debs" && sha256sum --quiet -c SHA256SUMS)
        mkdir -p "$prefix"
        for name in nvidia-cuda-toolkit nvidia-cuda-dev libnvvm4 libcudart12 libcu++-dev libcub-dev libthrust-dev; do
            dpkg -x "$debs/${name}"_*.deb "$prefix"
        done
        # Debian's profile points at /usr; this one at the private prefix.
        profile=$prefix/usr/lib/nvidia-cuda-toolkit/bin/nvcc.profile
        rm -f "$profile"
        cat >"$profile" <<'PROFILE'
TOP = $(_HERE_)/../../..
NVVMIR_LIBRARY_DIR = $(TOP)/lib/nvidia-cuda-toolkit/libdevice
PATH += $(_HERE_):$(TOP)/bin:
INCLUDES += "-I$(TOP)/include" $(_SPACE_)
LIBRARIES =+ $(_SPACE_) "-L$(TOP)/lib/x86_64-linux-gnu/stubs" "-L$(TOP)/lib/x86_64-linux-gnu"
PROFILE
        touch "$prefix/.unpacked"
    fi
fi
exec nice "$py" -m forkpatch.smoke.ptxbuild --fork-repo "$fork" --commit "$commit" --nvcc "$nvcc" --jobs "$jobs" ${fault[@]+"${fault[@]}"}
