"""Git plumbing: one runner, an object reader, a commit writer.

forkpatch drives git through its plumbing rather than a work tree. Objects, refs and
3-way file merges go through libgit2 in process (:mod:`forkpatch.gitobj`): reading a
blob, resolving a name or writing a commit costs a call, not a process. What touches
a work tree or an index, diffs that become patch bytes, and large imports (one
``git fast-import`` stream: one pack) stay with git's CLI, under :func:`git_env`.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from forkpatch.errors import GitError
from forkpatch.redact import hide_url_secrets

if TYPE_CHECKING:
    from forkpatch.gitobj import Objects

GIT_IDENTITY = ("forkpatch", "forkpatch@localhost")
_FULL_ID = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")

# Options that make `git diff-tree -p` output independent of the user's git
# configuration and of the repository's size (full ids never change length).
DIFF_OPTIONS = (
    "-p",
    "--full-index",
    "--binary",
    "-M",
    "--no-color",
    "--no-ext-diff",
    "--no-textconv",
    "--src-prefix=a/",
    "--dst-prefix=b/",
    "--diff-algorithm=myers",
    "--no-relative",
)


# What forkpatch's git reads of its configuration. Its own calls see no system,
# global or XDG file and no attributes file outside a tree: the private store and
# its work trees are forkpatch's, and what git prints there is parsed or becomes
# patch bytes. The keys below are pinned (to git's defaults, or off) in every call,
# over any file, a repository's own config included: no hooks, no filters or
# diff drivers from outside, no line-ending conversion, one output format, and one
# ignore file of editor and tool leftovers (data/worktree-ignore) for every machine.
PINNED_CONFIG: tuple[tuple[str, str], ...] = (
    ("core.hooksPath", os.devnull),
    ("core.attributesFile", os.devnull),
    ("core.excludesFile", str(Path(__file__).with_name("data") / "worktree-ignore")),
    ("core.fsmonitor", "false"),
    ("core.untrackedCache", "false"),
    ("core.autocrlf", "false"),
    ("core.safecrlf", "false"),
    ("core.eol", "lf"),
    ("core.quotePath", "true"),
    ("core.bigFileThreshold", "512m"),
    ("core.pager", "cat"),
    # A work tree's move writes its files from every core (git's parallel checkout, of
    # 100 files or more): the editing tree's move to a new fork tag is most of a warm
    # rebase's finish, and forkpatch's own work beside it waits on no core of its own.
    ("checkout.workers", "0"),
    ("color.ui", "false"),
    ("color.diff", "false"),
    ("color.status", "false"),
    ("diff.context", "3"),
    ("diff.interHunkContext", "0"),
    ("diff.suppressBlankEmpty", "false"),
    ("diff.noprefix", "false"),
    ("diff.mnemonicPrefix", "false"),
    ("diff.renames", "true"),
    ("diff.algorithm", "myers"),
    ("diff.indentHeuristic", "true"),
    ("diff.relative", "false"),
    ("diff.orderFile", os.devnull),
    ("diff.ignoreSubmodules", "none"),
    ("diff.submodule", "short"),
    ("status.renames", "true"),
    ("status.showUntrackedFiles", "all"),
    ("i18n.commitEncoding", "UTF-8"),
    ("i18n.logOutputEncoding", "UTF-8"),
    ("log.showSignature", "false"),
    ("log.decorate", "no"),
    ("log.abbrevCommit", "false"),
    ("log.follow", "false"),
    ("log.showRoot", "true"),
    ("log.mailmap", "false"),
    ("commit.gpgSign", "false"),
    ("tag.gpgSign", "false"),
    ("merge.conflictStyle", "merge"),
    ("apply.whitespace", "nowarn"),
    ("submodule.recurse", "false"),
    ("fetch.recurseSubmodules", "false"),
    ("gc.auto", "0"),
    ("maintenance.auto", "false"),
    ("init.defaultBranch", "main"),
    ("advice.detachedHead", "false"),
)

# Of the user's own environment, a call that reaches the network keeps what git needs
# to get there (ssh, proxies, TLS, askpass, tracing); every other GIT_* variable (an
# ambient GIT_DIR, GIT_EXTERNAL_DIFF, pathspec modes, `git -c` of a calling alias, a
# hook's GIT_INDEX_FILE) is dropped from every call.
_NETWORK_ENV = (
    "GIT_CONFIG_GLOBAL",
    "GIT_CONFIG_SYSTEM",
    "GIT_CONFIG_NOSYSTEM",
    "GIT_SSH",
    "GIT_SSL_",
    "GIT_HTTP_",
    "GIT_PROXY_",
    "GIT_CURL_",
    "GIT_ASKPASS",
    "GIT_ALLOW_PROTOCOL",
    "GIT_PROTOCOL_FROM_USER",
)
_KEEP_ENV = ("GIT_EXEC_PATH", "GIT_TRACE", "GIT_TERMINAL_PROMPT")


def git_env(extra: Mapping[str, str] | None = None, *, user_config: bool = False) -> dict[str, str]:
    """The environment of a forkpatch git call (see PINNED_CONFIG).

    ``user_config``: for calls that reach the fork's remote or read the user's own
    clones: the user's global and system files stay (credential helpers, proxies,
    ``insteadOf`` rules, ``safe.directory``), as do their ``GIT_CONFIG_COUNT``
    settings (the CI form of an ``insteadOf`` rule) and their network variables;
    the pinned keys still win over all of them.
    """
    keep = _KEEP_ENV + (_NETWORK_ENV if user_config else ())
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_") or k.startswith(keep)}
    pairs: list[tuple[str, str]] = []
    if user_config:
        try:
            count = int(os.environ.get("GIT_CONFIG_COUNT", "0"))
        except ValueError:
            count = 0
        for i in range(max(count, 0)):
            key = os.environ.get(f"GIT_CONFIG_KEY_{i}")
            if key is not None:
                pairs.append((key, os.environ.get(f"GIT_CONFIG_VALUE_{i}", "")))
    else:
        env["GIT_CONFIG_GLOBAL"] = os.devnull
        env["GIT_CONFIG_SYSTEM"] = os.devnull
        env["GIT_CONFIG_NOSYSTEM"] = "1"
    env["GIT_ATTR_NOSYSTEM"] = "1"
    # Optional locks stay on: a `git status` writes back the index it refreshed (after a
    # checkout every file is racily clean, and without the write-back each later status
    # re-reads all of them: 0.2 s instead of 0.02 s on the fork's tree). A writer that
    # meets such a short-lived lock waits for it (Git.run), so neither side fails.
    env["GIT_NO_REPLACE_OBJECTS"] = "1"
    env.setdefault("GIT_TERMINAL_PROMPT", "0")
    env["LC_ALL"] = "C"
    pairs.extend(PINNED_CONFIG)
    env["GIT_CONFIG_COUNT"] = str(len(pairs))
    for i, (key, value) in enumerate(pairs):
        env[f"GIT_CONFIG_KEY_{i}"] = key
        env[f"GIT_CONFIG_VALUE_{i}"] = value
    if extra:
        env.update(extra)
    return env


def libgit2_loaded() -> bool:
    """Whether this process has loaded libgit2 already (a served command's worker: the
    command server imports it ahead); one that has not pays 20-35 ms of imports to."""
    return "pygit2" in sys.modules


def split_diff_and_stat(out: bytes, what: str) -> tuple[bytes, str]:
    """(diff, diffstat) of ``git diff-tree -p --stat --summary`` output for one pair of
    trees (``what``, for the error): git writes the stat first and a blank line before
    the diff (a path in the stat is quoted where it holds a newline, so the first blank
    line before ``diff --git`` is the cut)."""
    if not out:
        return b"", ""
    cut = out.find(b"\n\ndiff --git ")
    if cut < 0:
        raise GitError(f"git diff-tree {what}: a diffstat without its diff")
    return out[cut + 2 :], out[: cut + 1].decode("utf-8", "surrogateescape")


@dataclass
class Git:
    """Runs git against one repository (``git_dir``), optionally with a work tree."""

    git_dir: Path
    work_tree: Path | None = None
    # The user's own repository (their fork clone, the project's repository): see git_env.
    user_config: bool = False

    def argv(self, args: Sequence[str]) -> list[str]:
        argv = ["git", f"--git-dir={self.git_dir}"]
        if self.work_tree is not None:
            argv.append(f"--work-tree={self.work_tree}")
        argv.extend(args)
        return argv

    def run(
        self,
        *args: str,
        input: bytes | None = None,
        env: Mapping[str, str] | None = None,
        check: bool = True,
        cwd: Path | None = None,
        timeout: float | None = None,
        user_config: bool = False,
    ) -> subprocess.CompletedProcess[bytes]:
        """``user_config``: this call reaches the fork's remote (see git_env)."""
        argv = self.argv(args)
        deadline: float | None = None
        while True:
            proc = self._spawn(argv, args, input, env, cwd, timeout, user_config)
            if proc.returncode == 0 or not check:
                break
            from forkpatch.gitlocks import LOCK_WAIT_S, held_lock  # only on a failure

            # A lock another live process holds (the user's own git, an editor's) is
            # waited for, bounded; git took nothing before it failed on the lock.
            if held_lock(proc.stderr) is None:
                break
            now = time.monotonic()
            deadline = now + LOCK_WAIT_S if deadline is None else deadline
            if now >= deadline:
                break
            time.sleep(0.05)
        if check and proc.returncode != 0:
            from forkpatch.gitlocks import lock_tip

            stderr = proc.stderr.decode("utf-8", "replace").strip()
            raise GitError(
                hide_url_secrets(
                    f"`git {' '.join(args)}` failed (exit {proc.returncode}): {stderr[-2000:]}"
                ),
                tip=lock_tip(stderr),
            )
        return proc

    def _spawn(
        self,
        argv: list[str],
        args: Sequence[str],
        input: bytes | None,
        env: Mapping[str, str] | None,
        cwd: Path | None,
        timeout: float | None,
        user_config: bool,
    ) -> subprocess.CompletedProcess[bytes]:
        proc = _popen(
            argv,
            piped_input=input is not None,
            env=git_env(env, user_config=user_config or self.user_config),
            cwd=cwd or self.work_tree,
        )
        try:
            with proc:
                try:
                    out, err = proc.communicate(input, timeout=timeout)
                except BaseException:
                    _stop(proc)
                    raise
                return subprocess.CompletedProcess(argv, proc.returncode, out, err)
        except subprocess.TimeoutExpired:
            raise GitError(
                hide_url_secrets(
                    f"`git {' '.join(args[:3])}` did not finish within "
                    f"{timeout:.0f}s (FORKPATCH_FETCH_TIMEOUT)"
                ),
                tip="check the network or the remote, then run again",
            ) from None

    def begin(self, *args: str, input: bytes | None = None) -> Begun:
        """``git ARGS`` started now and left to run beside this process's own work (a
        second core); :meth:`Begun.result` waits for it and answers as :meth:`run` would.
        For a read whose answer is needed later in the command (a ``git status``).
        ``input``: its standard input, fed (and its output read) by a thread, so that a
        large answer never waits on this process."""
        env = git_env(user_config=self.user_config)
        proc = _popen(self.argv(args), env=env, cwd=self.work_tree, piped_input=input is not None)
        return Begun(self, args, proc, input)

    def out(self, *args: str, **kw: object) -> str:
        return self.run(*args, **kw).stdout.decode("utf-8", "surrogateescape").strip()  # type: ignore[arg-type]

    @property
    def objects(self) -> Objects:
        """This repository's objects and refs in process (libgit2)."""
        from forkpatch.gitobj import objects

        return objects(self.git_dir)

    def rev_parse(self, rev: str) -> str | None:
        return self.objects.rev_parse(rev)

    def commit_of(self, rev: str) -> str | None:
        return self.rev_parse(f"{rev}^{{commit}}")

    def tree_of(self, rev: str) -> str:
        oid = self.rev_parse(f"{rev}^{{tree}}")
        if oid is None:
            raise GitError(f"no tree for '{rev}'")
        return oid

    def ls_tree(self, rev: str) -> dict[str, tuple[str, str]]:
        """Every file of a tree: path -> (mode, oid). Submodules appear as mode 160000."""
        return self.objects.ls_tree(rev)

    def ls_tree_cli(self, rev: str) -> dict[str, tuple[str, str]]:
        """:meth:`ls_tree` as ``git ls-tree -r`` gives it (the tests' oracle)."""
        raw = self.run("ls-tree", "-r", "-z", "--full-tree", rev).stdout
        entries: dict[str, tuple[str, str]] = {}
        for item in raw.split(b"\0"):
            if not item:
                continue
            meta, _, path = item.partition(b"\t")
            mode, _type, oid = meta.decode().split()
            entries[path.decode("utf-8", "surrogateescape")] = (mode, oid)
        return entries

    def diff_trees(self, old: str, new: str) -> bytes:
        """The canonical diff between two trees (see DIFF_OPTIONS)."""
        return self.run("diff-tree", *DIFF_OPTIONS, old, new).stdout

    def diff_and_stat(self, old: str, new: str) -> tuple[bytes, str]:
        """:meth:`diff_trees` and the diffstat a patch file shows (``--stat=72
        --summary``) of the same trees, from one ``git diff-tree``
        (:func:`split_diff_and_stat`)."""
        out = self.run("diff-tree", *DIFF_OPTIONS, "--stat=72", "--summary", old, new).stdout
        return split_diff_and_stat(out, f"{old} {new}")

    def stage(self, paths: Iterable[str]) -> None:
        """Stage ``paths`` of the work tree as they are now (written, changed or gone),
        whatever the tree's ignore rules say: files forkpatch wrote itself are the
        patch's files, and ``git add -A`` alone leaves an ignored new file out."""
        todo = sorted(set(paths))
        if todo:
            self.run(
                "add",
                "-A",
                "-f",
                "--pathspec-from-file=-",
                "--pathspec-file-nul",
                input=b"".join(p.encode("utf-8", "surrogateescape") + b"\0" for p in todo),
                env={"GIT_LITERAL_PATHSPECS": "1"},
            )

    def is_ancestor(self, a: str, b: str) -> bool:
        """``git merge-base --is-ancestor`` (git's own walk: libgit2's stops elsewhere at
        a shallow store's boundary; asked once per rebase, not per step)."""
        return self.run("merge-base", "--is-ancestor", a, b, check=False).returncode == 0

    def commit_tree(
        self, tree: str, parents: Iterable[str], message: str, *, date: str | None = None
    ) -> str:
        """A commit of forkpatch's identity (``git commit-tree``, in process). Like
        git's, ``tree`` and ``parents`` may be any revision (``X^``, a ref): each is
        resolved to its object id first."""
        ids = [p if _FULL_ID.fullmatch(p) else self.require_commit_of(p) for p in parents]
        tree_id = tree if _FULL_ID.fullmatch(tree) else self.tree_of(tree)
        return self.objects.write_commit(tree_id, ids, message, identity=GIT_IDENTITY, date=date)

    def require_commit_of(self, rev: str) -> str:
        oid = self.commit_of(rev)
        if oid is None:
            raise GitError(f"no commit '{rev}' in {self.git_dir}")
        return oid

    def update_ref(
        self, ref: str, new: str, old: str | None = None, *, message: str = "forkpatch"
    ) -> None:
        """Point ``ref`` at ``new`` (``old``: only if it is there now). In process for
        forkpatch's own repositories; the user's (``user_config``) get git's own
        update-ref, whose reflog names the user as their configuration says."""
        if self.user_config:
            args = ["update-ref", "-m", message, ref, new]
            self.run(*args, *([old] if old is not None else []))
            return
        self._locking(lambda: self.objects.update_ref(ref, new, old, message=message))

    def _locking(self, write: Callable[[], None]) -> None:
        """An in-process write that takes a lock file, under the CLI's lock rules: a
        lock a live process holds is waited for (bounded), a stale one named with the
        way out (see :func:`lock_tip`)."""
        deadline: float | None = None
        while True:
            try:
                write()
                return
            except GitError as exc:
                from forkpatch.gitlocks import LOCK_EXISTS, LOCK_WAIT_S, held_lock, lock_tip

                m = LOCK_EXISTS.search(exc.message)
                if m is None:
                    raise
                held = held_lock(m.group(0).encode())
                now = time.monotonic()
                deadline = now + LOCK_WAIT_S if deadline is None else deadline
                if held is None or now >= deadline:
                    raise GitError(exc.message, tip=lock_tip(m.group(0))) from None
                time.sleep(0.05)

    def delete_ref(self, ref: str) -> None:
        """Delete ``ref`` if it exists (a failure is left for the next command)."""
        with contextlib.suppress(GitError):
            self.objects.delete_ref(ref)

    def write_tree(self) -> str:
        """The tree of this work tree's index (``git write-tree``; in process)."""
        return self.objects.index_tree()

    def first_parents(
        self, base: str, head: str = "HEAD", *, one_query: bool = False
    ) -> list[tuple[str, str, str]]:
        """``git log --first-parent --reverse base..head``: (commit, first parent, message)
        oldest first; in process when ``base`` is on ``head``'s first-parent line.

        ``one_query``: the command asks git nothing else (``top``, ``status``): one
        ``git log`` costs less than loading libgit2 (see docs/architecture.md), unless
        this process has loaded it already."""
        cheaper = one_query and not libgit2_loaded()
        got = None if cheaper else self.objects.first_parents(base, head)
        if got is not None:
            return got
        raw = self.run(
            "log", "--first-parent", "--reverse", "--format=%H%x00%P%x00%B%x1e", f"{base}..{head}"
        ).stdout.decode("utf-8", "surrogateescape")
        out = []
        for record in raw.split("\x1e"):
            record = record.strip("\n")
            if record:
                commit, _, rest = record.partition("\x00")
                parents, _, message = rest.partition("\x00")
                out.append((commit, parents.split(" ", 1)[0], message))
        return out

    def objects_exist(self, oids: Iterable[str]) -> set[str]:
        return set(self.object_types(oids))

    def object_types(self, oids: Iterable[str]) -> dict[str, str]:
        """Object id -> its type (commit, tree, blob, tag) for the ids that are here."""
        return self.objects.types(oids)

    def hash_blob(self, data: bytes, *, write: bool = True) -> str:
        """The blob id of ``data`` (``git hash-object --no-filters``), written when ``write``."""
        return self.objects.write_blob(data) if write else blob_id(data)

    def reader(self, cache: dict[str, bytes | None] | None = None) -> ObjectReader:
        """An object reader; ``cache`` (blob id -> bytes) may be shared by readers."""
        return ObjectReader(self, cache)

    def fast_import(self, *, keep_pack: bool = False) -> FastImport:
        return FastImport(self, keep_pack=keep_pack)

    def repack_if_many(self, limit: int = 40, loose_limit: int | None = None) -> bool:
        """Merge this repository's own small packs (not its alternates') and its loose
        objects into one pack when there are more than ``limit`` packs or about
        ``loose_limit`` loose objects (default :data:`LOOSE_OBJECTS_LIMIT`), after many
        imports and in-process writes.

        Geometric: the small packs and the loose objects are rolled up together (and
        with the next bigger pack where the sizes ask for it), so a big pack, the fork's
        objects fetched into the store, is neither read nor rewritten, and the cost
        follows the writes since the last repack, not the store's size. Every object
        rolled up is kept, reachable or not (nothing here decides what forkpatch may
        still need). The loose objects are counted as ``git gc --auto`` counts them:
        one of the 256 fan-out directories, times 256."""
        objects = self.git_dir / "objects"
        packs = list((objects / "pack").glob("*.pack"))
        try:
            sample = sum(1 for e in os.scandir(objects / "17") if len(e.name) >= 38)
        except OSError:
            sample = 0
        loose_limit = LOOSE_OBJECTS_LIMIT if loose_limit is None else loose_limit
        if len(packs) <= limit and sample * 256 <= loose_limit:
            return False
        self.run("repack", "--geometric=2", "-d", "-l", "-q")
        return True


