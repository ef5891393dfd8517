"""``forkpatch publish``: the smoke gate, then a package index or a static directory index.

The gate (:func:`check_gate`): a wheel is published only when a smoke report
exists for its exact sha256, no check in it failed, and every tier the series
requires (``publish.required-tiers``, else ``smoke.required-tiers``, else
static + sm70) passed. ``--allow-missing-tier sm70`` accepts a tier that was
*not run* (never one that failed); the override is logged and written into the
report that is published with the wheel.

Every wheel is gated and every target conflict is checked before anything is
uploaded, so a refusal leaves the target untouched.

Targets (:class:`Target`):

- :class:`IndexTarget`: a PEP 503 index that accepts uploads (pypiserver,
  devpi, a registry's PyPI endpoint). Existing files are read from its simple
  page; the upload is ``twine upload``. Credentials come from
  ``TWINE_USERNAME`` / ``TWINE_PASSWORD`` or the keyring (as twine does),
  never from the command line, and are redacted from every message.
- :class:`DirTarget`: a plain directory made into a static PEP 503 index
  (``simple/index.html``, ``simple/<name>/index.html`` with ``#sha256=``
  links, files under ``packages/``), written atomically under a lock;
  ``pip install --extra-index-url file:///DIR/simple/ '1cat-vllm==<version>'``
  installs from it (the dependencies come from the default index).

Publishing the same file again is a no-op; a different file under the same
name (or the same version and tags) is refused.
"""

from __future__ import annotations

import base64
import contextlib
import getpass
import hashlib
import html
import os
import re
import shutil
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from html.parser import HTMLParser
from pathlib import Path
from typing import TYPE_CHECKING, Protocol
from urllib.parse import quote, unquote, urljoin, urlsplit

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from forkpatch import fsutil, log
from forkpatch.errors import FetchError, PublishError, SmokeError
from forkpatch.fetch import Auth, Fetcher
from forkpatch.fsutil import (
    TMP_SUFFIX,
    atomic_write,
    commit_files,
    file_sha256,
    naming,
    new_file_mode,
    pause_point,
    project_lock,
    recover_files,
    sweep_temps,
    write_event,
)
from forkpatch.kinds import TIERS, JsonValue, PublishAction
from forkpatch.redact import MIN_SECRET_LENGTH, redact, strip_url_credentials
from forkpatch.smoke.report import (
    INCOMPLETE,
    NOT_RUN,
    PASSED,
    REPORT_SUFFIX,
    PublishRecord,
    SmokeReport,
    as_tier,
    beside_wheel,
    dumps,
    now_iso,
    read_report,
    store_path,
)
from forkpatch.wheels.runner import require_module, tail
from forkpatch.wheels.runner import run as run_tool
from forkpatch.wheels.wheelinfo import WheelInfo, read_wheel

if TYPE_CHECKING:
    from forkpatch.project import Project

DEFAULT_REQUIRED_TIERS = ("static", "sm70")
# What one answer of an index may be: a PEP 503 page, a linked file (hashed as it streams).
PAGE_LIMIT = 16 << 20
FILE_LIMIT = 8 << 30
# All of a publish's requests to the index share one deadline: this many request timeouts.
COMMAND_DEADLINE_FACTOR = 5


@dataclass(frozen=True)
class PublishOptions:
    wheels: tuple[Path, ...]
    to: str
    allow_missing_tiers: tuple[str, ...] = ()
    required_tiers: tuple[str, ...] | None = None  # None: from the series, else the default
    reports: tuple[Path, ...] = ()  # explicit report files to consider
    simple_url: str | None = None  # index targets: where its PEP 503 pages are
    timeout_s: float = 60.0


