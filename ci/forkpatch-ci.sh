#!/usr/bin/env bash
# The one driver behind forkpatch's scheduled pipelines (GitHub Actions and
# GitLab CI): every job calls `ci/forkpatch-ci.sh STEP`, so the logic lives
# here and in `forkpatch track`, never in the CI files.
#
#   ci/forkpatch-ci.sh track        list the fork's tags; check + rebase the newest
#                                   release (any Linux runner)
#   ci/forkpatch-ci.sh build        build the wheel(s) (a runner with a Docker engine)
#   ci/forkpatch-ci.sh smoke        smoke suite, every tier this runner has (SM70 runner)
#   ci/forkpatch-ci.sh publish      publish the smoked wheel(s) (credentials from CI secrets)
#   ci/forkpatch-ci.sh open-change  commit the rebased series on the bot branch and open /
#                                   update its pull (merge) request, or an issue on a conflict
#   ci/forkpatch-ci.sh all          track + build + smoke + publish on this one machine
#
# The steps pass one directory along ($FORKPATCH_OUT, a CI artifact). Each step
# is idempotent: a stage already done for the same tag commit and the same
# series is not done again; the bot branch gets the same commit for the same
# inputs; publishing the same file again is a no-op.
#
# Environment (all optional):
#   FORKPATCH_PROJECT     the project directory (series.yaml), default .
#   FORKPATCH_OUT         the output directory passed between jobs, default ./forkpatch-out
#   FORKPATCH_TAG         act on this tag instead of the newest release (later steps
#                         default to the tag the track step chose)
#   FORKPATCH_FORK_REPO   a local clone of the fork (instead of fork.url)
#   FORKPATCH_BASE_WHEEL  the fork's release wheel; {tag}/{version} are filled in
#   FORKPATCH_PUBLISH_TO  publish target (default: publish.to in series.yaml; none: skip)
#   FORKPATCH_SMOKE_TIER  highest smoke tier, default sm70 (absent hardware = not run)
#   FORKPATCH_TRACK_ARGS  more `forkpatch track --run` options (word-split)
#   FORKPATCH_BIN         how to run forkpatch, default `forkpatch` (word-split)
#   FORKPATCH_CI_DRY_RUN  1: print the push / API calls of open-change instead of making them
#   FORKPATCH_CI_PLATFORM github | gitlab (default: from GITHUB_ACTIONS / GITLAB_CI)
#   FORKPATCH_BASE_BRANCH the branch pull requests target (default: the pipeline's branch)
#   GH_TOKEN              GitHub: token for `gh` (the workflow passes one)
#   FORKPATCH_GITLAB_TOKEN GitLab: project access token (api, write_repository)
#
# Outputs: $FORKPATCH_OUT/<step>.json (what forkpatch printed), and status / tag /
# branch in $GITHUB_OUTPUT (GitHub) and $FORKPATCH_OUT/forkpatch.env (GitLab dotenv).
# Exit: 0 done, up to date, or the rebase conflicts (open-change opens the issue);
# non-zero when a step failed.
set -euo pipefail

STEP="${1:-}"
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
    [ -f "$OUT/track.json" ] && json "$OUT/track.json" tag
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
    { echo "FORKPATCH_STATUS=$status"; echo "FORKPATCH_TARGET_TAG=$tag"
      echo "FORKPATCH_BOT_BRANCH=$branch"; } >"$OUT/forkpatch.env"
    if [ -n "${GITHUB_STEP_SUMMARY:-}" ] && [ -n "$tag" ] && [ -f "$OUT/$(cat "$OUT/latest" 2>/dev/null)/summary.md" ]; then
        cat "$OUT/$(cat "$OUT/latest")/summary.md" >>"$GITHUB_STEP_SUMMARY"
    fi
}

# run_track NAME STEPS [TAG]: forkpatch track --run for STEPS; exit code kept in RC.
run_track() {
    local name="$1" steps="$2" tag="${3:-}"
    local args=(-C "$PROJECT" track --run --json --out "$OUT" --steps "$steps"
                --smoke-tier "${FORKPATCH_SMOKE_TIER:-sm70}")
    [ -n "$tag" ] && args+=(--tag "$tag")
    [ "$name" = track ] || args+=(--no-forecast)
    say "+ ${FP[*]} ${args[*]} ${EXTRA[*]:-}"
    set +e
    "${FP[@]}" "${args[@]}" ${EXTRA[@]+"${EXTRA[@]}"} >"$OUT/$name.json"
    RC=$?
    set -e
    publish_outputs "$OUT/$name.json"
}