#: About this many loose objects in a store start a repack (``gc.auto``'s default).
LOOSE_OBJECTS_LIMIT = 6700


def blob_id(data: bytes, length: int = 40) -> str:
    """The id git gives ``data`` as a blob (``git hash-object``), without running git:
    sha1, or sha256 for a 64-digit ``length`` (a sha256 repository's ids)."""
    from forkpatch.fsutil import digest  # no hashlib for a small blob: a light start-up

    return digest("sha256" if length == 64 else "sha1", b"blob %d\0" % len(data), data)


class ObjectReader:
    """Objects read in process (libgit2), with a blob cache that readers may share."""

    def __init__(self, git: Git, cache: dict[str, bytes | None] | None = None) -> None:
        self._objects = git.objects
        self._cache: dict[str, bytes | None] = {} if cache is None else cache

    def read(self, spec: str) -> tuple[str, bytes] | None:
        """Return (type, content) for an object id or ``rev:path``; None when missing."""
        return self._objects.read(spec)

    def prefetch(self, oids: Iterable[str]) -> None:
        """Read many blobs into the cache (one call each: nothing to batch in process)."""
        for oid in oids:
            if oid and oid not in self._cache:
                self.blob(oid)

    def blob(self, oid: str) -> bytes | None:
        if oid in self._cache:
            return self._cache[oid]
        data = self._objects.blob(oid)
        self._cache[oid] = data
        return data

    def close(self) -> None:
        pass

    def __enter__(self) -> ObjectReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class CatFileReader:
    """A persistent ``git cat-file --batch``: git's own reading (the tests' oracle)."""

    def __init__(self, git: Git, cache: dict[str, bytes | None] | None = None) -> None:
        self._proc = subprocess.Popen(
            git.argv(["cat-file", "--batch"]),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=git_env(user_config=git.user_config),
        )
        self._cache: dict[str, bytes | None] = {} if cache is None else cache

    def read(self, spec: str) -> tuple[str, bytes] | None:
        """Return (type, content) for an object id or ``rev:path``; None when missing."""
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._proc.stdin.write(spec.encode("utf-8", "surrogateescape") + b"\n")
        self._proc.stdin.flush()
        header = self._proc.stdout.readline()
        if not header:
            raise GitError("git cat-file stopped unexpectedly")
        parts = header.split()
        if len(parts) != 3:  # "<spec> missing" / "ambiguous"
            return None
        size = int(parts[2])
        data = self._proc.stdout.read(size)
        self._proc.stdout.read(1)  # the LF after the content
        return parts[1].decode(), data

    def prefetch(self, oids: Iterable[str]) -> None:
        """Read many blobs into the cache in one pipelined batch.

        All requests are written by a thread while the replies are read here, in
        order: one round trip instead of one per blob, and no deadlock when the
        replies outgrow the pipe.
        """
        import threading

        todo = list(dict.fromkeys(o for o in oids if o and o not in self._cache))
        if not todo:
            return
        assert self._proc.stdin is not None and self._proc.stdout is not None
        stdin, stdout = self._proc.stdin, self._proc.stdout
        request = b"".join(o.encode() + b"\n" for o in todo)
        error: list[BaseException] = []

        def feed() -> None:
            try:
                stdin.write(request)
                stdin.flush()
            except BaseException as exc:
                error.append(exc)

        writer = threading.Thread(target=feed, daemon=True)
        writer.start()
        try:
            for oid in todo:
                header = stdout.readline()
                if not header:
                    raise GitError("git cat-file stopped unexpectedly")
                parts = header.split()
                if len(parts) != 3:  # "<oid> missing"
                    self._cache[oid] = None
                    continue
                data = stdout.read(int(parts[2]))
                stdout.read(1)  # the LF after the content
                self._cache[oid] = data if parts[1] == b"blob" else None
        finally:
            writer.join()
        if error:
            raise GitError(f"git cat-file: {error[0]}")

    def blob(self, oid: str) -> bytes | None:
        if oid in self._cache:
            return self._cache[oid]
        got = self.read(oid)
        data = got[1] if got and got[0] == "blob" else None
        self._cache[oid] = data
        return data

    def close(self) -> None:
        if self._proc.stdin:
            self._proc.stdin.close()
        self._proc.wait()
        if self._proc.stdout:
            self._proc.stdout.close()

    def __enter__(self) -> CatFileReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True)