@dataclass(frozen=True)
class Gate:
    """Why a wheel may be published."""

    wheel: WheelInfo
    report: SmokeReport  # validated, for exactly this wheel's sha256
    report_path: Path  # where it was read
    overrides: dict[str, str] = field(default_factory=dict)  # tier -> why it did not run
    #: The private copy of the wheel whose bytes were hashed and gated: what is published
    #: (never the user's path again, which could be replaced in between).
    staged: Path | None = None

    @property
    def source(self) -> Path:
        return self.staged if self.staged is not None else self.wheel.path

    def published_report(self, target: str) -> SmokeReport:
        """The report as it is published beside the wheel: with where, when, by whom, and
        the tiers it was published without."""
        record = PublishRecord(
            target=target,
            file=self.wheel.path.name,
            sha256=self.wheel.sha256,
            at=now_iso(),
            by=_user(),
            # From the check results, never from the report's own summary.
            required_tiers_passed=[t for t in TIERS if self.report.status(t) == PASSED],
            allowed_missing_tiers={t: f"not run: {why}" for t, why in self.overrides.items()},
        )
        return replace(self.report, publish=record)


def _user() -> str:
    with contextlib.suppress(Exception):
        return getpass.getuser()
    return "unknown"


# --------------------------------------------------------------------------- gate


def required_tiers(project: Project | None) -> tuple[str, ...]:
    if project is not None:
        s = project.series
        for tiers in (s.publish.required_tiers, s.smoke.required_tiers):
            if tiers:
                return tuple(tiers)
    return DEFAULT_REQUIRED_TIERS


def _candidates(wheel: WheelInfo, project: Project | None, explicit: Sequence[Path]) -> list[Path]:
    out = list(explicit)
    if project is not None:
        out.append(store_path(Path(project.root), wheel.sha256))
    out.append(beside_wheel(wheel.path))
    return out


def find_report(
    wheel: WheelInfo, project: Project | None, explicit: Sequence[Path] = ()
) -> tuple[Path, SmokeReport]:
    """The smoke report for exactly this file (by sha256) and where it is; PublishError
    when there is none.

    A report that does not validate (:meth:`forkpatch.smoke.report.SmokeReport.from_json`) is
    refused at once with its file and field named, never skipped silently.
    """
    wrong: list[str] = []
    for path in _candidates(wheel, project, explicit):
        if not path.is_file():
            continue
        try:
            report = read_report(path)
        except SmokeError as exc:
            raise PublishError(exc.message, tip=exc.tip) from None
        if wheel.sha256 in report.sha256s:
            return path, report
        wrong.append(f"{path} is a report for {report.primary_sha256[:16]}…, not this file")
    msg = f"no smoke report for {wheel.path.name} (sha256 {wheel.sha256})"
    if wrong:
        msg += ": " + "; ".join(wrong)
    raise PublishError(
        msg,
        tip=f"run `forkpatch smoke {wheel.path}` first (publish only takes "
        "a wheel whose exact bytes passed the smoke suite)",
    )