# Later steps run only when the track step rebased the series.
need_rebased() {
    local status
    status="$(json "$OUT/track.json" status)"
    case "$status" in
        rebased|built|smoked|published) return 0 ;;
        "") die "no track result in $OUT (run the track step first and pass $OUT along)" ;;
        *) say "nothing to $STEP: the track step says '$status'"; publish_outputs "$OUT/track.json"
           exit 0 ;;
    esac
}

step_track() {
    run_track track rebase "${FORKPATCH_TAG:-}"
    case "$RC" in
        0) ;;
        3) say "the rebase conflicts: open-change opens an issue with the summary" ;;
        *) exit "$RC" ;;
    esac
}

step_stage() {
    need_rebased
    local tag
    tag="$(chosen_tag)"
    run_track "$STEP" "$STEP" "$tag"
    exit "$RC"
}

step_all() {
    run_track track rebase,build,smoke,publish "${FORKPATCH_TAG:-}"
    case "$RC" in 0|3) exit 0 ;; *) exit "$RC" ;; esac
}

# ---------------------------------------------------------------- open-change

dry() { [ "${FORKPATCH_CI_DRY_RUN:-0}" = 1 ]; }

step_open_change() {
    local args=(-C "$PROJECT" track --make-branch --json --out "$OUT")
    local tag
    tag="$(chosen_tag || true)"
    if [ -z "$tag" ] && [ -f "$OUT/track.json" ]; then
        local status
        status="$(json "$OUT/track.json" status)"
        if [ "$status" = up-to-date ]; then say "up to date: nothing to propose"; exit 0; fi
    fi
    [ -n "$tag" ] && args+=(--tag "$tag")
    say "+ ${FP[*]} ${args[*]}"
    "${FP[@]}" "${args[@]}" >"$OUT/change.json"
    local kind title body branch commit
    kind="$(json "$OUT/change.json" kind)"
    title="$(json "$OUT/change.json" title)"
    body="$(json "$OUT/change.json" body_file)"
    branch="$(json "$OUT/change.json" branch)"
    commit="$(json "$OUT/change.json" commit)"
    local where
    where="$(platform)"
    case "$kind" in
        pull)  push_branch "$where" "$branch" "$commit"
               open_pull "$where" "$branch" "$title" "$body" ;;
        issue) open_issue "$where" "$title" "$body" ;;
        *)     say "nothing to propose ($title)" ;;
    esac
}

push_branch() {
    local where="$1" branch="$2" commit="$3" remote=origin
    if [ "$where" = gitlab ] && [ -n "${FORKPATCH_GITLAB_TOKEN:-}" ]; then
        remote="https://oauth2:${FORKPATCH_GITLAB_TOKEN}@${CI_SERVER_HOST}/${CI_PROJECT_PATH}.git"
    fi
    # The bot branch belongs to the bot: force, but only this one ref. The same
    # inputs give the same commit, so a second push changes nothing.
    if dry; then
        say "dry run: would run: git push --force origin $commit:refs/heads/$branch"
        return
    fi
    git -C "$PROJECT" push --force "$remote" "$commit:refs/heads/$branch" 2>&1 \
        | sed "s#${FORKPATCH_GITLAB_TOKEN:-@@no-token@@}#***#g" >&2
}

base_branch() {
    echo "${FORKPATCH_BASE_BRANCH:-${GITHUB_REF_NAME:-${CI_COMMIT_BRANCH:-${CI_DEFAULT_BRANCH:-main}}}}"
}