class FileChange:
    """One change in a fast-import commit. ``data`` None with ``oid`` None deletes."""

    path: str
    mode: str | None = None
    data: bytes | None = None
    oid: str | None = None

    @property
    def is_delete(self) -> bool:
        return self.mode is None


FAST_IMPORT_REF = "refs/forkpatch/fast-import"


class FastImport:
    """Collects commits and writes them with one ``git fast-import`` run, or in process
    when they are few (:data:`IN_PROCESS_COMMITS` commits and new blobs): the same
    objects, the same ids.

    Commits are referenced by marks until :meth:`finish` returns the real ids.
    Nothing becomes reachable from a branch: callers move refs afterwards. (The
    commits name a ref, as fast-import wants; the stream ends by resetting it to
    nothing, so that fast-import never writes it and no process is needed to
    delete it.)
    """

    def __init__(self, git: Git, *, keep_pack: bool = False) -> None:
        """``keep_pack``: keep even a small import as one pack instead of unpacking it into
        loose objects (an extra process and a file per object); the caller repacks."""
        self._git = git
        self._chunks: list[bytes] = []
        self._mark = 0
        self._keep_pack = keep_pack
        self._refs: set[str] = set()
        # The same queue as data, for the in-process writer (references, not copies).
        self._queued: list[tuple[str, str, str, tuple[FileChange, ...], str, str]] = []
        self._blobs: dict[str, bytes] = {}
        self._blob_marks: dict[bytes, str] = {}  # the same bytes queued twice: one blob

    def commit(
        self,
        *,
        parent: str,
        changes: Iterable[FileChange],
        message: str,
        date: str,
        ref: str = FAST_IMPORT_REF,
    ) -> str:
        """Queue a commit on top of ``parent`` (an id or a ``:mark``). Returns its mark."""
        self._mark += 1
        mark = f":{self._mark}"
        changes = tuple(changes)
        self._queued.append((mark, parent, "commit", changes, message, date))
        name, email = GIT_IDENTITY
        msg = message.encode("utf-8")
        who = f"{name} <{email}> {_fast_import_date(date)}".encode()
        out = [
            b"commit " + ref.encode() + b"\n",
            b"mark " + mark.encode() + b"\n",
            b"author " + who + b"\n",
            b"committer " + who + b"\n",
            b"data %d\n" % len(msg),
            msg,
            b"\n",
            b"from " + parent.encode() + b"\n",
        ]
        for ch in changes:
            path = _quote_fi_path(ch.path)
            if ch.is_delete:
                out.append(b"D " + path + b"\n")
            elif ch.data is not None:
                out.append(f"M {ch.mode} inline ".encode() + path + b"\n")
                out.append(b"data %d\n" % len(ch.data))
                out.append(ch.data)
                out.append(b"\n")
            else:
                out.append(f"M {ch.mode} {ch.oid} ".encode() + path + b"\n")
        out.append(b"\n")
        self._chunks.extend(out)
        self._refs.add(ref)
        return mark

    def blob(self, data: bytes) -> str:
        """Queue a blob. Returns its mark (its id comes back from :meth:`finish`); the
        same bytes queued again get the same mark."""
        known = self._blob_marks.get(data)
        if known is not None:
            return known
        self._mark += 1
        mark = f":{self._mark}"
        self._blobs[mark] = data
        self._blob_marks[data] = mark
        self._queued.append((mark, "", "blob", (), "", ""))
        self._chunks.extend(
            [b"blob\nmark " + mark.encode() + b"\n", b"data %d\n" % len(data), data, b"\n"]
        )
        return mark

    def finish(self) -> dict[str, str]:
        """Write the queue; return mark -> object id (commits and blobs). The store's
        small packs and loose objects are rolled up once they are many (a caller that
        keeps its packs does that at its own end)."""
        if not self._mark:
            return {}
        if len(self._queued) <= IN_PROCESS_COMMITS or self._new_objects() <= IN_PROCESS_COMMITS:
            ids = self._finish_in_process()
        else:
            ids = self._run_fast_import()
        if not self._keep_pack:
            self._git.repack_if_many()
        return ids

    def _new_objects(self) -> int:
        """The commits queued and the blobs queued that the store does not hold yet (a
        rebase's stop stores the images of its merges, most of them there already)."""
        objects = self._git.objects
        commits = len(self._queued) - len(self._blobs)
        return commits + sum(not objects.has_blob(data) for data in self._blobs.values())

    def _run_fast_import(self) -> dict[str, str]:
        """The queue written by one ``git fast-import``."""
        import tempfile  # only for fast-import: read-only commands load none

        with tempfile.TemporaryDirectory(prefix="forkpatch-fi-") as tmp:
            marks = Path(tmp) / "marks"
            # `reset` without `from`: the ref is left as it was (absent), not written.
            resets = b"".join(b"reset " + ref.encode() + b"\n\n" for ref in sorted(self._refs))
            stream = b"".join(self._chunks) + resets + b"done\n"
            # Light compression (the store is private; building the trees, not zlib, is
            # most of the work); kept packs are not unpacked either.
            limit = ["-c", "pack.compression=1"]
            if self._keep_pack:
                limit += ["-c", "fastimport.unpackLimit=1"]
            self._git.run(
                *limit,
                "fast-import",
                "--quiet",
                "--done",
                f"--depth={FAST_IMPORT_DEPTH}",
                f"--export-marks={marks}",
                input=stream,
            )
            result = {}
            for line in marks.read_text(encoding="utf-8").splitlines():
                mark, oid = line.split()
                result[mark] = oid
        return result

    def _finish_in_process(self) -> dict[str, str]:
        """The queue written by libgit2: loose objects, no process."""
        objects = self._git.objects
        ids: dict[str, str] = {}
        trees: dict[str, str] = {}  # commit -> its tree, for the commits made here

        def oid_of(ref: str) -> str:
            """A mark, an object id, or (as fast-import's ``from`` takes) any revision."""
            if ref.startswith(":"):
                return ids[ref]
            return ref if _FULL_ID.fullmatch(ref) else self._git.require_commit_of(ref)

        for mark, parent, kind, changes, message, date in self._queued:
            if kind == "blob":
                ids[mark] = objects.write_blob(self._blobs[mark])
                continue
            parent_id = oid_of(parent)
            base_tree = trees.get(parent_id) or objects.rev_parse(f"{parent_id}^{{tree}}")
            edits: dict[str, tuple[str, str] | None] = {}
            for ch in changes:
                if ch.is_delete:
                    edits[ch.path] = None
                elif ch.data is not None:
                    edits[ch.path] = (ch.mode or "100644", objects.write_blob(ch.data))
                else:
                    edits[ch.path] = (ch.mode or "100644", oid_of(ch.oid or ""))
            tree = objects.write_tree(base_tree, edits) if edits else base_tree
            assert tree is not None
            commit = objects.write_commit(
                tree, [parent_id], message, identity=GIT_IDENTITY, date=date or None
            )
            ids[mark] = commit
            trees[commit] = tree
        return ids


