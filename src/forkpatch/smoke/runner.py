"""The smoke suite: one wheel (plus companions) through a fresh environment and the checks.

:func:`run_smoke` is the one core call behind ``forkpatch smoke``:

1. read the wheels on the host (sha256, version, provenance);
2. plan the checks: the baseline of each tier plus the ``smoke:`` checks of
   every patch in the wheel's provenance (looked up in series.yaml);
3. create the isolated venv (:mod:`forkpatch.smoke.env`) and install exactly
   the given wheels;
4. run :mod:`forkpatch.smoke.incheck` there with the venv's interpreter, from a
   copy of the package beside the venv (:func:`copy_suite`);
5. build the report and store it by sha256 (``.forkpatch/smoke/<sha256>.json``
   in the project, else ``<wheel>.smoke.json`` beside the wheel).
"""

from __future__ import annotations

import json
import shlex
import shutil
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from forkpatch import checkids, log, proc
from forkpatch.errors import SmokeError, TierNotRun
from forkpatch.fsutil import file_sha256
from forkpatch.kinds import CHECK_OUTCOMES, TIERS, CheckOutcome, JsonObject, JsonValue, Tier
from forkpatch.proc import Deadline, tail
from forkpatch.series import PatchEntry
from forkpatch.smoke import checks as registry
from forkpatch.smoke import incheck, session
from forkpatch.smoke.env import clean_env, smoke_env
from forkpatch.smoke.kernels import HOST_CHECKS, host_not_applicable, run_host_checks
from forkpatch.smoke.report import (
    DECLARED_CHECK_FAILED,
    ERROR,
    FAILED,
    INCOMPLETE,
    NOT_RUN,
    PASSED,
    CheckResult,
    SmokeReport,
    TierResult,
    beside_wheel,
    json_object,
    junit_xml,
    now_iso,
    read_report,
    store_path,
    write_report,
)
from forkpatch.smoke.session import CheckOverran, run_incheck_resumed, team_server
from forkpatch.smoke.team import check_env, run_team_checks
from forkpatch.smoke.team import fork_tests as _fork_tests
from forkpatch.smoke.wheelinfo import wheel_entry, wheel_vs_series
from forkpatch.wheels.wheelinfo import WheelInfo, read_wheel

if TYPE_CHECKING:
    from forkpatch.project import Project

DEFAULT_DISTRIBUTION = "1cat-vllm"


@dataclass(frozen=True)
class SmokeOptions:
    """What ``forkpatch smoke`` was asked to do."""

    wheels: tuple[Path, ...]
    tier: Tier = "sm70"  # static < gpu < sm70 cumulative; gpu-jit: static, gpu, gpu-jit
    deps: str = "system"
    python: str | None = None
    index_url: str | None = None
    keep_env: bool = False
    timeout_s: float = 3600.0
    report_path: Path | None = None  # an extra copy of the JSON report
    junit_path: Path | None = None
    #: Run only these checks, whether or not the wheel's patches ask for them
    #: (``smoke --bisect`` re-runs just the failing ones). Empty: the full plan.
    checks: tuple[str, ...] = ()
    #: The fork's SM70 FP8 kernels as compute_70 PTX (ci/sm70-ptx-lib.sh), for gpu-jit.
    ptx_lib: Path | None = None
    #: Tiers that may be missing from the result without :attr:`SmokeOutcome.missing`
    #: naming them (``--allow-missing-tier``): the report still says they did not run.
    allow_missing_tiers: tuple[str, ...] = ()
    #: Where the team's own checks (series.yaml smoke.checks) run, and their pytest
    #: node ids are found (default: the project's directory).
    checks_root: Path | None = None


