#!/usr/bin/env bash
# Everything the real-fork test tier (marker real_fork) needs,
# installed into the python that runs the tests ($PYTHON, default python3):
#
#   1. forkpatch itself with its test extra (editable);
#   2. a CPU torch ($FORKPATCH_TORCH, default torch==2.13.0: what the fixture
#      wheel was built with; CI machines have it as a local wheel). Kept when
#      torch is importable already. Elsewhere, e.g.
#      FORKPATCH_TORCH="torch --index-url https://download.pytorch.org/whl/cpu";
#   3. the fork's Python-only build toolchain (VLLM_TARGET_DEVICE=empty wheels):
#      setuptools>=77.0.3,<81, setuptools-scm, setuptools-rust, wheel, build;
#   4. the fork's own runtime requirements (requirements/common.txt at the
#      series' base commit, read from the fork repository: FORKPATCH_FORK_REPO,
#      else the fixture ../shared/fixtures/1cat-vllm.git).
#
# Usage: bash tests/support/setup-real-fork.sh   (about 2 minutes with a warm pip cache)
set -euo pipefail
cd "$(dirname "$0")/../.."
PY="${PYTHON:-python3}"
FORK="${FORKPATCH_FORK_REPO:-../shared/fixtures/1cat-vllm.git}"
TORCH="${FORKPATCH_TORCH:-torch==2.13.0}"

echo "== forkpatch and its test dependencies"
"$PY" -m pip install -q -e '.[test]'

echo "== CPU torch"
if "$PY" -c 'import torch' 2>/dev/null; then
  echo "torch $("$PY" -c 'import torch; print(torch.__version__)') is importable already"
else
  # shellcheck disable=SC2086  # FORKPATCH_TORCH may carry pip options
  "$PY" -m pip install -q $TORCH
fi

echo "== the fork's Python-only build toolchain"
"$PY" -m pip install -q 'setuptools>=77.0.3,<81' 'setuptools-scm>=8' 'setuptools-rust>=1.9' \
  wheel build

echo "== the fork's runtime requirements"
if ! git --git-dir="$FORK" rev-parse -q --verify HEAD >/dev/null 2>&1 &&
  ! git -C "$FORK" rev-parse -q --verify HEAD >/dev/null 2>&1; then
  echo "error: no fork repository at $FORK: set FORKPATCH_FORK_REPO to a clone of 1Cat-vLLM" >&2
  exit 1
fi
base="$("$PY" -c 'import yaml; print(yaml.safe_load(open("series.yaml"))["base"]["commit"])')"
reqs="$(mktemp)"
trap 'rm -f "$reqs"' EXIT
git -C "$FORK" show "$base:requirements/common.txt" >"$reqs"
"$PY" -m pip install -q -r "$reqs"
echo "== done: $("$PY" -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)')"