#: Up to this many commits and blobs a :class:`FastImport` writes in process (loose
#: objects, no process to start); more go through one ``git fast-import`` (one pack).
#: Measured on the fork's large files (bench_edit_loop's refresh, the quiet 2-core box),
#: blobs written as git writes loose objects (:meth:`forkpatch.gitobj.Objects.write_blob`):
#: 10 commits 16-26 ms in process vs 62-69 ms fast-import, 50 commits 113-121 vs
#: 102-158 ms; past that fast-import's deltas and single pack win.
IN_PROCESS_COMMITS = 32

#: The longest delta chain fast-import makes. It deltifies each version of a file (and
#: of every tree above it) against the one before, so a series of N patches touching
#: a file leaves its newest version N deltas deep (50 by default): every later read
#: of the stack's top (ls-tree, diff, checkout, cat-file) replays the chain. Short
#: chains cost a little pack size and keep those reads flat whatever N is.
FAST_IMPORT_DEPTH = 4


def _fast_import_date(date: str) -> str:
    # git accepts "@<epoch> <tz>" in env vars; fast-import's raw format is "<epoch> <tz>".
    return date.lstrip("@")


def _quote_fi_path(path: str) -> bytes:
    raw = path.encode("utf-8", "surrogateescape")
    if raw.startswith(b'"') or b"\n" in raw or (b" " in raw and raw.startswith(b" ")):
        escaped = raw.replace(b"\\", b"\\\\").replace(b'"', b'\\"').replace(b"\n", b"\\n")
        return b'"' + escaped + b'"'
    return raw


