"""The publish gate trusts nothing it reads, and publishing cannot be torn or swapped.

Issue 12, items 7-10: a smoke report is validated against a strict schema and every
tier's outcome is derived from its check results (a summary that disagrees is
refused); a malformed report gives one error naming the file and the field, never a
traceback; the bytes published are the bytes gated, whatever happens to the file in
between; and a ``publish --to DIR`` killed at any write is finished by the next run.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from forkpatch.smoke.report import REPORT_SUFFIX
from support.cli import env, fp
from support.projects import temp_files
from support.reliability import Row
from support.servers import serve_pypiserver
from support.smoke import passing_report
from support.wheelfactory import make_wheel

WHEEL = "1cat_vllm-1.2.1-py3-none-any.whl"


@pytest.fixture
def dist(tmp_path: Path) -> Path:
    """dist/ with a small wheel and a consistent passing report (static + sm70) beside it."""
    wheel = make_wheel(tmp_path / "dist" / WHEEL, {"vllm/__init__.py": b"x = 1\n"})
    passing_report(wheel)
    return tmp_path / "dist"


def _report(dist: Path) -> Path:
    return dist / (WHEEL + REPORT_SUFFIX)


def _published(target: Path) -> list[str]:
    packages = target / "packages"
    return sorted(p.name for p in packages.iterdir()) if packages.is_dir() else []


# ----------------------------------------------------------------------------- 7 and 8


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """An edit that sets ``a.b[0].c`` to ``value`` (deletes it when value is _DEL)."""

    def edit(data: dict[str, Any]) -> None:
        keys: list[Any] = [int(k) if k.isdigit() else k for k in re.split(r"[.\[\]]+", path) if k]
        node: Any = data
        for k in keys[:-1]:
            node = node[k]
        if value is _DEL:
            del node[keys[-1]]
        else:
            node[keys[-1]] = value

    return edit


_DEL = object()


def _both(*edits: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    def edit(data: dict[str, Any]) -> None:
        for e in edits:
            e(data)

    return edit


# Each edit of the passing report, and the field the refusal must name.
_PROVENANCE_NO_TAG = {
    "schema": 1,
    "fork_url": "https://github.com/org/fork.git",
    "commit": "a" * 40,
    "patches": [],
    "forkpatch_version": "0.1.0",
    "builder": {"mode": "overlay"},
}
TAMPERED: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "summary says passed, its check did not run": (_set("checks[1].outcome", "not-run"), "sm70"),
    "summary says passed, the tier has no checks": (
        lambda d: d["checks"].pop(1),
        "tiers.status.sm70",
    ),
    "summary says passed, the tier was not requested": (
        _set("tiers.requested", ["static"]),
        "tiers.status.sm70",
    ),
    "passed is a string": (_set("passed", "true"), "passed"),
    "passed while a check failed": (
        _both(_set("checks[0].outcome", "failed"), _set("tiers.status.static", "failed")),
        "passed",
    ),
    "unknown outcome": (_set("checks[0].outcome", "ok"), "checks[0].outcome"),
    "outcome missing": (_set("checks[0].outcome", _DEL), "checks[0].outcome"),
    "checks is an object": (_set("checks", {"static.check": "passed"}), "checks"),
    "a check is a string": (_set("checks[0]", "static.check passed"), "checks[0]"),
    "tiers missing": (_set("tiers", _DEL), "tiers"),
    "tiers.status is a list": (_set("tiers.status", ["passed"]), "tiers.status"),
    "unknown requested tier": (_set("tiers.requested", ["static", "sm80"]), "tiers.requested"),
    "unknown tier status": (_set("tiers.status.sm70", "PASSED"), "tiers.status.sm70"),
    "wheels missing": (_set("wheels", _DEL), "wheels"),
    "wheels empty": (_set("wheels", []), "wheels"),
    "a wheel's sha256 is a number": (_set("wheels[0].sha256", 12), "wheels[0].sha256"),
    "wheel.sha256 not among wheels": (_set("wheel.sha256", "0" * 64), "wheel.sha256"),
    "duplicate check id": (_set("checks[1].id", "static.check"), "checks[1]"),
    "check id of another tier": (_set("checks[0].id", "sm70.other"), "checks[0].id"),
    "duration is a string": (_set("checks[0].duration_s", "fast"), "checks[0].duration_s"),
    "patches is a string": (_set("checks[0].patches", "all"), "checks[0].patches"),
    "notes is a string": (_set("notes", "fine"), "notes"),
    "schema is true": (_set("schema", True), "schema"),
    "kind missing": (_set("kind", _DEL), "kind"),
    "provenance without its tag": (
        _set("provenance", _PROVENANCE_NO_TAG),
        "provenance: missing key(s) tag",
    ),
    "provenance with an unknown key": (
        _set("provenance", {**_PROVENANCE_NO_TAG, "tag": "v1", "colour": "red"}),
        "provenance: unknown key(s) colour",
    ),
    "provenance is a list": (_set("provenance", []), "provenance"),
    "a wheel's size is a string": (_set("wheels[0].size", "big"), "wheels[0].size"),
    "a publish record without its target": (
        _set("publish", {"file": WHEEL, "sha256": "0" * 64, "at": "now", "by": "me"}),
        "publish.target",
    ),
    "a publish record's tier unknown": (
        _set(
            "publish",
            {
                **{k: "x" for k in ("target", "file", "sha256", "at", "by")},
                "required_tiers_passed": ["sm80"],
            },
        ),
        "publish.required_tiers_passed[0]",
    ),
    "device is a list": (_set("device", ["cuda:0"]), "device"),
    "a patch entry without its name": (_set("patches", [{"status": "passed"}]), "patches[0]"),
}


def _publish(dist: Path, cwd: Path, target: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """``forkpatch publish`` of the wheel to the directory ``target``, in a subprocess."""
    return fp(cwd, "publish", str(dist / WHEEL), "--to", str(target), extra_env=env)


@pytest.mark.parametrize("variant", sorted(TAMPERED))
def test_a_tampered_or_malformed_report_is_refused(
    dist: Path, tmp_path: Path, variant: str
) -> None:
    edit, field = TAMPERED[variant]
    data = json.loads(_report(dist).read_text())
    edit(data)
    _report(dist).write_text(json.dumps(data))
    target = tmp_path / "index"
    got = _publish(dist, tmp_path, target)
    assert got.returncode == 1, got.stderr
    assert "internal error" not in got.stderr and "Traceback" not in got.stderr
    assert str(_report(dist)) in got.stderr and _names(got.stderr, field), got.stderr
    assert _published(target) == []


def _names(err: str, field: str) -> bool:
    """Whether ``err`` names ``field`` (``checks[0].outcome``), as a dotted path or as the
    typed reader says it: the place, then the key (``checks[0]: 'outcome'``)."""
    place, _, key = field.rpartition(".")
    return field in err or bool(
        place and (f"{place}: '{key}'" in err or f"{place}: missing key(s) {key}" in err)
    )


@pytest.mark.parametrize("doc", ["[]", '"report"', "null", "{", '{"kind": 1}'])
def test_a_report_that_is_not_an_object_is_refused(dist: Path, tmp_path: Path, doc: str) -> None:
    _report(dist).write_text(doc)
    got = fp(tmp_path, "publish", str(dist / WHEEL), "--to", str(tmp_path / "index"))
    assert got.returncode == 1 and str(_report(dist)) in got.stderr, got.stderr
    assert "internal error" not in got.stderr
    assert _published(tmp_path / "index") == []


def test_the_untampered_report_publishes(dist: Path, tmp_path: Path) -> None:
    got = fp(tmp_path, "publish", str(dist / WHEEL), "--to", str(tmp_path / "index"))
    assert got.returncode == 0, got.stderr
    assert WHEEL in _published(tmp_path / "index")


# ----------------------------------------------------------------------------- 9: swapped wheel


def _swap(wheel: Path, how: str, tmp_path: Path) -> None:
    other = make_wheel(tmp_path / "other" / WHEEL, {"vllm/__init__.py": b"EVIL = 1\n"})
    if how == "replaced":
        os.replace(other, wheel)
    elif how == "rewritten in place":
        wheel.write_bytes(other.read_bytes())
    elif how == "a symlink to another wheel":
        wheel.unlink()
        wheel.symlink_to(other)
    elif how == "deleted":
        wheel.unlink()
    elif how == "truncated":
        wheel.write_bytes(wheel.read_bytes()[:100])


SWAPS = ["replaced", "rewritten in place", "a symlink to another wheel", "deleted", "truncated"]


@pytest.fixture
def index(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    pytest.importorskip("pypiserver")
    root = tmp_path / "index-root"
    root.mkdir()
    options = ["-a", ".", "-P", ".", "--disable-fallback", "--hash-algo", "sha256"]
    with serve_pypiserver(root, options, log=tmp_path / "pypiserver.log") as (url, _proc):
        yield url, root


def _paused_publish(cwd: Path, wheel: Path, to: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "forkpatch", "publish", str(wheel), "--to", to],
        cwd=cwd,
        # The index takes anyone (-a . -P .); twine still wants a user and a password.
        env=env(
            FORKPATCH_TEST_PAUSE_AFTER="publish-gated",
            TWINE_USERNAME="publisher",
            TWINE_PASSWORD="any-password-will-do",
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    _, status = os.waitpid(proc.pid, os.WUNTRACED)
    assert os.WIFSTOPPED(status), "publish ended before its pause point"
    return proc


@pytest.mark.parametrize("how", SWAPS)
@pytest.mark.parametrize("kind", ["directory", "index"])
def test_the_bytes_published_are_the_bytes_gated(
    dist: Path, tmp_path: Path, request: pytest.FixtureRequest, how: str, kind: str
) -> None:
    wheel = dist / WHEEL
    gated = hashlib.sha256(wheel.read_bytes()).hexdigest()
    if kind == "index":
        url, root = request.getfixturevalue("index")
        to, published = url, root / WHEEL
    else:
        to, published = str(tmp_path / "dir-index"), tmp_path / "dir-index" / "packages" / WHEEL
    proc = _paused_publish(tmp_path, wheel, to)
    _swap(wheel, how, tmp_path)
    os.kill(proc.pid, signal.SIGCONT)
    _out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert hashlib.sha256(published.read_bytes()).hexdigest() == gated
    if kind == "directory":
        sums = (published.parent / "SHA256SUMS").read_text()
        assert f"{gated}  {WHEEL}\n" in sums
        assert (
            f"#sha256={gated}" in (tmp_path / "dir-index/simple/1cat-vllm/index.html").read_text()
        )


# ----------------------------------------------------------------------------- 10: killed publish


def _consistent(target: Path, sha: str) -> None:
    packages = target / "packages"
    names = sorted(p.name for p in packages.iterdir())
    assert names == sorted(["SHA256SUMS", WHEEL, WHEEL + REPORT_SUFFIX]), names
    sums = dict(
        reversed(line.split("  ")) for line in (packages / "SHA256SUMS").read_text().splitlines()
    )
    for name in (WHEEL, WHEEL + REPORT_SUFFIX):
        assert sums[name] == hashlib.sha256((packages / name).read_bytes()).hexdigest(), name
    assert sums[WHEEL] == sha
    page = (target / "simple" / "1cat-vllm" / "index.html").read_text()
    assert f"{WHEEL}#sha256={sha}" in page.replace("%2B", "+")
    assert '"1cat-vllm/"' in (target / "simple" / "index.html").read_text()
    assert not (target / ".forkpatch-publish.json").exists()


def _events(dist: Path, tmp_path: Path) -> list[str]:
    counter = tmp_path / "events.txt"
    target = tmp_path / "count-index"
    got = _publish(dist, tmp_path, target, FORKPATCH_TEST_COUNT_WRITES=str(counter))
    assert got.returncode == 0, got.stderr
    _consistent(target, hashlib.sha256((dist / WHEEL).read_bytes()).hexdigest())
    return counter.read_text().splitlines()


@pytest.mark.slow  # one publish per write point
def test_a_publish_killed_at_any_write_is_finished_by_the_next(dist: Path, tmp_path: Path) -> None:
    sha = hashlib.sha256((dist / WHEEL).read_bytes()).hexdigest()
    events = _events(dist, tmp_path)
    assert len(events) >= 6, events
    for n in range(1, len(events) + 1):
        target = tmp_path / f"index-{n}"
        got = _publish(dist, tmp_path, target, FORKPATCH_TEST_KILL_AT=str(n))
        assert got.returncode == -9, f"kill at {n} ({events[n - 1]}): {got.stderr}"
        again = _publish(dist, tmp_path, target)
        assert again.returncode == 0, f"kill at {n} ({events[n - 1]}): {again.stderr}"
        _consistent(target, sha)
        assert temp_files(target) == [], f"kill at {n} ({events[n - 1]})"


@pytest.mark.parametrize("at", [1, 2, 3, 4, -2, -1])
def test_a_killed_publish_leaves_no_temporary_file_after_the_next(
    dist: Path, tmp_path: Path, at: int
) -> None:
    """Every writer's temporary files (the journal's in the index root, the wheel's, the
    index pages') are removed by the next publish, wherever the kill fell."""
    events = _events(dist, tmp_path)
    n = at if at > 0 else len(events) + 1 + at
    target = tmp_path / "index"
    got = _publish(dist, tmp_path, target, FORKPATCH_TEST_KILL_AT=str(n))
    assert got.returncode == -9, got.stderr
    again = _publish(dist, tmp_path, target)
    assert again.returncode == 0, again.stderr
    assert temp_files(target) == [], f"kill at {n} ({events[n - 1]})"
    _consistent(target, hashlib.sha256((dist / WHEEL).read_bytes()).hexdigest())


