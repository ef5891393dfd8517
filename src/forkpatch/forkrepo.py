"""The fork repository, seen through forkpatch's private object store.

forkpatch never moves a branch or touches the work tree of the user's clone of
the fork. It keeps a bare repository under ``.forkpatch/repo.git`` in the
project. For a local fork (``--fork-repo PATH``, ``FORKPATCH_FORK_REPO`` or a
``fork.url`` that is a path) the store borrows the fork's objects through
``objects/info/alternates`` and copies only its tag refs (and its shallow
boundary, when it is a shallow clone), which takes milliseconds even for a fork
of vLLM's size. Nothing is ever written into the fork repository: it may be
read-only. For a remote URL the tags are fetched into the store.

Which repository is used, first match wins (:func:`choose_source`):

1. ``--fork-repo PATH`` on the command line;
2. ``fork.url`` (or ``init --fork-url``) when it is a local path: it is a clone already;
3. ``FORKPATCH_FORK_REPO``: the developer's local clone of the fork that fork.url names;
4. ``fork.url``, fetched over the network.

A repository that does not hold series.yaml's base commit is refused with an
error naming both (:meth:`ForkRepo.require_commit`): it is a clone of another
fork, or too shallow, and applying patches to it could only fail confusingly.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from forkpatch import log, settings
from forkpatch.errors import ForkRepoError, GitError, UsageError
from forkpatch.fsutil import atomic_write
from forkpatch.git import Git, init_bare, libgit2_loaded
from forkpatch.redact import hide_url_secrets

ENV_FORK_REPO = "FORKPATCH_FORK_REPO"
STORE_DIR = ".forkpatch"
FETCH_TIMEOUT = 300.0  # seconds, unless FORKPATCH_FETCH_TIMEOUT says otherwise


def fetch_timeout() -> float:
    return settings.duration("FORKPATCH_FETCH_TIMEOUT", FETCH_TIMEOUT)


def is_local_source(source: str) -> bool:
    if source.startswith("file://"):
        return True
    if re.match(r"^[a-z][a-z0-9+.-]*://", source) or re.match(r"^[^/]+@[^/]+:", source):
        return False
    return Path(source).exists()


def local_git_dir(source: str) -> Path:
    path = Path(source[len("file://") :] if source.startswith("file://") else source)
    path = path.expanduser().resolve()
    for candidate in (path / ".git", path):
        if (candidate / "objects").is_dir() and (candidate / "HEAD").exists():
            return candidate
        if candidate.is_file():  # a worktree or submodule: ".git" is a file
            text = candidate.read_text(encoding="utf-8", errors="surrogateescape").strip()
            if text.startswith("gitdir:"):
                gitdir = (candidate.parent / text.split(":", 1)[1].strip()).resolve()
                common = gitdir / "commondir"
                if common.exists():
                    gitdir = (
                        gitdir
                        / common.read_text(encoding="utf-8", errors="surrogateescape").strip()
                    ).resolve()
                return gitdir
    raise ForkRepoError(
        f"{path} is not a git repository",
        tip=f"point --fork-repo / {ENV_FORK_REPO} at a clone of the fork",
    )


def choose_source(url: str, override: str | None = None) -> tuple[str, str]:
    """(source, how it was chosen) for a fork ``url`` and a ``--fork-repo`` ``override``.

    An explicit ``--fork-repo`` wins; then a ``url`` that is a local path (it is
    already a clone: a developer's FORKPATCH_FORK_REPO, meant as a stand-in for the
    network URL, must not silently replace another local fork); then the
    environment variable; then the URL itself.
    """
    if override:
        return override, "--fork-repo"
    if is_local_source(url):
        return url, "fork.url"
    env = settings.text(ENV_FORK_REPO)
    if env:
        return env, ENV_FORK_REPO
    return url, "fork.url"


RefKind = Literal["tag", "branch", "remote branch", "ref", "commit"]

#: (source, tag) pairs already warned about in this process: "no tag, using the
#: recorded commit" is said once per command, not once per call.
_WARNED_NO_TAG: set[tuple[str, str]] = set()


@dataclass(frozen=True)
class ResolvedRef:
    """What a name given on the command line (``--onto main``) resolved to in the fork."""

    name: str
    commit: str
    kind: RefKind
    #: The full ref name (``refs/heads/main``), or the commit id for a commit.
    ref: str

    def describe(self) -> str:
        """``main (branch refs/heads/main at ae13773a0dee)``, for messages and reports."""
        if self.kind == "commit":
            return f"commit {self.commit[:12]}"
        where = "" if self.ref == f"refs/tags/{self.name}" else f" {self.ref}"
        return f"{self.name} ({self.kind}{where} at {self.commit[:12]})"


@dataclass
class ForkRepo:
    """The project's view of the fork: tags, commits and objects."""

    store: Git
    source: str
    local: bool
    #: Where ``source`` came from: "--fork-repo", "fork.url" or "FORKPATCH_FORK_REPO".
    chosen_by: str = "fork.url"

    @classmethod
    def open(cls, project_dir: Path, url: str, override: str | None = None) -> ForkRepo:
        source, chosen_by = choose_source(url, override)
        local = is_local_source(source)
        store_path = project_dir / STORE_DIR / "repo.git"
        (project_dir / STORE_DIR).mkdir(parents=True, exist_ok=True)
        ignore = project_dir / STORE_DIR / ".gitignore"
        if not ignore.exists():
            atomic_write(ignore, b"# forkpatch's private state; never commit it\n*\n")
        git = Git(store_path) if (store_path / "HEAD").exists() else init_bare(store_path)
        repo = cls(store=git, source=source, local=local, chosen_by=chosen_by)
        if local:
            repo._link_local()
        return repo

    def describe(self) -> str:
        """The source and how it was chosen, for messages."""
        return f"{self.source} (from {self.chosen_by})"

    # ----------------------------------------------------------------- sources

    def _link_local(self) -> None:
        src = local_git_dir(self.source)
        objects = (src / "objects").resolve()
        alt = self.store.git_dir / "objects" / "info" / "alternates"
        alt.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(alt, f"{objects}\n".encode())  # no-op when the bytes are equal
        # A shallow clone's boundary commits have parents that are not there; git in
        # the store must know it too, or walking past them fails ("Failed to traverse
        # parents") instead of stopping there.
        shallow = src / "shallow"
        mine = self.store.git_dir / "shallow"
        have = mine.read_bytes() if mine.exists() else None
        want_shallow = shallow.read_bytes() if shallow.is_file() else None
        if want_shallow != have:
            if want_shallow is None:
                mine.unlink()
            else:
                atomic_write(mine, want_shallow)
        self._source_git = Git(src, user_config=True)

    def source_tags(self) -> dict[str, str]:
        """Tag name -> commit id, as the source has them now (tags of commits only)."""
        return self.source_refs()[0]

    def source_refs(self) -> tuple[dict[str, str], dict[str, str]]:
        """(tag -> commit, tag -> the type of what it names for a tag of no commit).

        Tags are peeled through any number of tag objects (a tag of a tag of a
        commit names that commit). A tag of a tree or a blob names no commit: it is
        no release and no base, whatever its name says.
        """
        named = self._local_tags() if self.local else self._remote_tags()
        types = self.store.object_types(named.values())
        commits: dict[str, str] = {}
        others: dict[str, str] = {}
        for tag, oid in named.items():
            kind = types.get(oid, "commit")  # not here yet: checked once fetched
            if kind == "commit":
                commits[tag] = oid
            else:
                others[tag] = kind
        return commits, others

    def tag_kind(self, tag: str, oid: str) -> str:
        """The type of what ``tag`` names (``oid``, peeled), fetching the tag first when
        the store does not hold it yet (a remote fork's new tag)."""
        kind = self.store.object_types([oid]).get(oid)
        if kind is None:
            self.fetch([f"+refs/tags/{tag}:refs/tags/{tag}"])
            peeled = self.store.rev_parse(f"refs/tags/{tag}^{{}}") or oid
            kind = self.store.object_types([peeled]).get(peeled)
        return kind or "commit"

    def _local_tags(self) -> dict[str, str]:
        """Tag -> the object it names once every tag object is peeled, in a local fork."""
        out = self._source_git.run(
            "for-each-ref",
            "--format=%(refname:strip=2) %(objectname) %(*objecttype) %(*objectname)",
            "refs/tags",
        ).stdout.decode()
        named: dict[str, str] = {}
        deeper: list[str] = []
        for line in out.splitlines():
            parts = line.split()
            if len(parts) == 2:
                named[parts[0]] = parts[1]
            elif len(parts) == 4:
                named[parts[0]] = parts[3]
                if parts[2] == "tag":  # %(*objectname) peels one level only
                    deeper.append(parts[0])
        if deeper:
            peeled = self._source_git.run(
                "cat-file",
                "--batch-check=%(objectname)",
                input="".join(f"refs/tags/{t}^{{}}\n" for t in deeper).encode(),
            ).stdout.decode()
            for tag, oid in zip(deeper, peeled.splitlines(), strict=True):
                named[tag] = oid.split()[0]
        return named

    def _remote_tags(self) -> dict[str, str]:
        """Tag -> the object it names, peeled by the remote (``^{}``: fully)."""
        tags: dict[str, str] = {}
        peeled: dict[str, str] = {}
        for oid, ref in self._ls_remote("--tags", "tags"):
            name = ref[len("refs/tags/") :]
            if name.endswith("^{}"):
                peeled[name[:-3]] = oid
            else:
                tags[name] = oid
        tags.update(peeled)
        return tags

    def _ls_remote(self, which: str, what: str) -> list[tuple[str, str]]:
        """(object id, ref) of the remote's ``--tags`` or ``--heads``; ``what`` names
        them in the error."""
        proc = self.store.run(
            "ls-remote", which, self.source, check=False, timeout=fetch_timeout(), user_config=True
        )
        if proc.returncode != 0:
            raise self._remote_error(f"list {what} of", proc)
        found = []
        for line in proc.stdout.decode("utf-8", "replace").splitlines():
            oid, _, ref = line.partition("\t")
            if ref:
                found.append((oid, ref))
        return found

    def fetch(self, refspecs: list[str] | None = None) -> None:
        """Bring the source's tags into the store (``refspecs``: just those refs). Branch
        heads are fetched only by name where one is needed (track's default branch):
        a fork's other branches can hold far more history than its releases."""
        specs = refspecs or ["+refs/tags/*:refs/tags/*"]
        proc = self.store.run(
            "fetch",
            "--quiet",
            "--no-write-fetch-head",
            "--prune",
            "--no-tags",
            self._fetch_url(),
            *specs,
            check=False,
            timeout=fetch_timeout(),
            user_config=True,
        )
        if proc.returncode != 0:
            raise self._remote_error("fetch from", proc)

    def _remote_error(self, action: str, proc: subprocess.CompletedProcess[bytes]) -> ForkRepoError:
        """A failed ls-remote/fetch: git's own words, with credentials in URLs hidden."""
        from forkpatch.cmdserver import caller_terminal_unreachable

        tip = f"check the URL and network, or use --fork-repo PATH / {ENV_FORK_REPO}"
        if not self.local and caller_terminal_unreachable():
            tip += (
                "; this command ran in forkpatch's command server, where ssh cannot ask "
                "on your terminal (a new host key, a key's passphrase): "
                "`FORKPATCH_SERVER=0 forkpatch ...` runs it here"
            )
        return ForkRepoError(
            hide_url_secrets(
                f"cannot {action} the fork at {self.source}: "
                f"{proc.stderr.decode('utf-8', 'replace').strip()[-500:]}"
            ),
            tip=tip,
        )

    def _fetch_url(self) -> str:
        if self.local:
            return str(local_git_dir(self.source))
        return self.source

    # ----------------------------------------------------------------- tags

    def resolve_tag(self, tag: str, *, refresh: bool = True) -> str:
        """The commit a tag names in the fork; a clear error listing near tags."""
        commit = None
        if not refresh:
            commit = self.store.commit_of(f"refs/tags/{tag}")
        elif self.local:
            commit = self._local_tag(tag)
        if commit is None:  # not a tag of a commit here: the checks below say why
            tags, others = self.source_refs()
            if tag in others:
                self._refuse_non_commit(
                    tag, self.store.rev_parse(f"refs/tags/{tag}^{{}}"), others[tag]
                )
            if tag not in tags:
                raise ForkRepoError(
                    f"tag '{tag}' is not in the fork ({self.source}); "
                    f"nearest known tags: {', '.join(nearest_tags(tag, tags)) or 'none'}",
                    tip=self._tags_tip(),
                )
            commit = tags[tag]
            if (
                self.store.commit_of(commit) is None
                or self.store.commit_of(f"refs/tags/{tag}") != commit
            ) and not self._copy_local_tag(tag, commit):
                self.fetch([f"+refs/tags/{tag}:refs/tags/{tag}"])
            resolved = self.store.commit_of(f"refs/tags/{tag}")
            if resolved is None:
                self._refuse_non_commit(tag, self.store.rev_parse(f"refs/tags/{tag}^{{}}"))
                raise ForkRepoError(f"tag '{tag}' could not be read from {self.source}")
            commit = resolved
        return commit

    def resolve_ref(self, name: str) -> ResolvedRef:
        """Any name of a commit of the fork: a tag first (the usual target), then a
        branch, a remote-tracking branch (``origin/main``), a full ref name, a commit id.

        The commit is present in the store afterwards (a tag's ref is copied or
        fetched as :meth:`resolve_tag` does; a remote branch head is fetched).
        """
        if not name or name.startswith("-") or any(c.isspace() or ord(c) < 32 for c in name):
            raise UsageError(
                f"'{name}' is not a ref name",
                tip="give a tag (v1.3.0), a branch (main, origin/main) or a commit id",
            )
        if self.local:
            return self._resolve_local_ref(name)
        return self._resolve_remote_ref(name)

    def _resolve_local_ref(self, name: str) -> ResolvedRef:
        candidates: list[tuple[str, RefKind]] = []
        if not name.startswith("refs/"):
            candidates += [
                (f"refs/tags/{name}", "tag"),
                (f"refs/heads/{name}", "branch"),
                (f"refs/remotes/{name}", "remote branch"),
            ]
        else:
            candidates.append((name, "tag" if name.startswith("refs/tags/") else "ref"))
        for ref, kind in candidates:
            if kind == "tag":
                tag = ref[len("refs/tags/") :]
                peeled = self._peel_local(ref)
                if peeled is None:
                    continue
                if peeled[2] != "commit":  # a tag of a tree or a blob: named as such
                    self._refuse_non_commit(tag, peeled[1], peeled[2])
                commit = self._local_tag(tag, peeled)
                return ResolvedRef(tag, commit or self.resolve_tag(tag), "tag", ref)
            commit = self._source_git.commit_of(ref)
            if commit is None:
                continue
            if kind == "ref" and ref.startswith("refs/heads/"):
                kind = "branch"
            elif kind == "ref" and ref.startswith("refs/remotes/"):
                kind = "remote branch"
            return ResolvedRef(name, commit, kind, ref)
        if re.fullmatch(r"[0-9a-fA-F]{4,40}", name):
            commit = self._source_git.commit_of(name)
            if commit is not None:
                return ResolvedRef(name, commit, "commit", commit)
        raise self._unknown_ref(name, self.source_tags(), self._local_branches())

    def _local_branches(self) -> list[str]:
        out = self._source_git.run(
            "for-each-ref", "--format=%(refname:short)", "refs/heads", "refs/remotes", check=False
        ).stdout.decode("utf-8", "replace")
        return [line for line in out.splitlines() if line and not line.endswith("/HEAD")]

    def _resolve_remote_ref(self, name: str) -> ResolvedRef:
        tags, others = self.source_refs()
        tag = name[len("refs/tags/") :] if name.startswith("refs/tags/") else name
        if tag in others:
            self._refuse_non_commit(tag, None, others[tag])
        if tag in tags:
            return ResolvedRef(tag, self.resolve_tag(tag), "tag", f"refs/tags/{tag}")
        heads = {
            ref[len("refs/heads/") :]: oid for oid, ref in self._ls_remote("--heads", "branches")
        }
        branch = name[len("refs/heads/") :] if name.startswith("refs/heads/") else name
        branch = branch[len("origin/") :] if branch.startswith("origin/") else branch
        if branch in heads:
            self.fetch([f"+refs/heads/{branch}:refs/fork/heads/{branch}"])
            commit = self.store.commit_of(f"refs/fork/heads/{branch}")
            if commit is not None:
                return ResolvedRef(name, commit, "branch", f"refs/heads/{branch}")
        if re.fullmatch(r"[0-9a-fA-F]{4,40}", name):
            commit = self.store.commit_of(name)
            if commit is None:
                self.fetch()
                commit = self.store.commit_of(name)
            if commit is not None:
                return ResolvedRef(name, commit, "commit", commit)
        raise self._unknown_ref(name, tags, sorted(heads))

    def _unknown_ref(self, name: str, tags: dict[str, str], branches: list[str]) -> ForkRepoError:
        near = nearest_tags(name, tags)
        import difflib

        near_branches = difflib.get_close_matches(name, branches, n=3, cutoff=0.5)
        known = f"nearest tags: {', '.join(near) or 'none'}"
        if near_branches:
            known += f"; branches: {', '.join(near_branches)}"
        return ForkRepoError(
            f"'{name}' is not a tag, branch or commit of the fork ({self.source}); {known}",
            tip=self._tags_tip()
            if not tags
            else "give a tag, a branch (main, origin/main) or a commit id of the fork",
        )

    def _tags_tip(self) -> str:
        if self.local:
            return f"`git -C {self.source} fetch --tags` brings the tags a clone lacks"
        return f"`git ls-remote {self.source}` lists the fork's tags and branches"

    def _refuse_non_commit(self, tag: str, oid: str | None, kind: str | None = None) -> None:
        """A tag that names a tree or a blob is refused, naming the tag and what it names."""
        if kind is None and oid is not None:
            kind = self.store.object_types([oid]).get(oid)
        if kind is None or kind == "commit":
            return
        raise ForkRepoError(
            f"tag '{tag}' in the fork ({self.source}) names a {kind}"
            + (f" ({oid[:12]})" if oid else "")
            + ", not a commit: it is no release and cannot be a base",
            tip="name a tag of a commit (`git ls-remote --tags <fork>` lists them, "
            "`git cat-file -t TAG^{}` shows what one names)",
        )

    def _local_base(self, tag: str, recorded: str) -> str:
        """The commit ``tag`` names in a local fork that holds ``recorded``, with the
        store's tag kept equal to the fork's: one git process when all is well (for
        `apply` this is most of the command), the precise error otherwise."""
        # Every argument starts with refs/ or is 40 hex digits: none is an option.
        names = (f"refs/tags/{tag}", f"refs/tags/{tag}^{{commit}}", f"{recorded}^{{commit}}")
        if libgit2_loaded():  # a served command: libgit2 answers, no process
            found = [self._source_git.objects.rev_parse(name) for name in names]
            out = [oid for oid in found if oid is not None]
        else:
            proc = self._source_git.run("rev-parse", *names, check=False)
            out = proc.stdout.decode().split() if proc.returncode == 0 else []
        if len(out) != 3:
            # First: is this a clone of the right fork at all? A wrong repository
            # (another fork, FORKPATCH_FORK_REPO left over from other work) would
            # otherwise show up as a moved tag or as patches that do not apply.
            self.require_commit(recorded, f"series.yaml's base ({tag})")
            if self._source_git.rev_parse(f"refs/tags/{tag}") is None:
                # A clone without tags (`--no-tags`, a CI checkout) that holds the
                # recorded commit: the commit is the base; the tag only names it.
                self._warn_no_tag(tag, recorded)
                return recorded
            return self.resolve_tag(tag)  # not there: its error lists the near tags
        oid, commit, _recorded = out
        loose = self.store.git_dir / "refs" / "tags" / tag
        if not (
            loose.is_file() and loose.read_text(encoding="utf-8", errors="replace").strip() == oid
        ):
            self.store.update_ref(f"refs/tags/{tag}", oid)
        return commit

    def _warn_no_tag(self, tag: str, recorded: str) -> None:
        if (self.source, tag) in _WARNED_NO_TAG or recorded == tag.lower():
            return  # a base named by its commit id needs no tag
        _WARNED_NO_TAG.add((self.source, tag))
        if self._is_branch(tag):
            # A series rebased onto a branch: the branch moves on, the base stays.
            log.info(
                f"base: '{tag}' is a branch of the fork; the series is based on the commit "
                f"series.yaml records, {recorded[:12]}"
            )
            return
        log.warn(
            f"the fork ({self.source}) has no tag '{tag}'; using the commit series.yaml "
            f"records for it, {recorded[:12]}; {self._tags_tip()}"
        )

    def _is_branch(self, name: str) -> bool:
        """Whether ``name`` is a branch of the fork: a local branch, a remote-tracking
        one (``origin/main``), or ``main`` as a clone has it from its remote
        (``refs/remotes/origin/main``: a teammate's clone of the fork)."""
        if self.local:
            refs = (f"refs/heads/{name}", f"refs/remotes/{name}")
            if any(self._source_git.rev_parse(ref) is not None for ref in refs):
                return True
            remotes = self._source_git.run(
                "for-each-ref", "--format=%(refname)", "refs/remotes", check=False
            ).stdout.decode("utf-8", "replace")
            return any(
                ref.count("/") >= 3 and ref.split("/", 3)[3] == name for ref in remotes.split()
            )
        branch = name[len("origin/") :] if name.startswith("origin/") else name
        if self.store.rev_parse(f"refs/fork/heads/{branch}") is not None:
            return True
        try:
            heads = self._ls_remote("--heads", "branches")
        except ForkRepoError:
            return False
        return f"refs/heads/{branch}" in {ref for _oid, ref in heads}

    def _peel_local(self, ref: str) -> tuple[str, str, str] | None:
        """(the object ``ref`` names, that object peeled of every tag object, its type)
        in a local fork, read in process (one git process where libgit2 cannot open the
        fork: an extension it does not know); None when there is no such ref."""
        try:
            return self._source_git.objects.peel(ref)
        except GitError:
            pass
        out = self._source_git.run(
            "cat-file",
            "--batch-check=%(objectname) %(objecttype)",
            input=f"{ref}\n{ref}^{{}}\n".encode("utf-8", "surrogateescape"),
            check=False,
        ).stdout.decode("utf-8", "replace")
        lines = [line.split() for line in out.splitlines()]
        kinds = ("commit", "tree", "blob", "tag")  # else "missing" or "ambiguous"
        if len(lines) != 2 or any(len(parts) != 2 or parts[1] not in kinds for parts in lines):
            return None
        return lines[0][0], lines[1][0], lines[1][1]

    def _local_tag(self, tag: str, peeled: tuple[str, str, str] | None = None) -> str | None:
        """The commit a local fork's tag names, with the store's tag made the fork's (its
        objects are borrowed, so no fetch): two git processes, three when the tag is new
        or moved. None when the fork has no such tag of a commit."""
        got = peeled or self._peel_local(f"refs/tags/{tag}")
        if got is None or got[2] != "commit":
            return None
        own, commit, _kind = got
        if self.store.rev_parse(f"refs/tags/{tag}") != own:
            if self.store.commit_of(own) != commit:  # the fork's objects are not borrowed
                return None
            self.store.update_ref(f"refs/tags/{tag}", own)
        return commit

    def _copy_local_tag(self, tag: str, commit: str) -> bool:
        """For a local fork, point the store's tag at the fork's tag object directly:
        its objects are borrowed already, so a fetch (a transport, connectivity
        checks, several processes) would only copy the ref."""
        if not self.local:
            return False
        oid = self._source_git.rev_parse(f"refs/tags/{tag}")
        if oid is None or self.store.commit_of(oid) != commit:
            return False
        self.store.update_ref(f"refs/tags/{tag}", oid)
        return True

    def tags_of(self, commit: str) -> list[str]:
        """The fork's tags that name ``commit`` (peeled), names of release versions
        first (the highest first), then the others by name."""
        return order_tags([t for t, c in self.source_tags().items() if c == commit])

    def tags_below(self, commit: str) -> dict[str, str]:
        """Tag -> commit for every tag of the fork that names ``commit`` or one of its
        ancestors (as far as a shallow clone's history goes): one git process."""
        if not self.local:
            self.fetch()
        git = self._source_git if self.local else self.store
        proc = git.run(
            "for-each-ref",
            f"--merged={commit}",
            "--format=%(refname:strip=2)",
            "refs/tags",
            check=False,
        )
        names = (
            set(proc.stdout.decode("utf-8", "replace").split()) if proc.returncode == 0 else set()
        )
        return {t: c for t, c in self.source_tags().items() if t in names}

    def distance(self, ancestor: str, commit: str) -> int:
        """The number of commits in ``ancestor..commit``."""
        out = self.store.run("rev-list", "--count", f"{ancestor}..{commit}", check=False)
        text = out.stdout.decode().strip()
        return int(text) if out.returncode == 0 and text.isdigit() else 0

    def verify_base(self, tag: str, recorded: str) -> str:
        """Check that ``tag`` still names the commit series.yaml recorded; a base with
        no tag (``""``: a series on a commit) is its commit, which must be here."""
        if not tag:
            self.require_commit(recorded, f"series.yaml's base (commit {recorded[:12]})")
            return recorded
        if self.local:
            current = self._local_base(tag, recorded)
        else:
            try:
                current = self.resolve_tag(tag, refresh=False)
            except ForkRepoError:
                if not self.commit_exists(recorded):
                    self.fetch()
                if not self.commit_exists(recorded):
                    raise
                self._warn_no_tag(tag, recorded)
                current = recorded
        if current != recorded:
            raise ForkRepoError(
                f"tag '{tag}' in the fork ({self.source}) now points to {current}, but "
                f"series.yaml records {recorded}: the tag was moved; nothing was changed",
                tip=f"if the move is intended, run `forkpatch rebase --onto {tag}` to rebase onto "
                f"its new commit; otherwise fix the tag in the fork",
            )
        if not self.local and self.store.commit_of(recorded) is None:
            self.fetch()
        return current

    # ----------------------------------------------------------------- shallow clones

    def shallow_commits(self) -> set[str]:
        """The shallow boundary commits of the store and of every repository it borrows
        objects from (a local fork that is a shallow clone): history stops below them."""
        dirs = [self.store.git_dir]
        alternates = self.store.git_dir / "objects" / "info" / "alternates"
        if alternates.is_file():
            for line in alternates.read_text(
                encoding="utf-8", errors="surrogateescape"
            ).splitlines():
                if line.strip() and not line.startswith("#"):
                    dirs.append(Path(line.strip()).parent)
        found: set[str] = set()
        for d in dirs:
            try:
                found.update(
                    x
                    for x in (d / "shallow").read_text(encoding="utf-8", errors="replace").split()
                    if len(x) == 40
                )
            except OSError:
                continue
        return found

    def require_history(self, newest: str, oldest: str, *, why: str) -> None:
        """Refuse, saying how deep the clone must be, when the fork's history from
        ``oldest`` up to ``newest`` (commit ids or tags) is cut by a shallow clone.

        The one place that words this error: every command that walks the fork's
        history past what a shallow clone holds calls it first. Free when no clone
        involved is shallow.
        """
        shallow = self.shallow_commits()
        if not shallow:
            return
        proc = self.store.run("rev-list", f"{oldest}..{newest}", check=False)
        listed = set(proc.stdout.decode().split())
        cut = sorted(listed & shallow) if proc.returncode == 0 else sorted(shallow)
        if proc.returncode == 0 and not cut:
            return
        date = self.store.run("show", "-s", "--format=%cI", oldest, check=False)
        since = date.stdout.decode().strip() if date.returncode == 0 else ""
        have = (
            f"it holds {len(listed)} commit(s) below {newest[:12]} before its boundary "
            f"{cut[0][:12]}"
            if proc.returncode == 0
            else f"its history stops at {', '.join(c[:12] for c in cut[:3])}"
        )
        deepen = f"--shallow-since={since}" if since else "--unshallow"
        raise ForkRepoError(
            f"the fork clone ({self.source}) is shallow and {why} needs its history from "
            f"{oldest[:12]} up to {newest[:12]}; {have}, so it must be deep enough to reach "
            f"{oldest[:12]}" + (f" (committed {since})" if since else ""),
            tip=f"deepen the clone: `git -C <clone> fetch {deepen} origin` "
            "(or `git fetch --unshallow`), then run the command again",
        )

    def commit_exists(self, oid: str) -> bool:
        try:
            return self.store.commit_of(oid) is not None
        except GitError:
            return False

    def require_commit(self, commit: str, what: str) -> None:
        """Refuse a fork repository that does not hold ``commit`` (``what`` names it)."""
        if self.commit_exists(commit):
            return
        if not self.local:
            self.fetch()
            if self.commit_exists(commit):
                return
        boundary = sorted(self.shallow_commits())
        if boundary:
            why = (
                f"it is a shallow clone whose history stops at {_short(boundary)}: deepen it "
                f"(`git -C {self.source} fetch --unshallow`, or in CI `fetch-depth: 0`)"
            )
        else:
            why = "it is a clone of another fork, or one that never had this commit"
        raise ForkRepoError(
            f"the fork repository {self.describe()} does not contain {what}, commit "
            f"{commit}: {why}",
            tip=f"use a clone of the fork that series.yaml names: --fork-repo PATH "
            f"(beats {ENV_FORK_REPO}) or unset {ENV_FORK_REPO} to use fork.url",
        )


