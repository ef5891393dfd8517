#!/usr/bin/env bash
# In-container wheel build for 1Cat-vLLM (SM70). Runs inside the builder image
# (ci/builder.Dockerfile) with the fork source copied to /src (no bind mount);
# wheels go to /out. forkpatch's container build sets the environment below;
# the defaults are what a V100 release build uses.
#
#   VLLM_VERSION_OVERRIDE          exact version of the wheel (required)
#   TORCH_CUDA_ARCH_LIST           default "7.0"
#   FLASH_ATTN_V100_CUDA_ARCH_LIST default "7.0"
#   MAX_JOBS / NVCC_THREADS        default nproc / 1
#   FORKPATCH_CACHE                ccache | sccache | none   (default ccache)
#   CCACHE_DIR                     default /root/.ccache (a named volume)
#   SCCACHE_*, AWS_*               sccache S3 settings, passed from the host
#   FORKPATCH_COMPILE_ONLY         "csrc/a.cu csrc/b.cu": configure the fork's CMake and
#                                  compile only these units (timed, cuobjdump'ed) into
#                                  /out instead of building wheels
#   VLLM_CUTLASS_SRC_DIR, TRITON_KERNELS_SRC_DIR, ...  local copies of what the fork's
#                                  CMake would download (forkpatch copies them to /deps)
set -euo pipefail

SRC=${FORKPATCH_SRC:-/src}
OUT=${FORKPATCH_OUT:-/out}

: "${VLLM_VERSION_OVERRIDE:?VLLM_VERSION_OVERRIDE must be set (the exact wheel version)}"
export VLLM_VERSION_OVERRIDE
export TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-7.0}"
export FLASH_ATTN_V100_CUDA_ARCH_LIST="${FLASH_ATTN_V100_CUDA_ARCH_LIST:-7.0}"
export MAX_JOBS="${MAX_JOBS:-$(nproc)}"
export NVCC_THREADS="${NVCC_THREADS:-1}"
export FORKPATCH_CACHE="${FORKPATCH_CACHE:-ccache}"
# The fork's CMake picks the CUDA target; keep it explicit.
export VLLM_TARGET_DEVICE="${VLLM_TARGET_DEVICE:-cuda}"

say() { echo "[container-build +${SECONDS}s] $*"; }

case "$FORKPATCH_CACHE" in
  ccache)
    export CCACHE_DIR="${CCACHE_DIR:-/root/.ccache}"
    export CCACHE_MAXSIZE="${CCACHE_MAXSIZE:-20G}"
    # Source lives at the same path (/src) in every container, but keep hits
    # independent of the directory anyway.
    export CCACHE_BASEDIR="$SRC"
    export CCACHE_NOHASHDIR=1
    mkdir -p "$CCACHE_DIR"
    LAUNCHER=ccache
    ;;
  sccache)
    : "${SCCACHE_BUCKET:?FORKPATCH_CACHE=sccache needs SCCACHE_BUCKET}"
    export SCCACHE_IDLE_TIMEOUT=0
    LAUNCHER=sccache
    sccache --stop-server >/dev/null 2>&1 || true
    sccache --start-server
    ;;
  none) LAUNCHER= ;;
  *) echo "unknown FORKPATCH_CACHE=$FORKPATCH_CACHE (ccache|sccache|none)" >&2; exit 2 ;;
esac

if [ -n "$LAUNCHER" ]; then
    command -v "$LAUNCHER" >/dev/null || { echo "$LAUNCHER is not installed in this image" >&2; exit 2; }
    # CMake builds (the fork's csrc/ and flash-attention-v100) ...
    export CMAKE_C_COMPILER_LAUNCHER="$LAUNCHER" CMAKE_CXX_COMPILER_LAUNCHER="$LAUNCHER" \
           CMAKE_CUDA_COMPILER_LAUNCHER="$LAUNCHER"
    # ... and plain setuptools extensions (distutils honours CC/CXX).
    export CC="$LAUNCHER ${CC_REAL:-gcc}" CXX="$LAUNCHER ${CXX_REAL:-g++}"
    [ "$LAUNCHER" = ccache ] && ccache --zero-stats >/dev/null
    [ "$LAUNCHER" = sccache ] && sccache --zero-stats >/dev/null
fi

cache_stats() {
    case "$FORKPATCH_CACHE" in
      ccache) say "ccache statistics:"; ccache -s || true ;;
      sccache) say "sccache statistics:"; sccache --show-stats || true ;;
    esac
}
trap cache_stats EXIT

# One wheel build: python -m build when available, else pip wheel; both
# without isolation, against the toolchain installed in the image.
build_wheel() {  # build_wheel <project dir> <out dir>
    if python -c "import build" 2>/dev/null; then
        python -m build --wheel --no-isolation --outdir "$2" "$1"
    else
        python -m pip wheel --no-deps --no-build-isolation --wheel-dir "$2" "$1"
    fi
}

