"""Core operations behind the simpler commands (init, status)."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from forkpatch import log
from forkpatch.errors import ForkpatchError, ForkRepoError, SeriesError, UsageError
from forkpatch.forkrepo import (
    ENV_FORK_REPO,
    STORE_DIR,
    ForkRepo,
    choose_source,
    is_local_source,
    local_git_dir,
)
from forkpatch.fsutil import atomic_write, digest, dump_state, load_state
from forkpatch.git import Git
from forkpatch.kinds import PATCH_STATUSES
from forkpatch.project import Project
from forkpatch.redact import CREDENTIAL_TIP, hide_url_secrets, url_has_credentials
from forkpatch.results import FileConflict, PatchResult
from forkpatch.series import SERIES_FILE, load_series, new_series, save_series
from forkpatch.stackstate import StackState
from forkpatch.typedreader import TypedReader

if TYPE_CHECKING:
    from forkpatch.stack import OutsideChange
    from forkpatch.upstream_status import UpstreamAnswer

# forkpatch's private state, and the wheels `build-wheel` writes (dist/ by default).
GITIGNORE_LINES = (".forkpatch/", "dist/")


def init_project(
    root: Path,
    *,
    fork_url: str | None,
    base_tag: str | None,
    fork_name: str | None,
    distribution: str,
    fork_override: str | None,
    force: bool = False,
) -> Project:
    """Write series.yaml and patches/ for a new series on ``base_tag``.

    In a directory that already holds series.yaml (a teammate's clone of the project)
    init is idempotent: series.yaml is read and kept, and what a clone lacks is added
    (patches/, the .gitignore lines); a ``fork_url`` or ``base_tag`` that contradicts it
    is refused (``force`` starts over)."""
    if fork_url is not None and url_has_credentials(fork_url):
        raise UsageError(
            f"--fork-url {hide_url_secrets(fork_url)} carries a password or token, which "
            "would be stored in series.yaml (and from there in every wheel and report); "
            "nothing was written",
            tip=CREDENTIAL_TIP,
        )
    root = root.resolve()
    series_path = root / SERIES_FILE
    if (series_path.exists() or series_path.is_symlink()) and not force:
        return _join_project(root, fork_url, base_tag, fork_override)
    if fork_url is None or base_tag is None:
        raise UsageError(
            f"no {SERIES_FILE} in {root}: a new series needs "
            + " and ".join(
                o for o, v in (("--fork-url URL", fork_url), ("--base TAG", base_tag)) if v is None
            ),
            tip="`forkpatch init --fork-url URL --base TAG` (in a clone of a project that "
            "holds series.yaml, plain `forkpatch init` is enough)",
        )
    enclosing = _enclosing_repository(root)
    if enclosing is not None:
        _refuse_the_fork(root, enclosing, fork_url, fork_override)
    made = not root.exists()
    root.mkdir(parents=True, exist_ok=True)
    fresh = not (root / STORE_DIR).exists()
    try:
        fork = ForkRepo.open(root, fork_url, fork_override)
        commit = fork.resolve_tag(base_tag)
        if enclosing is not None:
            _refuse_the_fork(root, enclosing, fork_url, fork_override, commit)
    except BaseException:
        import shutil  # only to undo a failed init: status loads none

        if fresh:  # a failed init leaves the directory as it found it
            shutil.rmtree(root / STORE_DIR, ignore_errors=True)
        if made:
            shutil.rmtree(root, ignore_errors=True)
        raise
    name = fork_name or Path(fork_url.rstrip("/")).name.removesuffix(".git") or "fork"
    series = new_series(
        fork_name=name, fork_url=fork_url, distribution=distribution, tag=base_tag, commit=commit
    )
    (root / "patches").mkdir(exist_ok=True)
    _ensure_gitignore(root)
    save_series(series, series_path)
    return Project(root=root, fork_override=fork_override)


def _join_project(
    root: Path, fork_url: str | None, base_tag: str | None, fork_override: str | None
) -> Project:
    """``init`` where series.yaml exists: keep it, add what a fresh clone lacks."""
    series_path = root / SERIES_FILE
    series = load_series(series_path)  # a broken file is reported precisely
    differ = [
        f"{what} {given!r} (it names {have!r})"
        for what, given, have in (
            ("--fork-url", fork_url, series.fork.url),
            ("--base", base_tag, series.base.tag),
        )
        if given is not None and given != have
    ]
    if differ:
        raise UsageError(
            f"{series_path} already exists, and init was given another "
            + " and ".join(differ)
            + "; nothing was changed",
            tip="run `forkpatch init` alone to set up this clone of the project as it is; "
            "`forkpatch rebase --onto TAG` moves the series to another base; "
            "or pass --force to start over (patches/ is kept)",
        )
    (root / "patches").mkdir(exist_ok=True)
    _ensure_gitignore(root)
    return Project(root=root, fork_override=fork_override)


def _enclosing_repository(root: Path) -> Path | None:
    """The git directory of the repository whose work tree holds ``root``, if any."""
    top = _work_tree_top(root)
    if top is None:
        return None
    try:
        return local_git_dir(str(top))
    except ForkRepoError:
        return None


def _work_tree_top(root: Path) -> Path | None:
    return next((d for d in (root, *root.parents) if (d / ".git").exists()), None)


def warn_if_not_ignored(root: Path, path: Path) -> None:
    """Warn when ``path`` (a directory forkpatch writes in the project at ``root``, such
    as dist/) is in a git repository that does not ignore it: what forkpatch puts there
    would show as untracked files, one `git add -A` away from a commit. ``init`` writes
    the ignore lines; a team repository made another way may lack them."""
    top = _work_tree_top(root)
    repo = _enclosing_repository(root)
    if top is None or repo is None:
        return
    rel = path.resolve().relative_to(top.resolve()).as_posix()
    probe = Git(repo, work_tree=top).run("check-ignore", "-q", "--", f"{rel}/", check=False)
    if probe.returncode == 1:  # 0: ignored; 128: git could not tell (say nothing)
        line = path.resolve().relative_to(root.resolve()).as_posix() + "/"
        log.warn(
            f"{path} is not ignored by git in {top}: the wheels written there show as "
            f"untracked files; add `{line}` to {root / '.gitignore'}"
        )


def _refuse_the_fork(
    root: Path, repo: Path, fork_url: str, override: str | None, commit: str | None = None
) -> None:
    """Refuse a project inside a clone of the fork: init writes series.yaml, patches/ and
    .forkpatch/ and edits .gitignore, and forkpatch never writes into the fork. The
    repository is the fork when it is the local fork forkpatch would use, when one of
    its remotes is the fork URL, or (``commit``) when it holds the base commit."""
    git = Git(repo)
    why = None
    source, _how = choose_source(fork_url, override)
    if is_local_source(source):
        with contextlib.suppress(ForkRepoError):
            if local_git_dir(source) == repo:
                why = f"it is the fork repository {source}"
    if why is None:
        raw = git.run("config", "--get-regexp", r"^remote\..*\.url$", check=False).stdout
        wanted = _same_url(fork_url)
        for line in raw.decode("utf-8", "replace").splitlines():
            remote, _, url = line.partition(" ")
            if _same_url(url) == wanted:
                why = f"its remote {remote.split('.')[1]} is the fork URL {hide_url_secrets(url)}"
    holds = commit is not None and git.run("cat-file", "-e", commit, check=False).returncode == 0
    if why is None and holds:
        assert commit is not None
        why = f"it holds the fork's base commit {commit[:12]}"
    if why is not None:
        top = repo.parent if repo.name == ".git" else repo
        raise UsageError(
            f"{root} is inside {top}, a clone of the fork ({why}): init would write "
            "series.yaml, patches/ and .forkpatch/ into it and edit its .gitignore, and "
            "forkpatch never writes into the fork; nothing was written",
            tip="make the project in a directory of its own outside the clone (a team "
            "repository), and let forkpatch read the clone from there: `--fork-repo "
            f"{top}` or `export {ENV_FORK_REPO}={top}`",
        )


def _same_url(url: str) -> str:
    """A fork URL compared loosely: no trailing slash or .git, scheme and host in lower case."""
    url = url.strip().rstrip("/").removesuffix(".git")
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    host, _, path = rest.partition("/")
    return f"{scheme.lower()}://{host.lower()}/{path}"


def _ensure_gitignore(root: Path) -> None:
    path = root / ".gitignore"
    # Bytes: the user's file keeps its own encoding and every byte of it.
    data = path.read_bytes() if path.exists() else b""
    have = {line.strip() for line in data.splitlines()}
    missing = [
        line
        for line in GITIGNORE_LINES
        if line.encode() not in have and line.rstrip("/").encode() not in have
    ]
    if missing:
        if data and not data.endswith(b"\n"):
            data += b"\n"
        atomic_write(path, data + "".join(f"{line}\n" for line in missing).encode())


@dataclass(frozen=True)
class Orphan:
    """A file in patches/ that series.yaml does not list; ``meant_by``: the entry whose
    missing ``file:`` most likely meant it (importing it would make a second patch of
    the same change), as (its name, the file it names)."""

    file: str
    meant_by: tuple[str, str] | None = None


@dataclass(frozen=True)
class StatusReport:
    base_tag: str
    base_commit: str
    results: tuple[PatchResult, ...]
    orphans: tuple[Orphan, ...] = ()
    applied: tuple[str, ...] | None = None  # names applied in the work tree, if there is one
    worktree: str | None = None
    editing: str | None = None
    worktree_problem: str | None = None  # the work tree is on another base than series.yaml
    # A work tree an interrupted `apply` left half made (`apply` makes it again).
    interrupted_worktree: str | None = None
    # Patch files and series.yaml entries changed outside forkpatch since the work tree
    # last matched them, and edits in the work tree not written to patches/ yet.
    changes: tuple[OutsideChange, ...] = ()
    # `status --upstream`: what became of what each patch sent upstream (by patch name).
    upstream: Mapping[str, UpstreamAnswer] | None = None

    @property
    def conflicted(self) -> bool:
        return any(r.status == "conflict" for r in self.results)

    def to_json(self) -> dict[str, object]:
        ups = self.upstream or {}
        return {
            "base": self.base_tag,
            "base_commit": self.base_commit,
            "patches": [
                {
                    **r.to_json(),
                    "applied": (r.name in self.applied) if self.applied is not None else None,
                    **({"upstream": ups[r.name].to_json()} if r.name in ups else {}),
                }
                for r in self.results
            ],
            "orphans": [o.file for o in self.orphans],
            "worktree": self.worktree,
            "editing": self.editing,
            "worktree_problem": self.worktree_problem,
            "interrupted_worktree": self.interrupted_worktree,
            "changes": [c.to_json() for c in self.changes],
        }


def series_status(project: Project, *, upstream: bool = False) -> StatusReport:
    """How each patch applies to the base, in order (in memory, nothing written);
    ``upstream``: with what became of what each patch sent upstream (the forge asked)."""
    series = project.series
    fork = project.fork()
    base = fork.verify_base(series.base.tag, series.base.commit)
    state = project.read_state() or StackState()
    has_worktree = state.worktree is not None and (state.worktree / ".git").exists()
    # With a work tree, a patch file that is missing was deleted outside forkpatch: that
    # is reported (the patches after it are tried without it), not fatal. Without one,
    # series.yaml names a file that does not exist: load_patch's error.
    missing = {
        e.name: f"{SERIES_FILE}:{e.line}: {project.rel(project.patch_path(e))} does not exist"
        + (f" (did you mean patches/{meant}?)" if (meant := project.meant_file(e)) else "")
        for e in series.patches
        if has_worktree and e.file is not None and not project.patch_path(e).exists()
    }
    results = tuple(
        PatchResult(name=r.name, status="conflict", detail=(missing[r.name],))
        if r.name in missing
        else r
        for r in _results_for_status(project, fork.store, base, missing)
    )
    orphans = tuple(
        Orphan(o, (m.name, m.file) if (m := project.meant_by(o)) and m.file else None)
        for o in project.orphans()
    )
    ups = None
    if upstream:
        from forkpatch.upstream_status import upstream_states

        ups = upstream_states(project, series.patches)
    report = StatusReport(
        base_tag=series.base.label,
        base_commit=base,
        results=results,
        orphans=orphans,
        upstream=ups,
    )
    if has_worktree:
        assert state.worktree is not None
        return _with_worktree(project, report, state, state.worktree)
    left = state.worktree or project.state_dir / "worktree"
    if left.is_dir() and not left.is_symlink() and any(left.iterdir()):
        return replace(report, interrupted_worktree=str(left))
    return report


def _with_worktree(
    project: Project, report: StatusReport, state: StackState, worktree: Path
) -> StatusReport:
    """The report with where the work tree stands: what is applied, edited, changed."""
    # The stack's model alone: reading it needs neither the engine nor the patch texts.
    from forkpatch.stack import StackModel, Sync

    try:
        stack = StackModel(project)
        problem = stack.base_mismatch()
        if problem is not None:
            return replace(report, worktree_problem=problem, worktree=str(worktree))
        wt = stack.wt()
        applied = stack.applied(wt, one_query=True)
        return replace(
            report,
            applied=tuple(a.name for a in applied),
            changes=tuple(Sync(stack).outside_changes(wt, applied, edits=True)),
            worktree=str(worktree),
            editing=state.editing.patch if state.editing is not None else None,
        )
    except SeriesError:
        raise
    except Exception:
        return report


# ----------------------------------------------------------------- the status cache

STATUS_FUZZ = 2
STATUS_CACHE = "status-cache.json"
_CACHE_KIND = "status-cache"
_CACHE_VERSION = 1


def _results_for_status(
    project: Project, store: Git, base: str, missing: dict[str, str]
) -> list[PatchResult]:
    """How each patch applies to ``base``, in memory (``missing``: the patches whose file
    is gone, tried as absent); kept in ``.forkpatch`` keyed by everything the answer
    depends on (the base, each patch file's bytes, the options, the code that computes
    it), so that a status with nothing changed reads it back without listing the
    fork's tree, reading its files, or even parsing the patch files."""
    entries = project.series.patches
    blobs = [None if e.name in missing else project.file_blob(e) for e in entries]
    path = project.state_dir / STATUS_CACHE
    names = [e.name for e in entries]
    # A listed file that is not there is load_patch's error to report: never cached.
    readable = all(
        b is not None or e.file is None or e.name in missing
        for e, b in zip(entries, blobs, strict=True)
    )
    key = _status_key(project, base, STATUS_FUZZ, blobs)
    cached = _read_status_cache(path, key, names) if readable else None
    if cached is not None:
        return cached
    from forkpatch.engine import Item, SeriesApplier

    items = [
        Item(entry=e, patch=None) if e.name in missing else project.items([e])[0] for e in entries
    ]
    # Fuzz is allowed here only to *report* it; nothing is written.
    applier = SeriesApplier(store, base, max_fuzz=STATUS_FUZZ)
    results = list(applier.run(items, write=False, stop_at_conflict=False).results)
    with contextlib.suppress(OSError):  # a read-only project still gets its status
        data = {"key": key, "results": [r.to_json() for r in results]}
        atomic_write(path, dump_state(_CACHE_KIND, _CACHE_VERSION, data))
    return results


def _status_key(project: Project, base: str, fuzz: int, blobs: list[str | None]) -> str:
    import json

    import forkpatch

    code = Path(forkpatch.__file__).parent
    stamp = sorted(
        (p.relative_to(code).as_posix(), p.stat().st_size, p.stat().st_mtime_ns)
        for p in code.rglob("*.py")
    )
    material = {
        "version": forkpatch.__version__,
        "code": stamp,
        "base": base,
        "fuzz": fuzz,
        "items": [
            [e.name, e.file, e.build_step, blob]
            for e, blob in zip(project.series.patches, blobs, strict=True)
        ],
    }
    return digest("sha256", json.dumps(material, sort_keys=True).encode())


def _read_status_cache(path: Path, key: str, names: list[str]) -> list[PatchResult] | None:
    """The cached results for ``key``, checked field by field (None: absent, stale,
    damaged, or not what this forkpatch writes)."""
    try:
        data = load_state(path, kind=_CACHE_KIND, version=_CACHE_VERSION)
        if data is None or data.get("key") != key:
            return None
        r = TypedReader(str(path))
        raw = r.items(data, "results", "")
        results = [_result_of(r, item, f"results[{i}]") for i, item in enumerate(raw)]
    except (ForkpatchError, OSError):
        return None
    return results if [x.name for x in results] == names else None


def _result_of(r: TypedReader, raw: object, where: str) -> PatchResult:
    """A PatchResult from its ``to_json()`` (what status shows of it)."""
    d = r.mapping(raw, where)
    conflicts = []
    for j, c in enumerate(r.items(d, "conflicts", where, optional=True)):
        cw = f"{where}.conflicts[{j}]"
        cd = r.mapping(c, cw)
        conflicts.append(
            FileConflict(
                r.text(cd, "path", cw),
                r.text(cd, "reason", cw),
                hunks=r.numbers(cd, "hunks", cw),
                line=r.maybe_number(cd, "line", cw),
            )
        )
    return PatchResult(
        name=r.text(d, "name", where),
        status=r.word(d, "status", PATCH_STATUSES, where),
        files=r.strings(d, "files", where, optional=True),
        added=r.number(d, "added", where),
        removed=r.number(d, "removed", where),
        detail=r.strings(d, "detail", where, optional=True),
        evidence=r.maybe_text(d, "evidence", where),
        conflicts=tuple(conflicts),
        warnings=r.strings(d, "warnings", where, optional=True),
    )
