"""The summary of a run: the pull/merge request (or issue) body, deterministic (no
times, no durations), ending with the ``forkpatch-state`` marker.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from forkpatch.escape import md_cell, md_code
from forkpatch.fsutil import read_regular
from forkpatch.kinds import TIERS
from forkpatch.results import FileConflict
from forkpatch.track.stages import (
    BuildDone,
    BuildResult,
    Failed,
    PublishDone,
    PublishResult,
    RebaseConflict,
    RebaseDone,
    RebaseResult,
    RunInfo,
    RunState,
    Skipped,
    SmokeRun,
    Stages,
    state_marker,
)


def _code(text: Any) -> str:
    return md_code(str(text))


def _not_done(result: Skipped | Failed) -> list[str]:
    text = result.reason if isinstance(result, Skipped) else result.error
    tip = result.tip if isinstance(result, Failed) else None
    return [f"- {result.status}: {md_cell(text)}", *([f"- tip: {md_cell(tip)}"] if tip else []), ""]


def summary_markdown(state: RunState, work: Path | None = None) -> str:
    """The pull/merge request (or issue) body. Deterministic: no times, no durations.

    ``work``: the run's directory, where the rebase report is read from. The body
    ends with the ``forkpatch-state`` comment that a later run reads back.
    """
    info, stages = state.info, state.stages
    tag = info.tag
    out = [f"# forkpatch: {info.base_tag} → {tag} ({state.status})", ""]
    out.append(f"- fork: {info.fork_name} ({info.fork_url})")
    out.append(
        f"- new release: {_code(tag)} (`{info.key.commit[:12]}`), series base "
        f"{_code(info.base_tag)} (`{info.base_commit[:12]}`)"
    )
    newer = [t.tag + (" (held back)" if t.held_back else "") for t in info.newer]
    if len(newer) > 1:
        out.append(f"- newer tags: {', '.join(newer)}")
    out.append(f"- bot branch: {_code(info.branch)}")
    out.append(
        f"- inputs: series sha256 `{info.key.series_sha256[:16]}`, "
        f"forkpatch {info.forkpatch_version}"
    )
    out.append("")
    out += _rebase_section(info, stages.rebase, work)
    out += _build_section(stages.build)
    out += _smoke_section(stages)
    out += _droppable_section(tag, stages)
    out += _publish_section(stages.publish)
    fc = stages.rebase.forecast if isinstance(stages.rebase, (RebaseDone, RebaseConflict)) else None
    if fc:
        out += ["## Forecast: the fork's default branch", ""]
        head = f"{_code(fc.branch)} at `{fc.commit[:12]}`"
        if fc.ok:
            out.append(f"- the series applies to {head} without conflicts")
        for c in fc.conflicts:
            out.append(
                f"- {_code(c.patch)} would conflict on {head}: "
                + "; ".join(_hunks_text(x) for x in c.conflicts)
            )
        out.append("")
    out.append(state_marker(state))
    return "\n".join(out).rstrip("\n") + "\n"


def _hunks_text(c: FileConflict) -> str:
    hunks = c.hunks
    where = f"hunk{'s' if len(hunks) > 1 else ''} {', '.join(map(str, hunks))} of " if hunks else ""
    line = f" (near line {c.line})" if c.line else ""
    return f"{where}{_code(c.path)}{line}"


def _rebase_section(info: RunInfo, st: RebaseResult | None, work: Path | None) -> list[str]:
    out = ["## Rebase", ""]
    if st is None:
        return [*out, "- not run yet", ""]
    if isinstance(st, RebaseConflict):
        return out + _conflict_section(info, st)
    if isinstance(st, (Skipped, Failed)):
        return out + _not_done(st)
    counts = ", ".join(f"{n} {s}" for s, n in st.summary.items())
    out.append(f"- {len(st.patches)} patch(es): {counts}")
    if st.note:
        out.append(f"- **note:** {md_cell(st.note)}")
    out.append("")
    out.append("<details><summary>Rebase report</summary>")
    out.append("")
    report_md = _read_rebase_markdown(work, st)
    # The report has its own title; one level down inside this summary.
    out += [re.sub(r"^(#+) ", r"#\1 ", line) for line in report_md.rstrip("\n").splitlines()]
    out += ["", "</details>", ""]
    return out


def _conflict_section(info: RunInfo, st: RebaseConflict) -> list[str]:
    tag, c = info.tag, st.conflict
    out = [
        (
            f"**The series does not rebase cleanly onto {_code(tag)}.** Patch "
            f"{_code(c.patch)} conflicts; nothing was built or published."
        ),
        "",
        "| file | hunks | line | reason |",
        "|---|---|---|---|",
    ]
    for x in c.conflicts:
        out.append(
            f"| {_code(x.path)} | {', '.join(map(str, x.hunks)) or '-'} | "
            f"{x.line or '-'} | {md_cell(x.reason)} |"
        )
    if st.blocked:
        out += [
            "",
            "After it (forecast as if it were skipped; `forkpatch check --onto` says which "
            "depend on it): "
            + ", ".join(f"{_code(b)} {st.patches.get(b, '?')}" for b in st.blocked),
        ]
    others = {n: s for n, s in st.patches.items() if n not in st.blocked and n != c.patch}
    if others:
        out += ["", "Before it: " + ", ".join(f"{_code(n)} {s}" for n, s in others.items())]
    first = c.conflicts[0].path if c.conflicts else "..."
    return [
        *out,
        "",
        "### Resolve it locally",
        "",
        "```sh",
        "git switch -c " + info.branch,
        f"forkpatch rebase --onto {tag}      # stops at the conflict (a work tree)",
        f"$EDITOR .forkpatch/rebase-worktree/{first}",
        "forkpatch rebase --continue        # or --skip to drop the patch, --abort",
        f"forkpatch track --run --tag {tag} --no-publish   # build + smoke it",
        "git add -A series.yaml patches",
        f"git commit -m 'Rebase the series onto {tag}' && git push",
        "```",
        "",
    ]


def _read_rebase_markdown(work: Path | None, st: RebaseDone) -> str:
    try:
        if work is None:
            raise OSError
        return read_regular(work / st.report_markdown).decode("utf-8", errors="replace")
    except OSError:
        return f"(the report is in {st.report_markdown})\n"


def _build_section(st: BuildResult | None) -> list[str]:
    out = ["## Build", ""]
    if st is None:
        return [*out, "- not run yet", ""]
    if not isinstance(st, BuildDone):
        return out + _not_done(st)
    prov = st.provenance
    out.append(f"- version {_code(st.version)}, {st.mode} build ({st.reason})")
    if st.base_wheel:
        out.append(f"- base wheel: {_code(st.base_wheel)}")
    out.append(
        f"- source: {prov.get('fork_url')} {_code(prov.get('tag'))} "
        f"(`{str(prov.get('commit'))[:12]}`)"
    )
    out += ["", "| wheel | sha256 |", "|---|---|"]
    for name, sha in st.wheels.items():
        out.append(f"| {_code(name)} | `{sha}` |")
    out += ["", "| patch | sha256 / build step |", "|---|---|"]
    patches = prov.get("patches")
    for p in patches if isinstance(patches, list) else []:
        if not isinstance(p, Mapping):
            continue
        digest = p.get("sha256")
        shown = f"`{digest[:16]}`" if isinstance(digest, str) and digest else p.get("build_step")
        out.append(f"| {_code(str(p.get('name')))} | {shown} |")
    out.append("")
    return out


def _smoke_section(stages: Stages) -> list[str]:
    out = ["## Smoke", ""]
    st = stages.smoke
    if st is None:
        if isinstance(stages.build, BuildDone):
            return [
                *out,
                (
                    "- **smoke not run** yet: the SM70 runner has not reported. Do not merge "
                    "before it has (this description is updated when it does)."
                ),
                "",
            ]
        return [*out, "- not run yet (runs on the SM70 runner)", ""]
    if not isinstance(st, SmokeRun):
        return out + _not_done(st)
    verdict = {"done": "passed", "failed": "**FAILED**", "not-run": "**NOT RUN**"}[st.status]
    out.append(f"- {verdict} (requested up to tier {st.tier}, runner {st.runner})")
    # In a fixed order: the stage file keeps its keys sorted, and the body must not
    # change between the run that made it and one that reads it back.
    order: dict[str, int] = {t: i for i, t in enumerate(TIERS)}
    for tier, missing in sorted(st.missing.items(), key=lambda kv: (order.get(kv[0], 9), kv[0])):
        out.append(f"- **tier {tier} {missing}**: do not merge before it has run")
    for tier, s in sorted(st.tiers.items(), key=lambda kv: (order.get(kv[0], 9), kv[0])):
        why = st.not_run.get(tier)
        out.append(f"- tier {tier}: {s}" + (f" ({why})" if why else ""))
    out += ["", "| check | outcome |", "|---|---|"]
    for cid, outcome in sorted(st.checks.items()):
        out.append(f"| {_code(cid)} | {outcome if outcome != 'failed' else '**failed**'} |")
    out.append("")
    return out


def _upstream_lines(rebase: RebaseDone) -> list[str]:
    if not rebase.upstream:
        return []
    out = ["", "Upstream (what each patch sent upstream became):", ""]
    # By name: the stage file keeps its keys sorted, and the body must not change
    # between the run that made it and one that reads it back.
    for name, up in sorted(rebase.upstream.items()):
        text = up.get("state", "unknown")
        if up.get("release"):
            text += f", {up['release'] if up['release'] == 'not yet released' else 'in ' + up['release']}"
        if up.get("reason"):
            text += f" ({up['reason']})"
        out.append(f"- {_code(name)}: {text.replace('`', chr(39))}")
    return out


def _droppable_section(tag: str, stages: Stages) -> list[str]:
    """Which patches the release makes droppable: the rebase's upstreamed ones, and the
    drop-when conditions the smoke runner evaluated (``forkpatch droppable``)."""
    rebase = stages.rebase
    if not isinstance(rebase, RebaseDone):
        return []
    out = [f"## Droppable at {tag}", ""]
    for name, status in sorted(rebase.patches.items()):
        if status == "upstreamed":
            out.append(
                f"- {_code(name)}: **droppable**, upstreamed at {_code(tag)} (the rebase dropped it)"
            )
    smoke = stages.smoke
    verdicts = smoke.droppable if isinstance(smoke, SmokeRun) else None
    if verdicts is None:
        out.append(
            "- the other patches' drop-when conditions: not evaluated (no smoke run with a "
            f"base wheel; `forkpatch droppable --onto {tag} --base-wheel WHEEL` evaluates them)"
        )
    else:
        for name, v in sorted(verdicts.items()):  # by name, as the stage file keeps them
            verdict = v.get("verdict", "?")
            shown = f"**{verdict}**" if verdict == "droppable" else verdict
            evidence = str(v.get("evidence", "")).replace("`", "'")
            out.append(f"- {_code(name)}: {shown}: {_code(evidence)}")
    out += _upstream_lines(rebase)
    out.append("")
    return out


def _publish_section(st: PublishResult | None) -> list[str]:
    out = ["## Publish", ""]
    if st is None:
        return [*out, "- not run yet", ""]
    if not isinstance(st, PublishDone):
        return out + _not_done(st)
    out.append(f"- to {st.target}")
    for name in st.wheels:
        out.append(f"- {_code(name)}: published")
    if st.allowed_missing_tiers:
        out.append(
            f"- **published without tier(s)** {', '.join(st.allowed_missing_tiers)} "
            "(--allow-missing-tier)"
        )
    out.append("")
    return out