@dataclass(frozen=True)
class SmokeOutcome:
    #: What ran and how; its ``to_json()`` is the report file's content.
    report: SmokeReport
    written: list[Path] = field(default_factory=list)
    #: tier -> why, for each tier that was asked for (``--tier`` and the tiers below it,
    #: ``smoke.required-tiers``) and did not run or ran incomplete, unless allowed.
    missing: dict[str, str] = field(default_factory=dict)
    #: the same for the tiers that were allowed to be missing.
    allowed_missing: dict[str, str] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        """No check failed or errored (a tier that did not run is :attr:`missing`)."""
        return self.report.passed

    def not_run_error(self) -> TierNotRun:
        """The error for :attr:`missing`: each tier with why, and the two ways on."""
        lines = [f"tier {tier} {why}" for tier, why in self.missing.items()]
        accept = " ".join(f"--allow-missing-tier {t}" for t in self.missing)
        where = "; ".join(f"{t} needs {_WHERE[t]}" for t in self.missing if t in _WHERE)
        return TierNotRun(
            "\n".join(lines),
            tip=f"smoke it again where it can run ({where}), or pass {accept} to accept "
            "the result without it (the report still says it did not run)",
        )


# What each tier needs, for the tip when it did not run.
_WHERE = {
    "static": "the wheel's dependencies (torch included) in the smoke environment",
    "gpu": "a working CUDA device and a CUDA build of torch",
    "sm70": "a Tesla V100 (compute capability 7.0) and the fork's CUDA torch",
    "gpu-jit": "a GPU of compute capability 7.0 or newer and the PTX library (--ptx-lib)",
}


def required_tiers(tier: str, project: Project | None) -> dict[str, str]:
    """The tiers a smoke run up to ``tier`` must run, each with who asks for it: the
    tiers up to ``tier`` (cumulative) and series.yaml's ``smoke.required-tiers``."""
    out = {t: f"--tier {tier}" for t in registry.tiers_up_to(tier)}
    if project is not None:
        for t in project.series.smoke.required_tiers or ():
            out.setdefault(t, f"{project.rel(project.series_path)} smoke.required-tiers")
    return {t: out[t] for t in registry.TIERS if t in out}


def missing_tiers(report: SmokeReport, required: dict[str, str]) -> dict[str, str]:
    """Of ``required`` (tier -> who asks), those the report did not run fully, with why."""
    out = {}
    tiers: dict[str, TierResult] = {t: r for t, r in report.tiers.items()}
    for tier, asked in required.items():
        result = tiers.get(tier)
        if result is not None and result.status in (PASSED, FAILED):
            continue
        mine = [c for c in report.checks if c.tier == tier]
        skipped = [c for c in mine if c.outcome == NOT_RUN]
        reasons = list(dict.fromkeys(c.detail for c in skipped if c.detail))
        if result is not None and result.status == INCOMPLETE:
            what = (
                f"ran incomplete (asked for by {asked}): {len(skipped)} of {len(mine)} "
                f"check(s) did not run ({', '.join(c.id for c in skipped)})"
            )
        else:
            what = f"did not run (asked for by {asked})"
        why = "; ".join(reasons) or (result.reason if result is not None else "")
        out[tier] = f"{what}: {why or 'no reason recorded'}"
    return out


def _pick_primary(infos: Sequence[WheelInfo], distribution: str) -> WheelInfo:
    mine = [w for w in infos if w.name == distribution]
    if not mine:
        raise SmokeError(
            f"none of the wheels is the fork's distribution '{distribution}' "
            f"(got {', '.join(w.name for w in infos)})",
            tip="pass the fork wheel (1cat_vllm-*.whl) first; other wheels may accompany it",
        )
    if len(mine) > 1:
        raise SmokeError(
            f"{len(mine)} wheels of '{distribution}' given "
            f"({', '.join(w.path.name for w in mine)}); smoke one at a time",
            tip="a smoke environment holds exactly one build of the fork",
        )
    return mine[0]