open_pull() {
    local where="$1" branch="$2" title="$3" body="$4"
    case "$where" in
        github)
            if dry; then
                say "dry run: would run: gh pr create --head $branch --base $(base_branch) --title '$title' --body-file $body (or gh pr edit on the open one)"
                return
            fi
            local number
            number="$(gh pr list --head "$branch" --state open --json number --jq '.[0].number // empty')"
            if [ -n "$number" ]; then
                gh pr edit "$number" --title "$title" --body-file "$body" >&2
                say "updated pull request #$number"
            else
                gh pr create --head "$branch" --base "$(base_branch)" --title "$title" \
                    --body-file "$body" >&2
            fi ;;
        gitlab)
            local api="${CI_API_V4_URL:-https://gitlab.com/api/v4}/projects/${CI_PROJECT_ID:-?}"
            if dry; then
                say "dry run: would GET $api/merge_requests?state=opened&source_branch=$branch, then PUT its description or POST a new merge request into $(base_branch) titled '$title' with $body"
                return
            fi
            local iid payload
            iid="$(gl GET "$api/merge_requests?state=opened&source_branch=$(urlenc "$branch")" \
                | "$PY" -c 'import json,sys; d=json.load(sys.stdin); print(d[0]["iid"] if d else "")')"
            payload="$(mk_payload "$title" "$body" source_branch="$branch" \
                       target_branch="$(base_branch)" remove_source_branch=true)"
            if [ -n "$iid" ]; then
                gl PUT "$api/merge_requests/$iid" "$payload" >/dev/null
                say "updated merge request !$iid"
            else
                gl POST "$api/merge_requests" "$payload" >/dev/null
                say "opened a merge request from $branch"
            fi ;;
        *)
            say "no CI platform: the branch $branch is ready; body in $body"
            say "set FORKPATCH_CI_PLATFORM=github|gitlab to open the request" ;;
    esac
}

open_issue() {
    local where="$1" title="$2" body="$3"
    case "$where" in
        github)
            if dry; then
                say "dry run: would run: gh issue create --title '$title' --body-file $body (or gh issue edit on the open one with that title)"
                return
            fi
            local number
            number="$(gh issue list --state open --search "in:title \"$title\"" \
                      --json number,title --jq ".[] | select(.title == $(jsonstr "$title")) | .number" | head -n1)"
            if [ -n "$number" ]; then
                gh issue edit "$number" --body-file "$body" >&2
                say "updated issue #$number"
            else
                gh issue create --title "$title" --body-file "$body" >&2
            fi ;;
        gitlab)
            local api="${CI_API_V4_URL:-https://gitlab.com/api/v4}/projects/${CI_PROJECT_ID:-?}"
            if dry; then
                say "dry run: would GET $api/issues?state=opened&in=title&search=..., then PUT its description or POST a new issue titled '$title' with $body"
                return
            fi
            local iid
            iid="$(gl GET "$api/issues?state=opened&in=title&search=$(urlenc "$title")" \
                | "$PY" -c 'import json,sys; t=sys.argv[1]; d=[i for i in json.load(sys.stdin) if i["title"]==t]; print(d[0]["iid"] if d else "")' "$title")"
            if [ -n "$iid" ]; then
                gl PUT "$api/issues/$iid" "$(mk_payload "$title" "$body")" >/dev/null
                say "updated issue #$iid"
            else
                gl POST "$api/issues" "$(mk_payload "$title" "$body")" >/dev/null
                say "opened an issue: $title"
            fi ;;
        *)
            say "no CI platform: would open an issue '$title' with $body" ;;
    esac
}

jsonstr() { "$PY" -c 'import json,sys; print(json.dumps(sys.argv[1]))' "$1"; }
urlenc() { "$PY" -c 'import sys,urllib.parse as u; print(u.quote(sys.argv[1], safe=""))' "$1"; }

# mk_payload TITLE BODYFILE [key=value...]: the JSON body of a GitLab request.
mk_payload() {
    "$PY" - "$@" <<'EOF'
import json, sys
title, body, *extra = sys.argv[1:]
data = {"title": title, "description": open(body, encoding="utf-8").read()}
for kv in extra:
    k, _, v = kv.partition("=")
    data[k] = {"true": True, "false": False}.get(v, v)
print(json.dumps(data))
EOF
}

# gl METHOD URL [JSON]: one GitLab API call with the project token (never echoed).
gl() {
    : "${FORKPATCH_GITLAB_TOKEN:?set FORKPATCH_GITLAB_TOKEN (a project access token with api scope) in the CI/CD variables}"
    local args=(--silent --show-error --fail-with-body -X "$1" -H "PRIVATE-TOKEN: $FORKPATCH_GITLAB_TOKEN")
    [ $# -ge 3 ] && args+=(-H "Content-Type: application/json" --data "$3")
    curl "${args[@]}" "$2"
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
