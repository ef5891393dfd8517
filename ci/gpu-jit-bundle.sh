#!/usr/bin/env bash
# Prepare, on a machine with network, everything a GPU machine without network needs to
# run `forkpatch smoke --tier gpu-jit` (docs/gpu-jit.md): one directory, OUT, to copy there.
#
#   OUT/dist/      the series' wheel for the GPU machine's Python tag: the fork's Python-only
#                  wheel built from its tag with that Python (VLLM_TARGET_DEVICE=empty), the
#                  series overlaid by `forkpatch build-wheel --mode overlay`
#   OUT/wheels/    the wheelhouse: what that wheel needs and the machine's
#                  `pip list --format=freeze` (--have) lacks, for its Python (smoke.bundle)
#   OUT/forkpatch/ forkpatch's own wheel and what it needs there
#   OUT/ptx.tar.xz the PTX library and its manifest (ci/sm70-ptx-lib.sh), compressed
#                  (8 MB of PTX text -> ~2.5 MB); with --fault-switch also the test-only
#                  build for the negative controls, in OUT/ptx-faults.tar.xz
#   OUT/without-NAME/  with --without NAME: a copy of the project's series.yaml and patches/
#                  less patch NAME, and its wheel in dist/ (the negative run: the series minus
#                  one patch must fail its checks there)
#   OUT/RUN.sh     the commands to run there
#
# usage: ci/gpu-jit-bundle.sh --python PY --have FREEZE --out OUT [--fault-switch]
#                             [--keep-installed NAME]... [--without NAME]... [--max-mib N]
#   PY      an interpreter of the GPU machine's Python version (e.g. pyenv's 3.12.1 for a
#           3.12.3 machine); its venv builds the fork's wheel
#   FREEZE  on the GPU machine: python3 -m pip list --format=freeze > FREEZE
# env: FORKPATCH_FORK_REPO (default ../shared/fixtures/1cat-vllm.git), PYTHON (the
#      interpreter that has forkpatch, default python3).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
fork=${FORKPATCH_FORK_REPO:-$root/../shared/fixtures/1cat-vllm.git}
py=${PYTHON:-python3}
target_py='' have='' out='' faults='' max=60
keep=()
without=()
usage() { sed -n '/^# usage:/,/^# env:/p' "$0" >&2; exit 2; }
while [ $# -gt 0 ]; do
    case "$1" in
        --python) target_py=$2; shift 2 ;;
        --have) have=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        --fault-switch) faults=1; shift ;;
        --keep-installed) keep+=(--keep-installed "$2"); shift 2 ;;
        --max-mib) max=$2; shift 2 ;;
        --without) without+=("$2"); shift 2 ;;
        *) usage ;;
    esac