def _modules_for(project: Project | None, entries: Sequence[PatchEntry]) -> list[str]:
    """Python modules under vllm/ that the patches create or change."""
    mods = ["vllm"]
    if project is None:
        return mods
    for entry in entries:
        patch = project.load_patch(entry)
        if patch is None:
            continue
        for fp in patch.files:
            if fp.is_delete or not fp.new_path:
                continue
            path = fp.new_path
            if not (path.startswith("vllm/") and path.endswith(".py")):
                continue
            mod = path[: -len(".py")].replace("/", ".")
            mod = mod.removesuffix(".__init__")
            if mod not in mods:
                mods.append(mod)
    return mods


def provenance_vs_series(primary: WheelInfo, project: Project | None) -> list[str]:
    """Integrity of the wheel (RECORD) and where its provenance disagrees with the
    project's series (empty: all is well): :func:`wheel_vs_series`, as bisect compares."""
    from forkpatch.wheels.verify import verify_wheel

    vr = verify_wheel(primary.path)
    problems = []
    if not vr.ok:
        problems.append("the wheel fails RECORD verification: " + "; ".join(vr.problems()[:5]))
    if project is None or primary.provenance is None:
        return problems
    diffs = wheel_vs_series(primary.provenance, project)
    return problems + [f"provenance vs {project.rel(project.series_path)}: {d}" for d in diffs]


def _forbidden_paths(project: Project | None, venv: Path) -> list[str]:
    cands: list[Path] = []
    if project is not None:
        cands.append(Path(project.root))
    cwd = Path.cwd()
    if (cwd / "vllm").is_dir():
        cands.append(cwd)  # running from inside a fork checkout
    out = []
    for c in cands:
        c = c.resolve()
        if c == Path("/") or venv.resolve().is_relative_to(c):
            continue
        out.append(str(c))
    return out


