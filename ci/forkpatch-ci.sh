#!/usr/bin/env bash
# The one driver behind forkpatch's scheduled pipelines (GitHub Actions and
# GitLab CI): every job calls `ci/forkpatch-ci.sh STEP`, so the logic lives
# here, in ci/forge.py and in `forkpatch track`, never in the CI files.
#
#   ci/forkpatch-ci.sh track        list the fork's tags, check + rebase the newest
#                                   release (any Linux runner); says whether anything
#                                   is left to do (GitLab: writes the act pipeline)
#   ci/forkpatch-ci.sh build        build the wheel(s) (a runner with a Docker engine)
#   ci/forkpatch-ci.sh smoke        smoke suite, every tier this runner has (SM70 runner)
#   ci/forkpatch-ci.sh publish      publish the smoked wheel(s) (credentials from CI secrets)
#   ci/forkpatch-ci.sh open-change  commit the rebased series on the bot branch, push it and
#                                   open / update its pull (merge) request, or an issue on
#                                   a conflict; credentials are checked before the push
#   ci/forkpatch-ci.sh all          track + build + smoke + publish on this one machine
#
# The steps pass one directory along ($FORKPATCH_OUT, a CI artifact); each stage
# writes only its own files there (<tag>/stages/<stage>.json and its directory),
# so artifacts can arrive in any order. A step that finds no rebase result runs
# the rebase itself (it is cheap and gives the same result). Each step is
# idempotent: a stage already done for the same tag commit and series is not
# done again; the bot branch gets the same commit for the same inputs; the open
# change is updated, never doubled. The track step reads the open change's body:
# when it already reports a final outcome for the same inputs, nothing runs.
#
# Environment (all optional):
#   FORKPATCH_PROJECT     the project directory (series.yaml), default .
#   FORKPATCH_OUT         the output directory passed between jobs, default ./forkpatch-out
#   FORKPATCH_TAG         act on this tag instead of the newest release (later steps
#                         default to the tag the track step chose)
#   FORKPATCH_FORCE       1: do every stage again even if the open change reports them
#   FORKPATCH_FORK_REPO   a local clone of the fork (instead of fork.url)
#   FORKPATCH_BASE_WHEEL  the fork's release wheel; {tag}/{version} are filled in
#   FORKPATCH_PUBLISH_TO  publish target (default: publish.to in series.yaml; none: skip)
#   FORKPATCH_NO_PUBLISH  1: do everything but publish
#   FORKPATCH_SMOKE_TIER  highest smoke tier, default sm70 (absent hardware = not run)
#   FORKPATCH_TRACK_ARGS  more `forkpatch track --run` options (word-split)
#   FORKPATCH_BIN         how to run forkpatch, default `forkpatch` (word-split)
#   FORKPATCH_CI_DRY_RUN  1: print the push / API calls of open-change instead of making them
#   FORKPATCH_CI_PLATFORM github | gitlab (default: from GITHUB_ACTIONS / GITLAB_CI)
#   FORKPATCH_BASE_BRANCH the branch pull requests target (default: the pipeline's branch)
#   FORKPATCH_PUSH_URL    where the bot branch is pushed (default: origin on GitHub, the
#                         project over https with FORKPATCH_GITLAB_TOKEN on GitLab)
#   GH_TOKEN              GitHub: token for `gh` and the push (the workflow passes one)
#   FORKPATCH_GITLAB_TOKEN GitLab: project access token (scopes api, write_repository)
#   FORKPATCH_GITLAB_API  GitLab: the API URL (default CI_API_V4_URL)
#
# Outputs: $FORKPATCH_OUT/<step>.json (what forkpatch printed); status / tag /
# branch in $GITHUB_OUTPUT (GitHub); $FORKPATCH_OUT/act.yml, the rest of the
# pipeline (GitLab: build/smoke/publish/change for a new release, the issue job
# for a conflict, one no-op job when there is nothing new).
# Exit: 0 done, up to date, or the rebase conflicts (open-change opens the issue);
# non-zero when a step failed.
set -euo pipefail

STEP="${1:-}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PROJECT="${FORKPATCH_PROJECT:-.}"
OUT="${FORKPATCH_OUT:-forkpatch-out}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
read -r -a FP <<<"${FORKPATCH_BIN:-forkpatch}"
read -r -a EXTRA <<<"${FORKPATCH_TRACK_ARGS:-}"
PY="${PYTHON:-python3}"

say() { echo "[forkpatch-ci] $*" >&2; }
die() { say "error: $*"; exit 1; }

# json FILE KEY[.KEY...]: print a value of a JSON file ("" when absent).
json() {
    "$PY" - "$1" "$2" <<'EOF'
import json, sys
try:
    data = json.load(open(sys.argv[1], encoding="utf-8"))
except (OSError, ValueError):
    data = {}
for key in sys.argv[2].split("."):
    data = data.get(key) if isinstance(data, dict) else None
print("" if data is None else data)
EOF
}

forge() { "$PY" "$HERE/forge.py" "$@"; }
dry() { [ "${FORKPATCH_CI_DRY_RUN:-0}" = 1 ]; }