done
[ -n "$target_py" ] && [ -n "$have" ] && [ -n "$out" ] || usage
version=$("$target_py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
tag=$(sed -n '/^base:/,/^[a-z]/s/^  tag: *//p' "$root/series.yaml")
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/forkpatch-bundle-XXXXXX")
trap 'rm -rf "$work"' EXIT

echo "== the PTX library (ci/sm70-ptx-lib.sh)" >&2
lib=$(PYTHON="$py" bash "$here/sm70-ptx-lib.sh")
tar -C "$(dirname "$lib")" -cJf "$out/ptx.tar.xz" "$(basename "$lib")" manifest.json
if [ -n "$faults" ]; then
    flib=$(PYTHON="$py" bash "$here/sm70-ptx-lib.sh" --fault-switch)
    tar -C "$(dirname "$flib")" -cJf "$out/ptx-faults.tar.xz" "$(basename "$flib")" manifest.json
fi

echo "== the fork's Python-only wheel at $tag for Python $version" >&2
"$target_py" -m venv "$work/venv"
"$work/venv/bin/python" -m pip install -q "setuptools>=77.0.3,<81" setuptools-scm \
    vcs-versioning setuptools-rust wheel packaging jinja2
mkdir "$work/src" "$work/torch-stand-in"
git --git-dir="$fork" archive "$tag" | tar -x -C "$work/src"
# setuptools-scm lists a package's data files from git: a repository of the tag's files.
git -C "$work/src" init -q && git -C "$work/src" add -A --force  # every archived file was tracked
git -C "$work/src" -c user.name=forkpatch -c user.email=forkpatch@localhost commit -qm "$tag"
# The fork's setup.py imports torch to read its CUDA/ROCm versions, which an `empty`
# (Python-only) build does not use; a build-time stand-in that has none, not in the wheel.
mkdir -p "$work/torch-stand-in/torch/utils"
printf '__version__ = "0+stand-in"\nclass version:\n    cuda = None\n    hip = None\n    xpu = None\n' \
    >"$work/torch-stand-in/torch/__init__.py"
: >"$work/torch-stand-in/torch/utils/__init__.py"
printf 'CUDA_HOME = None\nROCM_HOME = None\n' >"$work/torch-stand-in/torch/utils/cpp_extension.py"
(cd "$work/src" && PYTHONPATH="$work/torch-stand-in" VLLM_TARGET_DEVICE=empty \
    VLLM_VERSION_OVERRIDE="${tag#v}" "$work/venv/bin/python" -m pip wheel -q --no-deps \
    --no-build-isolation -w "$work/base" .)
base=$(ls "$work"/base/1cat_vllm-*.whl)

echo "== the series overlaid (forkpatch build-wheel --mode overlay)" >&2
rm -rf "$out/dist" "$out/wheels"
(cd "$root" && "$py" -m forkpatch --fork-repo "$fork" build-wheel --mode overlay \
    --base-wheel "$base" -o "$out/dist" >&2)
wheel=$(ls "$out"/dist/1cat_vllm-*.whl)

for name in ${without[@]+"${without[@]}"}; do
    echo "== the series less $name" >&2
    v="$out/without-$name"
    rm -rf "$v" && mkdir -p "$v"
    cp -r "$root/patches" "$v/patches"
    "$py" - "$root/series.yaml" "$v/series.yaml" "$name" <<'PY'
import sys
import yaml
data = yaml.safe_load(open(sys.argv[1], encoding="utf-8"))
kept = [p for p in data["patches"] if p["name"] != sys.argv[3]]
if len(kept) == len(data["patches"]):
    sys.exit(f"--without {sys.argv[3]}: no such patch in series.yaml")
data["patches"] = kept
open(sys.argv[2], "w", encoding="utf-8").write(yaml.safe_dump(data, sort_keys=False, width=100))
PY
    (cd "$v" && "$py" -m forkpatch --fork-repo "$fork" build-wheel --mode overlay \
        --base-wheel "$base" -o "$v/dist" >&2)
done

echo "== the wheelhouses for Python $version (what $have lacks)" >&2
rm -rf "$out/forkpatch"
"$py" -m pip wheel -q --no-deps -w "$out/forkpatch" "$root"
"$py" -m forkpatch.smoke.bundle --wheel "$(ls "$out"/forkpatch/forkpatch-*.whl)" \
    --have "$have" --python-version "$version" --out "$out/forkpatch" >&2
"$py" -m forkpatch.smoke.bundle --wheel "$wheel" --have "$have" --python-version "$version" \
    --out "$out/wheels" ${keep[@]+"${keep[@]}"} >&2

cat >"$out/RUN.sh" <<'RUN'
#!/usr/bin/env bash
# On the GPU machine (no network needed): RUN.sh PROJECT [forkpatch smoke options...]
# PROJECT is the directory with series.yaml and patches/ (a clone of the project).
set -euo pipefail
project=$(cd "${1:?usage: RUN.sh PROJECT [smoke options...]}" && pwd); shift
cd "$(dirname "$0")"
python3 -m pip install -q --no-index --no-deps --force-reinstall forkpatch/*.whl
mkdir -p ptx && tar -C ptx -xJf ptx.tar.xz
if [ -f ptx-faults.tar.xz ]; then mkdir -p ptx-faults && tar -C ptx-faults -xJf ptx-faults.tar.xz; fi
# The fork's wheel first, its requirements beside it (installed into the smoke venv only).
exec forkpatch -C "$project" smoke dist/1cat_vllm-*.whl wheels/*.whl --tier gpu-jit \
    --ptx-lib ptx/libforkpatch_sm70_fp8.so "$@"
RUN
chmod +x "$out/RUN.sh"
# What one run needs (the variants and the fault-switch library travel in runs of their own).
size=$(du -sm --exclude='without-*' --exclude=ptx-faults.tar.xz "$out" | cut -f1)
echo "== $out: ${size} MiB for a run (RUN.sh, dist, wheels, forkpatch, ptx.tar.xz); all: $(du -sm "$out" | cut -f1) MiB" >&2
if [ "$size" -gt "$max" ]; then
    echo "error: a run needs ${size} MiB of $out, over --max-mib $max (a lent machine's carry is 64 MiB with the project)" >&2
    exit 1
fi
echo "$out"