def run_smoke(opts: SmokeOptions, project: Project | None = None) -> SmokeOutcome:
    """Smoke ``opts.wheels``; write the report; return it (SmokeError when it cannot run).

    A failing check does not raise: the caller decides (the CLI exits 1).
    """
    started, t0 = now_iso(), time.monotonic()
    # One deadline for the whole run: the environment, the check process, each team check.
    deadline = Deadline(opts.timeout_s)
    tiers = registry.tiers_up_to(opts.tier)
    if opts.ptx_lib is not None and not opts.ptx_lib.is_file():
        raise SmokeError(
            f"--ptx-lib {opts.ptx_lib}: no such file",
            tip="build the library with ci/sm70-ptx-lib.sh (it prints the path)",
        )
    if not opts.wheels:
        raise SmokeError("no wheel given", tip="forkpatch smoke dist/1cat_vllm-*.whl")
    distribution = project.series.fork.distribution if project is not None else DEFAULT_DISTRIBUTION
    infos = [read_wheel(w) for w in opts.wheels]
    primary = _pick_primary(infos, distribution)
    prov = primary.provenance
    notes: list[str] = []

    # ---- plan
    patch_names = [p.name for p in prov.patches] if prov is not None else []
    entries: list[PatchEntry] = []
    if project is not None:
        registry.validate_series(project.series, path=project.rel(project.series_path))
        by_name = {e.name: e for e in project.series.patches}
        for name in patch_names:
            if name in by_name:
                entries.append(by_name[name])
            else:
                notes.append(
                    f"patch '{name}' (in the wheel) is not in series.yaml: its checks "
                    "are unknown and were not run"
                )
    elif patch_names:
        notes.append(
            "no series.yaml (run with -C PROJECT): only the baseline checks ran; the "
            "patches' own checks are listed in series.yaml"
        )
    if prov is None:
        notes.append("the wheel has no forkpatch provenance: no patch checks can be chosen")
    series = project.series if project is not None else None
    plan = registry.plan(entries, series)
    if opts.checks:
        plan = {registry.get(cid, series).id: plan.get(cid, []) for cid in opts.checks}
    reg = registry.registry(series)
    team = series.smoke.team_checks() if series is not None else {}
    for cid, why in host_not_applicable(plan, primary.path, explicit=opts.checks).items():
        del plan[cid]
        notes.append(f"{cid}: {why}")
    to_run = [cid for cid in plan if reg[cid].tier in tiers]

    problems = provenance_vs_series(primary, project)

    results: dict[str, CheckResult] = {}
    for cid, pats in plan.items():
        if reg[cid].tier not in tiers:
            results[cid] = CheckResult.of(
                cid,
                reg[cid].tier,
                NOT_RUN,
                0.0,
                f"tier {reg[cid].tier} not requested (--tier {opts.tier})",
                pats,
            )

    env_info: dict[str, JsonValue] = {}
    device: JsonObject = {}
    with smoke_env(
        [w.path for w in infos],
        deps=opts.deps,
        python=opts.python,
        index_url=opts.index_url,
        keep=opts.keep_env,
        deadline=deadline,
    ) as senv:
        modules = _modules_for(project, entries)
        spec: dict[str, JsonValue] = {
            "checks": [cid for cid in to_run if cid not in HOST_CHECKS and cid not in team],
            "dist": primary.name,
            "version": primary.version,
            "prefix": str(senv.path),
            "deps": senv.deps,
            "forbidden_paths": _forbidden_paths(project, senv.path),
            "modules": modules,
            "provenance_sha256": primary.provenance_sha256,
            "provenance_problems": problems,
            "series_compared": project is not None and prov is not None,
            # For the not-run reasons: which modules are the wheels' own, and the
            # python whose packages a --deps system environment sees.
            "own_modules": sorted({m for w in infos for m in w.top_level} | {"vllm"}),
            "base_python": senv.base_python,
            "ptx_lib": str(opts.ptx_lib.resolve()) if opts.ptx_lib else None,
        }
        in_env = [cid for cid in to_run if cid not in HOST_CHECKS and cid not in team]
        mine = {cid: team[cid] for cid in to_run if cid in team}
        server = team_server(
            senv.python,
            senv.work_dir,
            check_env(senv),
            deadline,
            preimport=modules,  # vllm and what the patches change, as the checks import them
        )
        with server as team_srv:
            if any(tc.pytest and cid.startswith("static.") for cid, tc in mine.items()):
                team_srv.start_soon()  # its imports overlap the built-in checks
            with log.step(
                f"run {len(in_env)} check(s) in the smoke environment (tiers {', '.join(tiers)})"
            ):
                records, proc_note = run_incheck_resumed(
                    in_env,
                    lambda ids: _run_incheck(
                        senv.python, senv.work_dir, {**spec, "checks": list(ids)}, deadline
                    ),
                    deadline=deadline,
                )
            if mine:
                with log.step(f"run {len(mine)} team check(s) in the smoke environment"):
                    results.update(
                        run_team_checks(
                            mine,
                            senv,
                            plan,
                            device=_device_of(records),
                            root=opts.checks_root
                            or (Path(project.root) if project is not None else None),
                            fork_tests=lambda: _fork_tests(project, senv.work_dir),
                            deadline=deadline,
                            server=team_srv,
                        )
                    )
        env_info = dict(json_object(senv.to_json()) or {})
        for rec in records:
            if rec.get("kind") == "env":
                device = json_object(rec.get("device")) or {}
                found = rec.get("notes")
                notes.extend(str(n) for n in (found if isinstance(found, list) else []))
                env_info.update(
                    {
                        "python": rec.get("python"),
                        "executable": rec.get("executable"),
                        "sys_path": rec.get("sys_path"),
                    }
                )
        running = None
        for rec in records:
            if rec.get("kind") == "start":
                running = str(rec.get("id"))
            elif rec.get("kind") == "check":
                running = None
                got = check_record(rec, reg, plan)
                if got is not None:
                    results[got.id] = got
        for cid in to_run:
            if cid not in results:
                why = (
                    f"the check process ended while running it: {proc_note}"
                    if cid == running
                    else f"the check process ended before it ran: {proc_note}"
                )
                results[cid] = CheckResult.of(
                    cid, reg[cid].tier, ERROR, 0.0, why, plan.get(cid, [])
                )
    results.update(run_host_checks(to_run, primary.path, plan))
    if not device.get("devices"):
        device = {**device, "devices": device.get("devices") or []}
    ordered = [results[cid] for cid in plan]
    notes += _install_notes(ordered, env_info, project, device)
    report = SmokeReport(
        wheels=[wheel_entry(w) for w in infos],
        primary_sha256=primary.sha256,
        version=primary.version,
        requested_tiers=[t for t in TIERS if t in tiers],
        checks=ordered,
        environment=env_info,
        device=device,
        patches=patch_names,
        provenance=prov,
        series_compared=project is not None and prov is not None,
        started=started,
        duration_s=time.monotonic() - t0,
        notes=notes,
    )
    written = _store(report, primary, infos, project, opts)
    missing = missing_tiers(report, required_tiers(opts.tier, project))
    return SmokeOutcome(
        report=report,
        written=written,
        missing={t: w for t, w in missing.items() if t not in opts.allow_missing_tiers},
        allowed_missing={t: w for t, w in missing.items() if t in opts.allow_missing_tiers},
    )