platform() {
    if [ -n "${FORKPATCH_CI_PLATFORM:-}" ]; then echo "$FORKPATCH_CI_PLATFORM"
    elif [ "${GITHUB_ACTIONS:-}" = true ]; then echo github
    elif [ "${GITLAB_CI:-}" = true ]; then echo gitlab
    else echo none
    fi
}

# The tag the track step chose (later steps act on exactly that one).
chosen_tag() {
    if [ -n "${FORKPATCH_TAG:-}" ]; then echo "$FORKPATCH_TAG"; return; fi
    if [ -f "$OUT/track.json" ]; then json "$OUT/track.json" tag; fi
}

# has_stage TAG STAGE: that stage's result is in $OUT.
has_stage() {
    local dir
    dir="$("$PY" -c 'import re,sys; print(re.sub(r"[^A-Za-z0-9._-]+", "_", sys.argv[1]))' "$1")"
    [ -f "$OUT/$dir/stages/$2.json" ]
}

# publish_outputs FILE: status / tag / branch for the next jobs.
publish_outputs() {
    local status tag branch
    status="$(json "$1" status)"
    tag="$(json "$1" tag)"
    branch="$(json "$1" branch)"
    say "status: ${status:-unknown}${tag:+, tag $tag}${branch:+, branch $branch}"
    if [ -n "${GITHUB_OUTPUT:-}" ]; then
        { echo "status=$status"; echo "tag=$tag"; echo "branch=$branch"; } >>"$GITHUB_OUTPUT"
    fi
    if [ -n "${GITHUB_STEP_SUMMARY:-}" ] && [ -n "$tag" ] && [ -f "$OUT/$(cat "$OUT/latest" 2>/dev/null)/summary.md" ]; then
        cat "$OUT/$(cat "$OUT/latest")/summary.md" >>"$GITHUB_STEP_SUMMARY"
    fi
}

# run_track NAME STEPS [TAG [PROPOSED]]: forkpatch track --run for STEPS; exit code in RC.
run_track() {
    local name="$1" steps="$2" tag="${3:-}" proposed="${4:-}"
    local args=(-C "$PROJECT" track --run --json --out "$OUT" --steps "$steps"
                --smoke-tier "${FORKPATCH_SMOKE_TIER:-sm70}")
    [ -n "$tag" ] && args+=(--tag "$tag")
    [ -n "$proposed" ] && args+=(--proposed "$proposed")
    # The forecast goes with the rebase, wherever the rebase runs.
    case ",$steps," in *,rebase,*) ;; *) args+=(--no-forecast) ;; esac
    [ "${FORKPATCH_NO_PUBLISH:-0}" = 1 ] && args+=(--no-publish)
    say "+ ${FP[*]} ${args[*]} ${EXTRA[*]:-}"
    set +e
    "${FP[@]}" "${args[@]}" ${EXTRA[@]+"${EXTRA[@]}"} >"$OUT/$name.json"
    RC=$?
    set -e
    publish_outputs "$OUT/$name.json"
}

# The open change's body for the release the project would act on, in $OUT/proposed.md
# (empty when there is none, when FORKPATCH_FORCE=1, or when the forge cannot be read).
fetch_proposed() {
    local args=(-C "$PROJECT" track --json --no-forecast) tag branch
    : >"$OUT/proposed.md"
    [ "${FORKPATCH_FORCE:-0}" = 1 ] && { say "FORKPATCH_FORCE=1: every stage runs again"; return; }
    [ "$(platform)" = none ] && return
    [ -n "${FORKPATCH_TAG:-}" ] && args+=(--tag "$FORKPATCH_TAG")
    set +e
    "${FP[@]}" "${args[@]}" >"$OUT/list.json"
    set -e
    tag="$(json "$OUT/list.json" target.tag)"
    branch="$(json "$OUT/list.json" bot_branch)"
    [ -n "$tag" ] || return 0
    forge previous --branch "$branch" --tag "$tag" >"$OUT/proposed.md"
}

# GitLab: the rest of the pipeline, as a child pipeline for `trigger: include: artifact`.
write_act_pipeline() {
    local status="$1" tag="$2" kind
    case "$status" in
        rebased) kind=release ;;
        conflict) kind=conflict ;;
        *) kind=idle ;;
    esac
    {
        echo "# Written by ci/forkpatch-ci.sh track: status '$status'."
        echo "variables:"
        echo "  FORKPATCH_TAG: \"$tag\""
        echo "  FORKPATCH_STATUS: \"$status\""
        cat "$HERE/gitlab/act-common.yml" "$HERE/gitlab/act-$kind.yml"
    } >"$OUT/act.yml"
    say "next: the $kind pipeline ($OUT/act.yml)"
}

step_track() {
    fetch_proposed
    run_track track rebase "${FORKPATCH_TAG:-}" "$OUT/proposed.md"
    write_act_pipeline "$(json "$OUT/track.json" status)" "$(json "$OUT/track.json" tag)"
    case "$RC" in
        0) ;;
        3) say "the rebase conflicts: open-change opens an issue with the summary" ;;
        *) exit "$RC" ;;
    esac
}