def check_gate(
    wheel: WheelInfo,
    project: Project | None,
    *,
    required: Sequence[str],
    allow_missing: Sequence[str] = (),
    explicit: Sequence[Path] = (),
) -> Gate:
    """Refuse (PublishError) unless a passing report covers ``required`` for this file."""
    for t in (*required, *allow_missing):
        if t not in TIERS:
            raise PublishError(f"unknown tier '{t}'", tip=f"tiers: {', '.join(TIERS)}")
    path, report = find_report(wheel, project, explicit)
    failed = report.failed()
    if failed or not report.passed:
        names = ", ".join(f"{c.id} ({c.outcome})" for c in failed) or "see the report"
        raise PublishError(
            f"the smoke report for {wheel.path.name} ({path}) did not pass: {names}",
            tip="fix the wheel (or its patches), build and smoke it "
            "again; `forkpatch smoke --bisect` finds the patch",
        )
    overrides: dict[str, str] = {}
    for tier in map(as_tier, required):
        # Every tier's outcome comes from its check results (SmokeReport.from_json).
        st = report.status(tier)
        if st == PASSED:
            continue
        why = report.reason(tier) or st
        if tier in allow_missing and st == NOT_RUN:
            overrides[tier] = why
            log.warn(
                f"publishing {wheel.path.name} without tier {tier} (not run: {why}): "
                f"--allow-missing-tier {tier}; recorded in the published report"
            )
            continue
        if tier in allow_missing:
            raise PublishError(
                f"tier {tier} is {st} in the smoke report for {wheel.path.name} "
                f"({why}); --allow-missing-tier only covers a tier that did not "
                "run",
                tip="fix the failing checks; an override never hides a failure",
            )
        if st == INCOMPLETE:
            tip = (
                "some of its checks could not run (a dependency is missing): smoke again "
                "with --deps system on a machine that has torch, or --deps index"
            )
        else:
            tip = (
                f"run `forkpatch smoke --tier {tier}` where the hardware is (a V100 for "
                f"sm70), or pass --allow-missing-tier {tier} to publish anyway (logged and "
                "recorded)"
            )
        raise PublishError(
            f"tier {tier} is required but {st} in the smoke report for {wheel.path.name}"
            + (f" ({why})" if why and why != st else ""),
            tip=tip,
        )
    return Gate(wheel=wheel, report=report, report_path=path, overrides=overrides)


# --------------------------------------------------------------------------- targets


class Target(Protocol):
    """Where wheels go. Every difference between the kinds of target is a method here:
    the publish step itself never asks which kind it has."""

    def describe(self) -> str: ...

    @property
    def index_url(self) -> str:
        """The PEP 503 index pip installs from (``--extra-index-url``)."""
        ...

    def locked(self) -> contextlib.AbstractContextManager[None]:
        """Held for the whole publish (a directory's lock; an index has its own)."""
        ...

    def existing(self, project_name: str) -> dict[str, str]:
        """filename -> sha256 of the files already published for ``project_name``."""
        ...

    def publish(self, gate: Gate, report: SmokeReport) -> None: ...

    def unfinished(self, gate: Gate) -> bool:
        """The wheel is there but a publish cut short left its report out."""
        ...

    def keep_beside(self, gate: Gate, report: SmokeReport) -> None:
        """What the target does not hold itself (an index takes only distributions)
        is written beside the user's wheel."""
        ...


def _conflicts(wheel: WheelInfo, existing: Mapping[str, str]) -> tuple[bool, str | None]:
    """(already there, refusal message)."""
    name = wheel.path.name
    if name in existing:
        if existing[name] == wheel.sha256:
            return True, None
        return False, (
            f"{name} is already published with different content (sha256 "
            f"{existing[name][:16]}…, this file {wheel.sha256[:16]}…)"
        )
    key = _identity(name)
    for other, sha in existing.items():
        if key is not None and _identity(other) == key and sha != wheel.sha256:
            return False, (
                f"{other} is already published for version {wheel.version} and tags "
                f"{wheel.tags}, with different content"
            )
    return False, None


def _identity(filename: str) -> tuple[str, str, str] | None:
    try:
        name, version, _build, _tags = parse_wheel_filename(filename)
    except InvalidWheelFilename:
        return None
    tags = "-".join(filename[: -len(".whl")].split("-")[-3:])
    return str(name), str(version), tags


# ---- a static directory index


_PAGE = """<!DOCTYPE html>
<html>
  <head>
    <meta name="pypi:repository-version" content="1.0">
    <title>{title}</title>
  </head>
  <body>
    <h1>{title}</h1>
{links}
  </body>
</html>
"""


