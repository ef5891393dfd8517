#!/usr/bin/env bash
# Build the local stand-in for the CUDA base image (no registry is reachable
# from CI, so `FROM nvidia/cuda:...` cannot be pulled).
#
# A minbase Debian bookworm root file system, made with debootstrap and
# imported as a docker image. It carries what a *container* build of the
# synthetic fork needs, because containers have no network: Python 3.11 with
# pip/setuptools/wheel/build, gcc + Python headers (a real C extension) and
# ccache (a real compiler cache), git.
#
# Idempotent: skipped when the image exists and was made from the same
# package list (a label records it), so the ~1 minute is paid once per machine.
#
# usage: ci/standin-image.sh [TAG]      (default forkpatch-standin:bookworm)
# env:   FORKPATCH_STANDIN_FORCE=1      rebuild even if the image exists
#        FORKPATCH_STANDIN_EXTRA=a,b    more Debian packages (the CUDA wheel builder
#                                       needs g++,make: tests/wheels/test_cuda_toolchain.py
#                                       makes forkpatch-cuda-standin:bookworm-cxx with them)
#        FORKPATCH_STANDIN_DEBS=DIR     .deb files unpacked into the root file system after
#                                       debootstrap (dpkg-deb -x, no maintainer scripts): the
#                                       CUDA compiler for the CUDA stand-in, see ci/cuda-debs.sh
#        DEBIAN_MIRROR                  default http://deb.debian.org/debian
set -euo pipefail

TAG="${1:-forkpatch-standin:bookworm}"
SUITE=bookworm
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
# Keep in step with tests/wheels/conftest.py (it checks for ccache/gcc).
PACKAGES="python3,python3-venv,python3-pip,python3-setuptools,python3-wheel,python3-build,python3-dev,gcc,libc6-dev,ccache,git,ca-certificates"
if [ -n "${FORKPATCH_STANDIN_EXTRA:-}" ]; then
    PACKAGES="$PACKAGES,$FORKPATCH_STANDIN_EXTRA"
fi
LABEL_KEY=org.forkpatch.standin.packages
DEBS_DIR="${FORKPATCH_STANDIN_DEBS:-}"
DEBS_KEY=""
if [ -n "$DEBS_DIR" ]; then
    ls "$DEBS_DIR"/*.deb >/dev/null 2>&1 || { echo "standin-image: no .deb files in $DEBS_DIR" >&2; exit 3; }
    DEBS_KEY="$(cd "$DEBS_DIR" && sha256sum ./*.deb | sha256sum | cut -c1-16)"
fi
LABEL_VALUE="$(printf '%s %s %s' "$SUITE" "$PACKAGES" "$DEBS_KEY" | sha256sum | cut -c1-16)"

if [ "${FORKPATCH_STANDIN_FORCE:-0}" != 1 ]; then
    have="$(docker image inspect --format "{{ index .Config.Labels \"$LABEL_KEY\" }}" "$TAG" 2>/dev/null || true)"
    if [ "$have" = "$LABEL_VALUE" ]; then
        echo "standin-image: $TAG is present (packages $LABEL_VALUE); nothing to do" >&2
        exit 0
    fi
fi

command -v debootstrap >/dev/null || {
    echo "standin-image: debootstrap is not installed (apt-get install -y debootstrap)" >&2
    exit 3
}
[ "$(id -u)" = 0 ] || { echo "standin-image: debootstrap needs root" >&2; exit 3; }

ROOTFS="$(mktemp -d /tmp/forkpatch-standin.XXXXXX)"
trap 'rm -rf "$ROOTFS"' EXIT

start=$(date +%s)
echo "standin-image: debootstrap $SUITE into $ROOTFS" >&2
debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$ROOTFS" "$MIRROR" >&2
if [ -n "$DEBS_DIR" ]; then
    for deb in "$DEBS_DIR"/*.deb; do
        echo "standin-image: unpacking $(basename "$deb")" >&2
        dpkg-deb -x "$deb" "$ROOTFS"
    done
fi
# No apt lists or caches in the image: nothing inside may reach a package index anyway.
rm -rf "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/var/lib/apt/lists/*
echo "standin-image: importing as $TAG" >&2
tar -C "$ROOTFS" -c . | docker import \
    --change "LABEL $LABEL_KEY=$LABEL_VALUE" \
    --change 'ENV LANG=C.UTF-8' \
    --change 'CMD ["/bin/bash"]' \
    - "$TAG" >&2
echo "standin-image: $TAG built in $(( $(date +%s) - start )) s" >&2