# Later steps run only when the track step (if its output is here) rebased the series.
need_rebased() {
    [ -f "$OUT/track.json" ] || return 0
    local status
    status="$(json "$OUT/track.json" status)"
    case "$status" in
        rebased|built|smoked|published) ;;
        *) say "nothing to $STEP: the track step says '${status:-nothing}'"; exit 0 ;;
    esac
}

# steps_for TAG STAGE: STAGE, with the rebase first when its result is not here.
steps_for() {
    if has_stage "$1" rebase; then echo "$2"; else echo "rebase,$2"; fi
}

step_stage() {
    need_rebased
    local tag
    tag="$(chosen_tag)"
    [ -n "$tag" ] || die "no tag to $STEP: set FORKPATCH_TAG or pass the track step's $OUT along"
    run_track "$STEP" "$(steps_for "$tag" "$STEP")" "$tag"
    exit "$RC"
}

step_all() {
    fetch_proposed
    run_track track rebase,build,smoke,publish "${FORKPATCH_TAG:-}" "$OUT/proposed.md"
    case "$RC" in 0|3) exit 0 ;; *) exit "$RC" ;; esac
}

# ---------------------------------------------------------------- open-change

step_open_change() {
    need_rebased_or_conflict
    local tag
    tag="$(chosen_tag)"
    [ -n "$tag" ] || die "no tag: set FORKPATCH_TAG or pass the track step's $OUT along"
    if ! has_stage "$tag" rebase; then
        run_track rebase rebase "$tag"
        case "$RC" in 0|3) ;; *) exit "$RC" ;; esac
    fi
    local args=(-C "$PROJECT" track --make-branch --json --out "$OUT" --tag "$tag")
    say "+ ${FP[*]} ${args[*]}"
    "${FP[@]}" "${args[@]}" >"$OUT/change.json"
    local kind title body branch commit where
    kind="$(json "$OUT/change.json" kind)"
    title="$(json "$OUT/change.json" title)"
    body="$(json "$OUT/change.json" body_file)"
    branch="$(json "$OUT/change.json" branch)"
    commit="$(json "$OUT/change.json" commit)"
    where="$(platform)"
    case "$kind" in
        pull|issue) ;;
        *) say "nothing to propose ($title)"; return ;;
    esac
    if dry; then
        [ "$kind" = pull ] && say "dry run: would run: git push --force origin $commit:refs/heads/$branch"
        say "dry run: would open or update the $kind '$title' ($where) with $body"
        return
    fi
    if [ "$where" = none ]; then
        say "no CI platform: the $kind is ready (branch ${branch:-none}); body in $body"
        say "set FORKPATCH_CI_PLATFORM=github|gitlab to open it"
        return
    fi
    # Every credential this step needs, before anything leaves the machine.
    forge check || exit 1
    if [ "$kind" = pull ]; then
        push_branch "$where" "$branch" "$commit"
        forge pull --branch "$branch" --base "$(base_branch)" --title "$title" --body-file "$body"
    else
        forge issue --title "$title" --body-file "$body"
    fi
}

need_rebased_or_conflict() {
    [ -f "$OUT/track.json" ] || return 0
    case "$(json "$OUT/track.json" status)" in
        up-to-date|unchanged) say "nothing to propose: the track step says '$(json "$OUT/track.json" status)'"
                              exit 0 ;;
    esac
}

push_branch() {
    local where="$1" branch="$2" commit="$3" remote="${FORKPATCH_PUSH_URL:-origin}" secret=""
    if [ -z "${FORKPATCH_PUSH_URL:-}" ] && [ "$where" = gitlab ]; then
        secret="$FORKPATCH_GITLAB_TOKEN"
        remote="${CI_SERVER_PROTOCOL:-https}://oauth2:${secret}@${CI_SERVER_HOST:-gitlab.com}/${CI_PROJECT_PATH:-?}.git"
    fi
    # The bot branch belongs to the bot: force, but only this one ref. The same
    # inputs give the same commit, so a second push changes nothing.
    say "+ git push --force <remote> $commit:refs/heads/$branch"
    local log rc=0
    log="$(git -C "$PROJECT" push --force "$remote" "$commit:refs/heads/$branch" 2>&1)" || rc=$?
    if [ -n "$secret" ]; then log="${log//"$secret"/***}"; fi
    printf '%s\n' "$log" >&2
    [ "$rc" = 0 ] || die "git push of $branch failed (exit $rc): the token needs write access to the repository (GitHub: contents: write; GitLab: write_repository)"
}

base_branch() {
    echo "${FORKPATCH_BASE_BRANCH:-${GITHUB_REF_NAME:-${CI_COMMIT_BRANCH:-${CI_DEFAULT_BRANCH:-main}}}}"
}

# ---------------------------------------------------------------- main

case "$STEP" in
    track) step_track ;;
    build|smoke|publish) step_stage ;;
    all) step_all ;;
    open-change) step_open_change ;;
    ""|-h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' ; exit 0 ;;
    *) die "unknown step '$STEP' (track, build, smoke, publish, open-change, all)" ;;
esac