class DirTarget:
    """``DIR/packages/<file>`` + ``DIR/simple/`` (PEP 503), updated as one transaction.

    A wheel and its report enter ``packages/`` through :func:`forkpatch.fsutil.commit_files`
    (temporary files, then the journal ``DIR/.forkpatch-publish.json``, then the
    renames); ``SHA256SUMS`` and ``simple/`` are then derived from ``packages/``. Every
    run, under the directory's lock, first finishes a journal a killed run left
    (or, when the kill came before the journal, removes its temporary files) and
    derives the sums and the index again: a killed publish is repaired by the next one.
    """

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self.packages = self.root / "packages"
        self.simple = self.root / "simple"

    def describe(self) -> str:
        return f"{self.root} (static index {self.simple.as_uri()}/)"

    @property
    def index_url(self) -> str:
        return self.simple.as_uri() + "/"

    def unfinished(self, gate: Gate) -> bool:
        return not self.report_path(gate).exists()

    def keep_beside(self, gate: Gate, report: SmokeReport) -> None:
        """The report and the sums are inside the directory index."""

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        with project_lock(self.root / ".forkpatch-publish.lock", command="publish"):
            self.recover()
            yield

    @property
    def journal(self) -> Path:
        return self.root / PUBLISH_JOURNAL

    def report_path(self, gate: Gate) -> Path:
        return self.packages / (gate.wheel.path.name + REPORT_SUFFIX)

    def recover(self) -> None:
        """Finish (or roll back) what a killed publish left; derive sums and index again."""
        done = recover_files(self.journal, root=self.root, allowed=_in_packages)
        if done:
            log.warn(
                "finished publishing "
                + ", ".join(Path(p).name for p in done)
                + " (an earlier publish was interrupted)"
            )
        # Every writer's temporary files: the journal's (in the root), the wheels' and
        # reports', the index pages'.
        sweep_temps(self.root)
        sweep_temps(self.simple, recursive=True)
        if not self.packages.is_dir():
            return
        for p in self.packages.iterdir():
            # Temporary files of a publish killed before its journal (older forkpatch
            # versions named them ".<file>.<random>.tmp"): rolled back.
            if (
                p.name.startswith(".")
                and p.name.endswith((TMP_SUFFIX, ".tmp"))
                and (p.is_file() or p.is_symlink())
            ):
                p.unlink()
        if any(self.packages.glob("*.whl")):
            write_index_sums(self.packages)
            self.write_indexes()

    def existing(self, project_name: str) -> dict[str, str]:
        out = {}
        norm = canonicalize_name(project_name)
        if self.packages.is_dir():
            for p in self.packages.glob("*.whl"):
                ident = _identity(p.name)
                if ident is not None and ident[0] == norm:
                    out[p.name] = file_sha256(p)
        return out

    def publish(self, gate: Gate, report: SmokeReport) -> None:
        wheel = gate.wheel
        self.packages.mkdir(parents=True, exist_ok=True)
        dest = self.packages / wheel.path.name
        changes: dict[Path, bytes | Path | None] = {self.report_path(gate): dumps(report)}
        tmp: str | None = None
        try:
            if not dest.exists():
                fd, tmp = tempfile.mkstemp(
                    prefix=f".{dest.name}.", suffix=TMP_SUFFIX, dir=self.packages
                )
                os.close(fd)
                with naming(dest):
                    shutil.copyfile(gate.source, tmp)
                os.chmod(tmp, new_file_mode())
                if file_sha256(Path(tmp)) != wheel.sha256:
                    raise PublishError(
                        f"{wheel.path.name} changed while it was being copied",
                        tip="publish the final file again",
                    )
                write_event(f"temp-written {dest.name}")
                changes[dest] = Path(tmp)
            # The wheel and its report as one unit; sums and index derived afterwards.
            commit_files(changes, journal=self.journal, root=self.root, allowed=_in_packages)
        finally:
            if tmp is not None:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)
        write_index_sums(self.packages)
        self.write_indexes()

    def write_indexes(self) -> None:
        """Regenerate simple/ from packages/ (written last: no link to a missing file)."""
        projects: dict[str, list[Path]] = {}
        for p in sorted(self.packages.glob("*.whl")):
            ident = _identity(p.name)
            if ident is not None:
                projects.setdefault(ident[0], []).append(p)
        for name, files in projects.items():
            links = "\n".join(
                f'    <a href="../../packages/{quote(p.name)}#sha256={file_sha256(p)}">'
                f"{html.escape(p.name)}</a><br>"
                for p in files
            )
            atomic_write(
                self.simple / name / "index.html",
                _PAGE.format(title=f"Links for {html.escape(name)}", links=links).encode(),
            )
        links = "\n".join(
            f'    <a href="{quote(n)}/">{html.escape(n)}</a><br>' for n in sorted(projects)
        )
        atomic_write(
            self.simple / "index.html", _PAGE.format(title="Simple index", links=links).encode()
        )


