#!/usr/bin/env bash
# The rebase benchmarks in one command, offline (issues 3 and 14):
#
#   bench/run_rebase_benches.sh [WORKDIR]
#
# generates the dataset when missing (gen_tree.py), then times, side by side with
# git rebase and git am -3: a rebase without conflicts (bench_rebase.py) and one with
# CONFLICTS stops resolved by a script (bench_conflicts.py), then small series on
# small and real trees (bench_small_series.py, not with SKIP_GIT). Output: the tables on
# stdout and in bench/out/*.txt, the runs in bench/out/*.json.
# Environment: PYTHON (python3), REPS (3), N (300 patches), CONFLICTS (20),
# SKIP_GIT=1 to time forkpatch only (e.g. an older checkout put first on PYTHONPATH).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
work=${1:-${FORKPATCH_BENCH_DIR:-/tmp/forkpatch-bench}}
py=${PYTHON:-python3}
reps=${REPS:-3}
n=${N:-300}
k=${CONFLICTS:-20}
tag=${TAG:-}
mkdir -p "$here/out"
skip_rebase="quilt,proxy"
skip_conflicts=""
if [ "${SKIP_GIT:-0}" = 1 ]; then
    skip_rebase="quilt,proxy,rebase,am"
    skip_conflicts="rebase,am"
fi
"$py" "$here/gen_tree.py" --workdir "$work" --sizes "100,$n"
"$py" "$here/bench_rebase.py" --workdir "$work" --sizes "$n" --reps "$reps" \
    --skip "$skip_rebase" | tee "$here/out/rebase-$n$tag.txt"
"$py" "$here/bench_conflicts.py" --workdir "$work" -n "$n" --conflicts "$k" --reps "$reps" \
    ${skip_conflicts:+--skip "$skip_conflicts"} | tee "$here/out/conflicts-$n-$k$tag.txt"
if [ "${SKIP_GIT:-0}" != 1 ]; then
    "$py" "$here/bench_small_series.py" --workdir "$work/small-series" --rounds "$reps" --count-git \
        | tee "$here/out/small-series$tag.txt"
fi