def _short(commits: list[str]) -> str:
    shown = ", ".join(c[:12] for c in commits[:3])
    return shown + (f" and {len(commits) - 3} more" if len(commits) > 3 else "")


def order_tags(tags: list[str]) -> list[str]:
    """Tags that name release versions (``v1.3.0``, ``1.3.0``) first, the highest
    first and final releases before pre-releases; then the others by name."""
    from packaging.version import InvalidVersion, Version

    versions: list[tuple[Version, str]] = []
    others: list[str] = []
    for tag in tags:
        try:
            versions.append((Version(tag[1:] if tag[:1] in ("v", "V") else tag), tag))
        except InvalidVersion:
            others.append(tag)
    versions.sort(key=lambda vt: (not vt[0].is_prerelease, vt[0], vt[1]), reverse=True)
    return [t for _, t in versions] + sorted(others)


def nearest_tags(tag: str, tags: dict[str, str] | list[str], n: int = 5) -> list[str]:
    """Known tags closest to ``tag``: by version distance when both parse, else by name."""
    from packaging.version import InvalidVersion, Version  # only for this message

    names = list(tags)
    try:
        want = Version(tag.lstrip("vV"))
    except InvalidVersion:
        want = None
    if want is not None:
        scored = []
        for name in names:
            try:
                v = Version(name.lstrip("vV"))
            except InvalidVersion:
                continue
            a = ((*want.release, 0, 0, 0))[:3]
            b = ((*v.release, 0, 0, 0))[:3]
            scored.append((tuple(abs(x - y) for x, y in zip(a, b, strict=True)), name))
        if scored:
            return [name for _, name in sorted(scored)[:n]]
    import difflib

    return difflib.get_close_matches(tag, names, n=n, cutoff=0.0)