PUBLISH_JOURNAL = ".forkpatch-publish.json"


def _in_packages(rel: str) -> bool:
    return rel.startswith("packages/") and rel.count("/") == 1


def write_index_sums(directory: Path) -> Path:
    """SHA256SUMS (``sha256sum -c`` format) for the wheels and reports in ``directory``
    (an index directory's packages/: every wheel and report there)."""
    return fsutil.write_sums(
        directory,
        {
            p.name: p
            for p in directory.iterdir()
            if p.is_file() and (p.name.endswith(".whl") or p.name.endswith(REPORT_SUFFIX))
        },
    )


# ---- an upload index


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            for k, v in attrs:
                if k == "href" and v:
                    self.links.append(v)


@dataclass(frozen=True)
class Credentials:
    username: str | None
    password: str | None = field(repr=False)

    @property
    def secrets(self) -> list[str | None]:
        """The password, and the Basic-auth forms of it a server might echo back."""
        if not self.password:
            return [self.password]
        pair = f"{self.username or ''}:{self.password}".encode()
        return [
            self.password,
            base64.b64encode(pair).decode("ascii"),
            base64.b64encode(self.password.encode()).decode("ascii"),
        ]


def credentials_for(url: str) -> Credentials:
    """TWINE_USERNAME / TWINE_PASSWORD, else the keyring entry for ``url`` (as twine does)."""
    user = os.environ.get("TWINE_USERNAME") or None
    password = os.environ.get("TWINE_PASSWORD") or None
    if password is None and user is not None:
        with contextlib.suppress(Exception):
            import keyring

            password = keyring.get_password(url, user)
    if password is not None and len(password) < MIN_SECRET_LENGTH:
        log.warn(
            f"the index password is shorter than {MIN_SECRET_LENGTH} characters: forkpatch "
            "hides it where a credential is expected (URLs, Authorization headers) but not "
            "everywhere it might occur in the index's answers; use a long token"
        )
    return Credentials(user, password)