def commit_date(git: Git, commit: str, reader: ObjectReader | None = None) -> str:
    """The committer date of ``commit`` as ``@epoch +zone`` (used for reproducible ids).

    With a ``reader`` already open the commit object is read through it (no process);
    otherwise with ``git cat-file`` (a tenth of what ``git show`` costs to start).
    """
    raw: bytes | None = None
    if reader is not None:
        got = reader.read(commit)
        if got is not None and got[0] == "commit":
            raw = got[1]
    if raw is None:
        got = git.objects.read(commit)
        if got is None or got[0] != "commit":
            raise GitError(f"no commit {commit}")
        raw = got[1]
    for line in raw.split(b"\n"):
        if not line:
            break  # end of the headers
        if line.startswith(b"committer "):
            when, zone = line.rsplit(b" ", 2)[-2:]
            return f"@{when.decode()} {zone.decode()}"
    raise GitError(f"commit {commit} has no committer line")


def init_bare(path: Path) -> Git:
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["git", "init", "-q", "--bare", str(path)],
        check=True,
        env=git_env(),
        stdout=subprocess.DEVNULL,
    )
    g = Git(path)
    # This store is private to forkpatch: never gc away our unreferenced
    # objects behind our back, never prompt. (Appended to the file git just
    # wrote: one process less than two `git config` calls.)
    with open(path / "config", "a", encoding="utf-8") as fh:
        fh.write("[gc]\n\tauto = 0\n[core]\n\tlogAllRefUpdates = false\n")
    return g