def test_the_leftovers_of_an_older_forkpatch_are_repaired(dist: Path, tmp_path: Path) -> None:
    """What the issue found: the wheel copied, no index, no SHA256SUMS, no report, and a
    temporary file in packages/; the next run says "already published" and repairs it."""
    target = tmp_path / "index"
    (target / "packages").mkdir(parents=True)
    shutil.copy2(dist / WHEEL, target / "packages" / WHEEL)
    (target / "packages" / f".{WHEEL}.k3j2h1.tmp").write_bytes(b"half a wheel")
    got = _publish(dist, tmp_path, target)
    assert got.returncode == 0 and "already published" in got.stderr, got.stderr
    _consistent(target, hashlib.sha256((dist / WHEEL).read_bytes()).hexdigest())


@pytest.mark.parametrize(
    "journal",
    [
        '{"ops": [["delete", "../victim"]]}',
        "not json",
        "DUMP:delete:../victim",
        "DUMP:delete:simple/index.html",
        "DUMP:rename:/etc/passwd:packages/x.whl",
    ],
)
def test_a_crafted_publish_journal_is_refused(dist: Path, tmp_path: Path, journal: str) -> None:
    from forkpatch.fsutil import dump_state

    target = tmp_path / "index"
    target.mkdir()
    (tmp_path / "victim").write_text("keep\n")
    if journal.startswith("DUMP:"):
        op = journal.split(":")[1:]
        raw = dump_state("commit-journal", 1, {"ops": [op]})
    else:
        raw = journal.encode()
    (target / ".forkpatch-publish.json").write_bytes(raw)
    got = _publish(dist, tmp_path, target)
    assert got.returncode == 1 and ".forkpatch-publish.json" in got.stderr, got.stderr
    assert (tmp_path / "victim").read_text() == "keep\n"
    assert _published(target) == []


RELIABILITY = [
    Row(
        "publish gate",
        "smoke reports with a summary that disagrees with their checks, wrong types, "
        "unknown values, missing fields, or not an object; a bad provenance or publish "
        "record in them",
        f"{len(TAMPERED) + 5} reports",
        "one error naming the file (and the field), never a traceback; nothing published",
        refused=str(len(TAMPERED) + 5),
    ),
    Row(
        "publish gate",
        "the wheel replaced, rewritten, linked, deleted or truncated after the gate",
        f"{len(SWAPS)} swaps x (directory, index)",
        "the index and the directory hold exactly the gated bytes, SHA256SUMS and simple/ "
        "their sha256",
    ),
    Row(
        "publish gate",
        "publish --to DIR killed at each write; an older version's leftovers; crafted "
        "publish journals",
        "every write event + 1 + 5 journals",
        "the next run finishes it (wheel, report, SHA256SUMS, simple/ agree); crafted "
        "journals refused",
        refused="5",
        outside="nothing (checked in 5)",
    ),
]