class IndexTarget:
    """A PEP 503 index that accepts twine uploads (e.g. pypiserver)."""

    def __init__(self, upload_url: str, simple_url: str | None, *, timeout_s: float = 60.0) -> None:
        parts = urlsplit(upload_url)
        if parts.username or parts.password or "@" in parts.netloc:
            raise PublishError(
                "the index URL carries credentials; they would land in logs and shell history",
                tip="pass the plain URL and set TWINE_USERNAME / TWINE_PASSWORD "
                "(or store the password in the keyring)",
            )
        path = parts.path.rstrip("/")
        if simple_url is None:
            if path.endswith("/simple"):
                simple_url = upload_url.rstrip("/") + "/"
                upload_url = upload_url.rstrip("/")[: -len("simple")]
            else:
                simple_url = upload_url.rstrip("/") + "/simple/"
        self.upload_url = upload_url if upload_url.endswith("/") else upload_url + "/"
        self.simple_url = simple_url if simple_url.endswith("/") else simple_url + "/"
        self.creds = credentials_for(self.upload_url)
        self.timeout_s = timeout_s
        auth = None
        if self.creds.username is not None and self.creds.password is not None:
            token = base64.b64encode(f"{self.creds.username}:{self.creds.password}".encode())
            auth = Auth("Basic " + token.decode("ascii"), for_url=self.upload_url)
        # One deadline per request (timeout_s) and one for all of this command's requests.
        self.fetcher = Fetcher.for_command(
            "publish", request_s=timeout_s, command_s=COMMAND_DEADLINE_FACTOR * timeout_s, auth=auth
        )

    def describe(self) -> str:
        return f"{self.upload_url} (simple: {self.simple_url})"

    @property
    def index_url(self) -> str:
        return self.simple_url

    def locked(self) -> contextlib.AbstractContextManager[None]:
        """The index serialises its own uploads."""
        return contextlib.nullcontext()

    def unfinished(self, gate: Gate) -> bool:
        """An upload is one request: it is there or not."""
        return False

    def keep_beside(self, gate: Gate, report: SmokeReport) -> None:
        beside = beside_wheel(gate.wheel.path)
        atomic_write(beside, dumps(report))
        _merge_sums(
            gate.wheel.path.parent,
            {gate.wheel.path.name: gate.wheel.sha256, beside.name: file_sha256(beside)},
        )

    def _redact(self, text: str) -> str:
        return redact(text, self.creds.secrets)

    def _open(self, url: str, *, sha256: bool = False) -> bytes | None:
        """A page of the index (or, with ``sha256``, the hex digest of a linked file,
        streamed); None for 404. Bounded by :data:`PAGE_LIMIT` / :data:`FILE_LIMIT` and
        by the request's and the command's deadlines."""
        try:
            if sha256:
                return self.fetcher.sha256(url, limit=FILE_LIMIT).encode("ascii")
            return self.fetcher.get(url, limit=PAGE_LIMIT, headers={"Accept": "text/html"})
        except FetchError as exc:
            if exc.status == 404:
                return None
            if exc.status in (401, 403):
                who = f"user '{self.creds.username}'" if self.creds.username else "no credentials"
                raise PublishError(
                    f"the index at {self.simple_url} refused access (HTTP {exc.status}) with {who}",
                    tip="check TWINE_USERNAME / TWINE_PASSWORD (or the keyring entry for "
                    f"{self.upload_url}); nothing was uploaded",
                ) from None
            if exc.status is not None:
                raise PublishError(
                    f"the index at {self.simple_url} answered HTTP {exc.status} for "
                    f"{self._redact(url)}",
                    tip="nothing was uploaded; check the index's logs",
                ) from None
            raise PublishError(
                f"cannot reach the index at {self.simple_url}: {self._redact(exc.message)}",
                tip=f"nothing was uploaded; {exc.tip or 'is the index up and the URL right?'}",
            ) from None

    def existing(self, project_name: str) -> dict[str, str]:
        page_url = urljoin(self.simple_url, canonicalize_name(project_name) + "/")
        page = self._open(page_url)
        if page is None:
            # 404 for an unknown project; make sure the index itself answers.
            self._open(self.simple_url)
            return {}
        parser = _Links()
        parser.feed(page.decode("utf-8", "replace"))
        out = {}
        for href in parser.links:
            url, _, frag = href.partition("#")
            name = unquote(url.rstrip("/").rsplit("/", 1)[-1])
            if not name.endswith(".whl"):
                continue
            m = re.search(r"sha256=([0-9a-f]{64})", frag)
            if m:
                out[name] = m.group(1)
            else:
                digest = self._open(urljoin(page_url, url), sha256=True)
                out[name] = digest.decode("ascii") if digest else hashlib.sha256(b"").hexdigest()
        return out

    def publish(self, gate: Gate, report: SmokeReport) -> None:
        import sys

        cmd = [
            sys.executable,
            "-m",
            "twine",
            "--no-color",  # no ANSI colours in logs and messages
            "upload",
            "--repository-url",
            self.upload_url,
            "--non-interactive",
            "--disable-progress-bar",
            str(gate.source),
        ]
        if gate.overrides:
            tiers = ", ".join(gate.overrides)
            cmd[5:5] = [
                "--comment",
                (f"forkpatch: published without smoke tier(s) {tiers} (--allow-missing-tier)"),
            ]
        if gate.staged is not None and file_sha256(gate.staged) != gate.wheel.sha256:
            raise PublishError(
                f"the private copy of {gate.wheel.path.name} changed before the upload",
                tip="nothing was uploaded; run publish again",
            )
        # Credentials reach twine only through its environment variables.
        env = {"TWINE_NON_INTERACTIVE": "1", "NO_COLOR": "1"}
        result = run_tool(
            cmd,
            what=f"upload {gate.wheel.path.name}",
            env=env,
            secrets=self.creds.secrets,
            check=False,
        )
        if result.returncode != 0:
            out = self._redact(result.stdout or "")
            hint = "the index failed the upload: its logs say why; nothing else was changed"
            if re.search(r"Credential not found|NonInteractive", out):
                hint = (
                    "twine has no credentials for the index: set TWINE_USERNAME and "
                    f"TWINE_PASSWORD (or store the password in the keyring for {self.upload_url})"
                )
            elif re.search(r"\b(401|403)\b", out):
                who = "none were given" if self.creds.username is None else "check them"
                hint = (
                    "the index refused the credentials: set TWINE_USERNAME and TWINE_PASSWORD "
                    f"(or the keyring entry for {self.upload_url}); {who}"
                )
            elif re.search(r"ConnectionError|Connection refused|Max retries exceeded", out):
                hint = (
                    f"is the index up and the URL right? nothing was uploaded to {self.upload_url}"
                )
            elif re.search(r"\b(409|400)\b", out):
                hint = "the index already has a file of that name (it does not allow overwrites)"
            raise PublishError(
                f"the upload of {gate.wheel.path.name} to {self.upload_url} "
                f"failed (twine exited {result.returncode}):\n{tail(out, 12)}",
                tip=hint,
            )
        after = self.existing(gate.wheel.name)
        if after.get(gate.wheel.path.name) != gate.wheel.sha256:
            raise PublishError(
                f"{gate.wheel.path.name} was uploaded but the index does not "
                "list it with the right sha256",
                tip=f"check {self.simple_url}{canonicalize_name(gate.wheel.name)}/",
            )