def _popen(
    argv: list[str], *, env: Mapping[str, str], cwd: Path | None, piped_input: bool = False
) -> subprocess.Popen[bytes]:
    """git started, its output and errors piped (its input too with ``piped_input``)."""
    try:
        return subprocess.Popen(
            argv,
            stdin=subprocess.PIPE if piped_input else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=cwd,
        )
    except FileNotFoundError:
        raise GitError(
            "git is not installed or not on PATH", tip="install git 2.38 or newer"
        ) from None


class Begun:
    """A git command :meth:`Git.begin` started: its answer once it ends."""

    def __init__(
        self,
        git: Git,
        args: Sequence[str],
        proc: subprocess.Popen[bytes],
        input: bytes | None = None,
    ) -> None:
        self.git, self.args, self.proc, self.input = git, tuple(args), proc, input
        self._done: subprocess.CompletedProcess[bytes] | None = None
        self._io: threading.Thread | None = None
        self._got: tuple[bytes, bytes] | BaseException | None = None
        if input is not None:
            self._io = threading.Thread(target=self._talk, name="git-begun", daemon=True)
            self._io.start()

    def _talk(self) -> None:
        try:
            self._got = self.proc.communicate(self.input)
        except BaseException as exc:  # handed to result()
            self._got = exc

    def done(self) -> bool:
        """Whether it has ended (its answer is then read without waiting)."""
        if self._io is not None:
            return not self._io.is_alive()
        return self.proc.poll() is not None

    def result(self) -> subprocess.CompletedProcess[bytes]:
        """Wait for it. A failure on a lock another live process holds, or any other,
        runs it again through :meth:`Git.run` (which waits for the lock, bounded, and
        raises what it raises): a started read never fails where a plain one would not."""
        if self._done is None:
            try:
                if self._io is not None:
                    self._io.join()
                    got = self._got
                    if isinstance(got, BaseException) or got is None:
                        raise GitError(
                            f"`git {' '.join(self.args[:2])}`: its output was lost: {got}"
                        )
                    out, err = got
                else:
                    out, err = self.proc.communicate()
            except BaseException:
                _stop(self.proc)
                raise
            done = subprocess.CompletedProcess(self.proc.args, self.proc.returncode, out, err)
            self._done = (
                done if done.returncode == 0 else self.git.run(*self.args, input=self.input)
            )
        return self._done

    def drop(self) -> None:
        """Its answer is not wanted (the tree changed, or the command ends): ended now."""
        if self._done is None:
            _stop(self.proc)
            if self._io is not None:
                self._io.join()
            else:
                with contextlib.suppress(OSError, ValueError):
                    self.proc.communicate()


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """End a git child when forkpatch is interrupted (Ctrl-C, a signal to forkpatch
    alone, a timeout): SIGINT first, on which git removes the lock files it holds and
    exits, then SIGKILL if it has not ended within a few seconds. Never left running."""
    import signal

    if proc.poll() is not None:
        return
    try:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=5)
    except BaseException:
        proc.kill()
        proc.wait()