def check_record(
    rec: JsonObject, reg: Mapping[str, registry.CheckSpec], plan: Mapping[str, Sequence[str]]
) -> CheckResult | None:
    """A check's result as the check process wrote it (None: not a check of this run's
    registry). An outcome outside :data:`~forkpatch.kinds.CheckOutcome` is an error of
    the check, with the word it wrote."""
    cid = rec.get("id")
    if not isinstance(cid, str) or cid not in reg:
        return None
    said = rec.get("outcome")
    detail = str(rec.get("detail", ""))
    outcome = next((o for o in CHECK_OUTCOMES if o == said), None)
    if outcome is None:
        words = ", ".join(CHECK_OUTCOMES)
        said_detail = f"\n{detail}" if detail else ""
        outcome = ERROR
        detail = f"the check process reported the outcome {said!r}, none of {words}{said_detail}"
    duration = rec.get("duration_s")
    return CheckResult.of(
        cid,
        reg[cid].tier,
        outcome,
        float(duration) if isinstance(duration, (int, float)) else 0.0,
        detail,
        plan.get(cid, []),
    )


def _install_notes(
    results: Sequence[CheckResult],
    env_info: JsonObject,
    project: Project | None,
    device: JsonObject,
) -> list[str]:
    from forkpatch.smoke.install import fork_pins, host_has_cuda, install_notes

    if not any(incheck.missing_modules(c.detail) for c in results):
        return []
    return install_notes(
        [{"id": c.id, "outcome": c.outcome, "detail": c.detail} for c in results],
        python=str(env_info.get("base_python") or "python3"),
        deps=str(env_info.get("deps") or "system"),
        pins=fork_pins(project),
        cuda=bool(device.get("devices")) or host_has_cuda(),
    )


def _device_of(records: Sequence[JsonObject]) -> JsonObject:
    for rec in records:
        if rec.get("kind") == "env":
            return json_object(rec.get("device")) or {}
    return {}


def _store(
    report: SmokeReport,
    primary: WheelInfo,
    infos: Sequence[WheelInfo],
    project: Project | None,
    opts: SmokeOptions,
) -> list[Path]:
    # The wheel must not have changed while it was smoked: the report is for a sha256.
    if file_sha256(primary.path) != primary.sha256:
        raise SmokeError(
            f"{primary.path.name} changed while it was being smoked; no report written",
            tip="run the smoke again on the final file",
        )
    written = []
    if project is not None:
        for w in infos:
            written.append(store_report(report, store_path(project.root, w.sha256)))
    else:
        written.append(store_report(report, beside_wheel(primary.path)))
    if opts.report_path is not None:
        written.append(write_report(report, opts.report_path))
    if opts.junit_path is not None:
        from forkpatch.fsutil import atomic_write

        atomic_write(opts.junit_path, junit_xml(report))
        written.append(opts.junit_path)
    return written