def open_target(to: str, *, simple_url: str | None = None, timeout_s: float = 60.0) -> Target:
    parts = urlsplit(to)
    if parts.scheme in ("http", "https"):
        return IndexTarget(to, simple_url, timeout_s=timeout_s)
    if parts.scheme == "file":
        return DirTarget(Path(unquote(parts.path)))
    if parts.scheme and len(parts.scheme) > 1:
        raise PublishError(
            f"cannot publish to a '{parts.scheme}:' URL",
            tip="use an http(s):// index URL or a directory (path or file://)",
        )
    return DirTarget(Path(to))


# --------------------------------------------------------------------------- publish


@dataclass(frozen=True)
class Published:
    """One wheel published: its file and sha256, what was done, its report's place and
    the missing tiers allowed for it."""

    file: str
    sha256: str
    action: PublishAction
    report: str
    overrides: Mapping[str, str]

    def to_json(self) -> dict[str, JsonValue]:
        return {
            "file": self.file,
            "sha256": self.sha256,
            "action": self.action,
            "report": self.report,
            "allowed_missing_tiers": dict(self.overrides),
        }


def publish(opts: PublishOptions, project: Project | None = None) -> list[Published]:
    """Gate every wheel, check the target for conflicts, then publish (or refuse all)."""
    if not opts.wheels:
        raise PublishError("no wheel given", tip="forkpatch publish dist/*.whl --to URL|DIR")
    required = opts.required_tiers or required_tiers(project)
    check_uploader(opts.to)
    with tempfile.TemporaryDirectory(prefix="forkpatch-publish-") as stage:
        # Each wheel is copied once into a private directory (0700) and everything after
        # (identity, sha256, gate, upload, copy into a directory index) reads that copy:
        # replacing the user's file meanwhile cannot publish bytes that were not gated.
        gates = []
        for i, w in enumerate(opts.wheels):
            staged = _stage(Path(w), Path(stage) / str(i))
            try:
                info = read_wheel(staged)
            except SmokeError as exc:
                # Name the user's file, not the private copy the message was about.
                message = exc.message.replace(str(staged), str(w))
                raise PublishError(message, tip=exc.tip) from None
            info = replace(info, path=Path(w).resolve())
            gate = check_gate(
                info,
                project,
                required=required,
                allow_missing=opts.allow_missing_tiers,
                explicit=opts.reports,
            )
            gates.append(replace(gate, staged=staged))
        pause_point("publish-gated")
        return _publish_gated(opts, gates)


