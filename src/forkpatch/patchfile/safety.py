"""Path safety: a patch may touch only files inside the fork tree, never ``.git``."""

from __future__ import annotations

from forkpatch.errors import PathSafetyError
from forkpatch.fsutil import relpath_problem
from forkpatch.patchfile.model import PatchFile

# Code points HFS+ ignores when comparing names (git's is_hfs_dotgit list), so
# ".g\u200cit" is ".git" there.
_HFS_IGNORABLE = dict.fromkeys(
    [8204, 8205, 8206, 8207, 8234, 8235, 8236, 8237, 8238, *list(range(8298, 8304)), 65279]
)


def _is_dotgit(component: str) -> bool:
    """Whether a path component names the ``.git`` directory on some filesystem."""
    name = component.translate(_HFS_IGNORABLE).lower()
    name = name.split(":", 1)[0]  # NTFS alternate data streams: ".git::$INDEX_ALLOCATION"
    name = name.rstrip(" .")  # Windows drops trailing dots and spaces
    return name in (".git", "git~1")


def check_path(path: str, *, source: str) -> None:
    """Refuse a path that could write outside the fork tree or into ``.git``.

    This is a lexical check of one repository-relative path; symlinks in the
    tree are checked by the engine. Raises :class:`PathSafetyError` naming
    ``source``, the path and the reason.
    """
    reason = _path_problem(path)
    if reason is not None:
        raise PathSafetyError(
            f"{source}: unsafe path {path!r}: {reason}",
            tip="a patch may only touch files inside the fork tree; edit or remove this patch",
        )


def _path_problem(path: str) -> str | None:
    problem = relpath_problem(path)
    if problem is not None:
        return problem
    for component in path.split("/"):
        if _is_dotgit(component):
            return f"it goes into a .git directory ({component!r})"
    return None


def check_paths(patch: PatchFile) -> None:
    """Run :func:`check_path` on every old and new path of ``patch``."""
    for path in patch.paths:
        check_path(path, source=patch.source)