def store_report(report: SmokeReport, path: Path) -> Path:
    """Write the report at ``path`` (where publish looks for it), unless the report
    there is for the same wheel and holds better evidence of a tier than this run
    (:func:`weaker_tiers`: an sm70 run on a V100 box, then a static run on a laptop; a
    static run that passed, then one with ``--deps none`` whose static tier is
    incomplete): that one stays for publish, and this run's report is written beside
    it as ``<name>.latest.json``. A run in which a tier failed always replaces it: the
    gate must not read an older pass of a wheel that now fails."""
    if path.is_file():
        try:
            old = read_report(path)
        except SmokeError:
            old = None  # not a report to keep: replaced
        if old is not None and report.primary_sha256 in old.sha256s:
            weaker = weaker_tiers(old, report)
            if weaker:
                aside = path.with_name(path.name.removesuffix(".json") + ".latest.json")
                write_report(report, aside)
                why = "; ".join(f"tier {t}: {w}" for t, w in weaker.items())
                log.warn(
                    f"kept {path} (from {old.started or 'an earlier run'}) for publish: it "
                    f"holds more of the wheel's evidence than this run ({why}); this run's "
                    f"report is {aside} (`forkpatch publish --report {aside}` publishes from "
                    "it instead)"
                )
                return aside
    return write_report(report, path)


def weaker_tiers(old: SmokeReport, new: SmokeReport) -> dict[str, str]:
    """tier -> how the ``new`` report has less evidence of it than ``old`` (the
    stored report of the same wheel): the tier ran there and not here, ran complete
    there and incomplete here, or checks of it ran there that did not run here. Empty
    when the new report is as good for every tier, or when a tier failed in it."""
    status = new.statuses()
    if FAILED in status.values():
        return {}
    ran_new: dict[str, set[str]] = {}
    for c in new.checks:
        if c.outcome != NOT_RUN:
            ran_new.setdefault(c.tier, set()).add(c.id)
    out: dict[str, str] = {}
    for tier in old.ran():
        now = status[tier]
        before = old.status(tier)
        mine = {c.id for c in old.checks if c.tier == tier and c.outcome != NOT_RUN}
        lost = sorted(mine - ran_new.get(tier, set()))
        if now == NOT_RUN:
            out[tier] = f"ran there ({before}), did not run in this one"
        elif now == INCOMPLETE and before != INCOMPLETE:
            out[tier] = f"{before} there, incomplete in this one ({', '.join(lost)} did not run)"
        elif lost:
            out[tier] = f"{', '.join(lost)} ran there and not in this one"
    return out