def _stage(wheel: Path, directory: Path) -> Path:
    if not wheel.is_file():
        raise PublishError(f"{wheel}: no such wheel file", tip="give the path of a built .whl")
    directory.mkdir(mode=0o700, parents=True)
    dest = directory / wheel.name
    shutil.copyfile(wheel, dest)
    os.chmod(dest, 0o400)
    return dest


def check_uploader(to: str) -> None:
    """An upload index needs twine in forkpatch's own environment: say so first, with
    the extra that brings it (a missing local tool is not the index's failure)."""
    if urlsplit(to).scheme in ("http", "https"):
        require_module(
            "twine",
            needed_for=f"uploading to {strip_url_credentials(to)}",
            install="pip install 'forkpatch[publish]' (the publish extra; or: pip install twine)",
        )


def _publish_gated(opts: PublishOptions, gates: list[Gate]) -> list[Published]:
    target = open_target(opts.to, simple_url=opts.simple_url, timeout_s=opts.timeout_s)
    out: list[Published] = []
    with target.locked():
        plan: list[tuple[Gate, bool]] = []
        for g in gates:
            there, refusal = _conflicts(g.wheel, target.existing(g.wheel.name))
            if refusal:
                raise PublishError(
                    refusal + f" at {target.describe()}",
                    tip="a published version is immutable: bump the build (change "
                    "the series) instead of replacing a file; nothing was "
                    "published",
                )
            plan.append((g, there))
        for g, there in plan:
            report = g.published_report(target.describe())
            if there:
                log.info(
                    f"{g.wheel.path.name} is already published at {target.describe()} "
                    "(same sha256): nothing to do"
                )
                if target.unfinished(g):
                    target.publish(g, report)  # a publish cut short before its report
            else:
                with log.step(f"publish {g.wheel.path.name} to {target.describe()}"):
                    target.publish(g, report)
            target.keep_beside(g, report)
            out.append(
                Published(
                    g.wheel.path.name,
                    g.wheel.sha256,
                    "already-published" if there else "uploaded",
                    str(g.report_path),
                    dict(g.overrides),
                )
            )
    return out


def _merge_sums(directory: Path, files: Mapping[str, str]) -> None:
    """Update the lines for ``files`` (name -> sha256) in directory/SHA256SUMS, keeping
    the others (the wheel's line is the gated sha256, not a new read of the file)."""
    fsutil.write_sums(directory, {**fsutil.read_sums(directory), **files})


def install_line(to: str, simple_url: str | None, files: list[str]) -> str:
    """The pip command that installs what was published to ``to``.

    ``--extra-index-url``, not ``--index-url``: the target holds only our wheels,
    and their dependencies (the fork's requirements) come from the default index.
    The exact pin keeps it safe from a same-named package elsewhere: a local
    version (``+fp.<label>``) cannot be on PyPI.
    """
    index = open_target(to, simple_url=simple_url).index_url
    pins = []
    for f in files:
        name, version, _build, _tags = parse_wheel_filename(Path(f).name)
        pin = f"'{name}=={version}'"
        if pin not in pins:
            pins.append(pin)
    return f"pip install --extra-index-url {index} {' '.join(pins)}"
