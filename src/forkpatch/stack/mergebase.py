"""The merge base `push --merge` uses for a patch: the files its version was made on.

A patch's current file may come from a teammate (a `git pull`), made on other
versions of the patches below it than this stack has. Its merge base is the pre-image
of its files in the context it was made in, and "theirs" is its current diff applied
there. The contexts tried, in order: the images saved for it (``refresh --force``,
``import --merge``), when its current diff applies to them; the series as the
project's git history held it at each commit that changed the patch file (newest
first); the series' base alone.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from forkpatch import applier
from forkpatch.engine import Item, SeriesApplier
from forkpatch.errors import ForkpatchError, ForkRepoError
from forkpatch.git import Git
from forkpatch.patchfile import PatchFile, parse_patch
from forkpatch.project import Project
from forkpatch.series import SERIES_FILE, PatchEntry, parse_series

Images = dict[str, tuple[bytes | None, bytes | None]]

#: How many commits of a patch file's history are tried.
HISTORY_DEPTH = 20


def on_saved(patch: PatchFile, saved: Images) -> Images | None:
    """``patch`` applied to the pre-images saved for it: its images there, or None when
    it does not apply (the file changed since they were saved)."""
    out: Images = {}
    for fp in patch.files:
        src = fp.old_path or fp.path
        if src not in saved and fp.old_path is not None:
            return None
        pre = saved.get(src, (None, None))[0]
        try:
            post = applier.apply_file_patch(pre, fp).content
        except applier.HunkFailed:
            return None
        if fp.old_path and fp.new_path and fp.old_path != fp.new_path:
            out[fp.old_path] = (pre, None)
            out[fp.new_path] = (None, post)
        else:
            out[fp.path] = (pre, post)
    return out


def alone_on_base(
    project: Project, base: str, entry: PatchEntry, patch: PatchFile
) -> Images | None:
    """``patch`` applied by itself to the series' base commit."""
    res = SeriesApplier(project.fork().store, base).run(
        [Item(entry=entry, patch=patch)], write=False, stop_at_conflict=False
    )
    r = res.results[0]
    return r.images if r.images and r.status not in ("conflict", "blocked") else None


def from_history(project: Project, base: str, entry: PatchEntry, patch: PatchFile) -> Images | None:
    """``patch`` applied on the patches below it as the project's git history held them
    at each commit that changed its file (newest first), on the same base."""
    repo = _project_repo(project.root)
    if repo is None or entry.file is None:
        return None
    git, top = repo
    try:
        prefix = project.root.resolve().relative_to(top).as_posix()
    except ValueError:
        return None
    at = (prefix + "/") if prefix not in ("", ".") else ""
    rel = f"{at}patches/{entry.file}"
    log = git.run(
        "log", f"-n{HISTORY_DEPTH}", "--format=%H", "--", rel, check=False, user_config=True
    )
    if log.returncode != 0:
        return None
    store = project.fork().store
    for commit in log.stdout.decode().split():
        with contextlib.suppress(ForkpatchError, ValueError, UnicodeDecodeError):
            text = _show(git, commit, f"{at}{SERIES_FILE}")
            if text is None:
                continue
            old = parse_series(text.decode("utf-8"), path=f"{SERIES_FILE} at {commit[:12]}")
            if old.base.commit != base:
                continue
            below: list[Item] = []
            for e in old.patches:
                if e.file == entry.file or e.name == entry.name:
                    break
                data = _show(git, commit, f"{at}patches/{e.file}") if e.file else None
                if e.file is not None and data is None:
                    below = []
                    break
                below.append(
                    Item(
                        e, parse_patch(data, source=e.file or e.name) if data is not None else None
                    )
                )
            else:
                continue
            res = SeriesApplier(store, base).run(
                [*below, Item(entry=entry, patch=patch)], write=False, stop_at_conflict=False
            )
            r = res.results[-1]
            if r.images and r.status not in ("conflict", "blocked"):
                return r.images
    return None


def _show(git: Git, commit: str, rel: str) -> bytes | None:
    proc = git.run("show", f"{commit}:{rel}", check=False, user_config=True)
    return proc.stdout if proc.returncode == 0 else None


def _project_repo(root: Path) -> tuple[Git, Path] | None:
    """The git repository whose work tree holds the project, and its top directory."""
    from forkpatch.forkrepo import local_git_dir

    top = next((d for d in (root, *root.parents) if (d / ".git").exists()), None)
    if top is None:
        return None
    try:
        gitdir = local_git_dir(str(top))
    except ForkRepoError:
        return None
    return Git(gitdir, work_tree=top, user_config=True), top.resolve()