def _run_incheck(
    python: Path, workdir: Path, spec: JsonObject, deadline: Deadline
) -> tuple[list[JsonObject], str]:
    """Run the checks in the venv; the records it wrote, and how the process ended.

    Each check is reported as it starts and ends (the checks of the static tier
    alone can take a minute), with a line every :data:`HEARTBEAT_S` seconds
    while one runs. The process runs in a session of its own, ended as a group at
    the smoke run's ``deadline``; its output is kept as a bounded tail on disk.
    """
    suite = copy_suite(workdir / "incheck-suite")
    spec_path = workdir / "spec.json"
    spec_path.write_text(json.dumps(spec, indent=2), encoding="utf-8")
    out_path = workdir / "results.jsonl"
    out_path.write_text("", encoding="utf-8")
    module = f"{SUITE_PACKAGE}.__main__"
    cmd = incheck.launch_argv(
        str(python), str(suite), module, "--spec", str(spec_path), "--out", str(out_path)
    )
    log.info("+ " + shlex.join(cmd))  # quoted: the -c launcher is one argument
    note = "exited normally"
    planned = spec.get("checks")
    progress = _Progress(total=len(planned) if isinstance(planned, list) else 0)
    with open(out_path, encoding="utf-8", errors="replace") as results:

        def tick() -> None:
            progress.feed(results.read())
            progress.heartbeat()

        def tick_and_limit() -> None:
            tick()
            overran = progress.overran(session.CHECK_TIMEOUT_S)
            if overran is not None:  # ends the process (proc.run); the rest run anew
                raise CheckOverran(overran, session.CHECK_TIMEOUT_S)

        try:
            done = proc.run(
                cmd,
                cwd=workdir,
                env=clean_env(),
                deadline=deadline,
                log_path=workdir / "incheck.log",
                tick=tick_and_limit,
            )
        except OSError as exc:
            raise SmokeError(f"cannot start the check process: {exc}") from None
        except CheckOverran as exc:
            done = None
            note = (
                f"{exc.check_id} ran past its own limit of {exc.seconds:.0f} s; the check "
                "process was ended as a group"
            )
            log.warn(f"the check process: {note}")
        progress.feed(results.read())
    if done is None:
        pass  # a check overran its own limit: the note says so
    elif done.timed_out:
        note = f"timed out after {done.timeout_s:.0f} s (the smoke run's --timeout)"
        log.warn(f"the check process {note}")
    elif done.returncode != 0:
        note = f"{done.ended()}; last output:\n{tail(done.output, 15)}"
        log.warn(f"the check process {note}")
    records = []
    for line in out_path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            rec = json_object(json.loads(line))
        except ValueError:
            continue
        if rec is not None:
            records.append(rec)
    return records, note


# The check suite's copy in the smoke venv: the incheck package and the check ids it
# reads, at their places relative to each other in forkpatch (the package's relative
# imports hold), under a top package of the copy's own.
SUITE_TOP = "forkpatch_suite"
SUITE_PACKAGE = f"{SUITE_TOP}.smoke.incheck"


def copy_suite(dest: Path) -> Path:
    """Copy the check suite under ``dest`` (made afresh); the directory for sys.path."""
    shutil.rmtree(dest, ignore_errors=True)
    package = Path(incheck.__file__).parent
    top = dest / SUITE_TOP
    shutil.copytree(
        package, top / "smoke" / package.name, ignore=shutil.ignore_patterns("__pycache__")
    )
    shutil.copyfile(checkids.__file__, top / "checkids.py")
    for parent in (top, top / "smoke"):
        (parent / "__init__.py").write_text("", encoding="utf-8")
    return dest


HEARTBEAT_S = 30.0