# Compile-only mode: the fork's CMake configure (as its setup.py runs it), then
# single objects through ninja, each timed (wall, user+sys CPU of the compiler
# processes, their peak RSS) and disassembled with cuobjdump. For proving a
# toolchain and measuring units without a full _C build.
compile_only() {
    local build=/tmp/forkpatch-cmake out="$OUT" unit target obj name
    mkdir -p "$out"
    say "toolchain: $(nvcc --version | tail -1); python $(python -c 'import sys; print(sys.version.split()[0])');" \
        "$(python -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' 2>/dev/null)"
    say "configure: cmake (arch $TORCH_CUDA_ARCH_LIST)"
    local t0=$SECONDS
    if ! cmake -S "$SRC" -B "$build" -G Ninja \
            -DCMAKE_BUILD_TYPE="${CMAKE_BUILD_TYPE:-RelWithDebInfo}" \
            -DVLLM_TARGET_DEVICE="$VLLM_TARGET_DEVICE" \
            -DVLLM_PYTHON_EXECUTABLE="$(command -v python)" \
            -DFETCHCONTENT_BASE_DIR="$build/_deps" \
            -DNVCC_THREADS="$NVCC_THREADS" \
            -DCMAKE_JOB_POOL_COMPILE:STRING=compile \
            -DCMAKE_JOB_POOLS:STRING="compile=$MAX_JOBS" \
            ${LAUNCHER:+-DCMAKE_C_COMPILER_LAUNCHER=$LAUNCHER -DCMAKE_CXX_COMPILER_LAUNCHER=$LAUNCHER -DCMAKE_CUDA_COMPILER_LAUNCHER=$LAUNCHER} \
            >"$out/cmake-configure.log" 2>&1; then
        tail -40 "$out/cmake-configure.log"
        say "cmake configure FAILED after $((SECONDS - t0)) s (full log: /out/cmake-configure.log)"
        return 1
    fi
    grep -E 'CUDA target architectures|CUDA supported target|Building SM70|SM70 Marlin|Skipping|FetchContent|VLLM_CUTLASS_SRC_DIR|triton_kernels|Found CUDA|CUDA compiler' \
        "$out/cmake-configure.log" || true
    say "configure: ok in $((SECONDS - t0)) s"
    # Every object of the configured build, by target (for extrapolating a full build).
    ninja -C "$build" -t targets all | sed -n 's#^\(CMakeFiles/[^:]*\.o\): .*#\1#p' | sort -u \
        >"$out/object-targets.txt"
    say "the configured build has $(wc -l <"$out/object-targets.txt") objects" \
        "($(grep -c '^CMakeFiles/_C\.dir/' "$out/object-targets.txt" || true) in _C)"
    printf 'unit\twall_s\tuser_s\tsys_s\tmax_rss_mib\tobject_bytes\n' >"$out/timings.tsv"
    for unit in $FORKPATCH_COMPILE_ONLY; do
        target="$(ninja -C "$build" -t targets all | sed -n "s#^\(CMakeFiles/[^:]*/$unit\.o\): .*#\1#p" | head -1)"
        [ -n "$target" ] || { say "no object target for $unit in the CMake build (not in this arch list?)"; return 1; }
        say "compile $unit -> $target"
        python - "$build" "$target" "$unit" "$out/timings.tsv" <<'PY' || return 1
import resource, subprocess, sys, time, os
build, target, unit, tsv = sys.argv[1:]
t0 = time.monotonic()
rc = subprocess.call(["ninja", "-C", build, target])
wall = time.monotonic() - t0
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
if rc != 0:
    sys.exit(rc)
size = os.path.getsize(os.path.join(build, target))
with open(tsv, "a") as fh:
    fh.write(f"{unit}\t{wall:.1f}\t{ru.ru_utime:.1f}\t{ru.ru_stime:.1f}\t{ru.ru_maxrss / 1024:.0f}\t{size}\n")
print(f"[container-build] {unit}: wall {wall:.1f} s, user {ru.ru_utime:.1f} s, sys {ru.ru_stime:.1f} s, peak {ru.ru_maxrss / 1024:.0f} MiB")
PY
        name="$(basename "$unit")"
        obj="$out/$name.o"
        cp "$build/$target" "$obj"
        if command -v cuobjdump >/dev/null; then
            cuobjdump -lelf "$obj" >"$out/cuobjdump-$name.txt" 2>&1 || true
            cuobjdump -sass "$obj" >>"$out/cuobjdump-$name.txt" 2>&1 || true
            say "cuobjdump $name: $(grep -c 'code for sm_' "$out/cuobjdump-$name.txt" || true) code sections," \
                "archs: $(grep -o 'sm_[0-9]*' "$out/cuobjdump-$name.txt" | sort -u | tr '\n' ' ')"
        fi
    done
    cat "$out/timings.tsv"
}

if [ -n "${FORKPATCH_COMPILE_ONLY:-}" ]; then
    compile_only
    exit $?
fi

say "python $(python -c 'import sys; print(sys.version.split()[0])'), version $VLLM_VERSION_OVERRIDE," \
    "arch $TORCH_CUDA_ARCH_LIST, MAX_JOBS=$MAX_JOBS NVCC_THREADS=$NVCC_THREADS cache=$FORKPATCH_CACHE"
mkdir -p "$OUT"
STAGE="$(mktemp -d /tmp/wheels.XXXXXX)"

# 1. The bundled flash-attention-v100 first: it is a separate project with
#    its own setup.py, and the main build may import it.
if [ -d "$SRC/flash-attention-v100" ]; then
    say "building flash-attention-v100 (arch $FLASH_ATTN_V100_CUDA_ARCH_LIST)"
    mkdir -p "$STAGE/fa"
    # Its version is its own: no VLLM_VERSION_OVERRIDE here.
    env -u VLLM_VERSION_OVERRIDE bash -c "$(declare -f build_wheel); build_wheel '$SRC/flash-attention-v100' '$STAGE/fa'"
    python -m pip install --no-deps --no-index "$STAGE"/fa/*.whl
fi

# 2. The main wheel.
say "building 1cat-vllm $VLLM_VERSION_OVERRIDE"
mkdir -p "$STAGE/main"
SETUPTOOLS_SCM_PRETEND_VERSION_FOR_1CAT_VLLM="$VLLM_VERSION_OVERRIDE" build_wheel "$SRC" "$STAGE/main"

# Publish to /out only once everything built.
mv "$STAGE"/*/*.whl "$OUT"/
say "wheels:"
ls -l "$OUT"/*.whl