class _Progress:
    """Prints each check as the check process reports it (JSON lines, appended)."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.done = 0
        self.running: str | None = None
        self.since = time.monotonic()
        self.last_beat = self.since
        self._partial = ""

    def feed(self, text: str) -> None:
        text = self._partial + text
        lines = text.split("\n")
        self._partial = lines.pop()  # an unfinished line waits for the rest
        for line in lines:
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if rec.get("kind") == "start":
                self.running = str(rec.get("id"))
                self.since = self.last_beat = time.monotonic()
            elif rec.get("kind") == "check":
                self.done += 1
                self.running = None
                log.info(
                    f"    [{self.done}/{self.total}] {rec.get('outcome', '?'):<8} "
                    f"{rec.get('id')} ({float(rec.get('duration_s', 0.0)):.1f}s)"
                )

    def overran(self, limit_s: float) -> str | None:
        """The check that has been running longer than ``limit_s`` (None: none has)."""
        if self.running is not None and time.monotonic() - self.since > limit_s:
            return self.running
        return None

    def heartbeat(self) -> None:
        now = time.monotonic()
        if self.running is not None and now - self.last_beat >= HEARTBEAT_S:
            self.last_beat = now
            log.info(f"    ... {self.running} still running ({now - self.since:.0f}s)")


# Failures no patch's code can cause: the wheel's identity against the series, and
# where vllm was imported from (the environment), the compiled kernels (a patch of
# Python files does not change them). Bisecting the patches for them
# would only blame an innocent one.
NOT_A_PATCH = frozenset({"static.provenance", "static.installed-from-wheel", *HOST_CHECKS})


def failure_tip(report: SmokeReport) -> str:
    """What to do about a failed smoke report; ``--bisect`` only when a patch can be at fault."""
    failed = report.failed()
    suspects = [c.id for c in failed if c.id not in NOT_A_PATCH]
    if suspects and report.patches:
        return (
            "the report above says why; `forkpatch smoke --bisect` finds the patch that "
            f"broke {', '.join(suspects)}"
        )
    if any(c.id == "static.provenance" for c in failed):
        return "the wheel does not match series.yaml: rebuild it (`forkpatch build-wheel`)"
    return "the report above says why"


#: Lines of a check's detail shown under its first (the report has them all).
DETAIL_LINES: dict[CheckOutcome, int] = {PASSED: 6}
DETAIL_LINES_NOT_PASSED = 20


def _detail_lines(rest: Sequence[str], outcome: CheckOutcome) -> list[str]:
    """The detail's lines after the first, as many as the terminal shows for ``outcome``
    (a failure's last output, what each kernel module carries or why it was unreadable)."""
    rest = [ln for ln in rest if ln.strip()]
    keep = DETAIL_LINES.get(outcome, DETAIL_LINES_NOT_PASSED)
    if len(rest) <= keep:
        return rest
    more = f"... {len(rest) - keep + 1} more line(s) in the report"
    if outcome == PASSED:
        return [*rest[: keep - 1], more]
    return [more, *rest[-(keep - 1) :]]  # a failure's output: its end says why


def print_summary(report: SmokeReport) -> None:
    """The human summary on stderr."""
    log.info(
        f"smoke {report.version} (sha256 {report.primary_sha256[:16]}…), deps "
        f"{report.environment.get('deps')}, {round(report.duration_s, 3):.1f}s"
    )
    dev = report.device
    devices = report.cuda_devices()
    if devices:
        for index, name, capability in devices:
            log.info(
                f"  device cuda:{index}: {name}, capability "
                f"{capability}, driver {dev.get('driver') or '?'}"
            )
    else:
        log.info(f"  device: none ({dev.get('reason') or 'no CUDA device'})")
    width = max((len(c.id) for c in report.checks), default=10)
    for c in report.checks:
        first, *rest = c.detail.splitlines() or [""]
        log.info(f"  {c.outcome:<8} {c.id:<{width}} {c.duration_s:6.2f}s  {first}")
        for line in _detail_lines(rest, c.outcome):
            log.info(f"  {'':<8} {'':<{width}}          {line}")
    not_run = report.not_run()
    detail = report.tiers
    for tier, status in report.statuses().items():
        reason = not_run.get(tier, "")
        ran = "" if reason else f", {detail[tier].ran} of its {detail[tier].of} checks ran"
        log.info(f"  tier {tier}: {status}{ran}" + (f" ({reason})" if reason else ""))
    per_patch = report.per_patch()
    for p in per_patch:
        declared = ", ".join(f"{cid} ({outcome})" for cid, outcome in p.checks.items())
        log.info(f"  patch {p.name}: " + (f"declares {declared}" if declared else "no checks"))
    if any(p.status == DECLARED_CHECK_FAILED for p in per_patch):
        log.info(
            "  a failed check is declared by the patch(es) above; the patch that broke it "
            "may be another one (`forkpatch smoke --bisect` names it)"
        )
    for n in report.notes:
        log.warn(n)
