"""The user's git configuration, attributes and hooks never reach forkpatch's own git.

forkpatch's plumbing runs with a configuration it controls (no system, global or XDG
file; hooks, attributes files, line-ending conversion and every output format pinned:
``forkpatch.git.PINNED_CONFIG``). The README's workflow (init, import, status, apply,
edit + refresh, new + refresh, export, check --onto, rebase --onto) under a hostile
global config, a hostile system config, an attributes file and a hooks directory
gives byte for byte the patches, series.yaml and verdicts of a clean machine; so does
each family of settings on its own. No hook ever runs.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from forkpatch.git import PINNED_CONFIG, git_env
from support.cli import fp_in
from support.projects import copy_example, snapshot
from support.reliability import Row

FP8 = "vllm/model_executor/layers/quantization/online/fp8.py"
NEW_FILE = "vllm/naïve/größe.py"  # non-ASCII names: core.quotePath
HOOKS = (
    "post-checkout",
    "reference-transaction",
    "post-index-change",
    "pre-commit",
    "post-commit",
    "pre-auto-gc",
)

# One family of the user's settings per case: (global config, attributes file lines,
# hooks that fail and log). {home} is the hostile HOME.
FAMILIES: dict[str, tuple[str, str, bool]] = {
    "diff.context=1, interHunkContext": (
        "[diff]\n\tcontext = 1\n\tinterHunkContext = 9\n",
        "",
        False,
    ),
    "diff.suppressBlankEmpty": ("[diff]\n\tsuppressBlankEmpty = true\n", "", False),
    "diff.noprefix": ("[diff]\n\tnoprefix = true\n", "", False),
    "diff.mnemonicPrefix": ("[diff]\n\tmnemonicPrefix = true\n", "", False),
    "diff.renames=copies, status.renames": (
        "[diff]\n\trenames = copies\n[status]\n\trenames = copies\n",
        "",
        False,
    ),
    "diff.algorithm=patience": ("[diff]\n\talgorithm = patience\n", "", False),
    "color.ui=always": ("[color]\n\tui = always\n\tdiff = always\n", "", False),
    "core.quotePath=false": ("[core]\n\tquotePath = false\n", "", False),
    "i18n.logOutputEncoding=ISO-8859-1": (
        "[i18n]\n\tlogOutputEncoding = ISO-8859-1\n\tcommitEncoding = ISO-8859-1\n",
        "",
        False,
    ),
    "log.showSignature, format.pretty": (
        (
            "[log]\n\tshowSignature = true\n\tdecorate = full\n[format]\n\tpretty = %h %an\n"
            "[gpg]\n\tprogram = /bin/false\n"
        ),
        "",
        False,
    ),
    "core.autocrlf=true, core.safecrlf, core.eol=crlf": (
        "[core]\n\tautocrlf = true\n\tsafecrlf = true\n\teol = crlf\n",
        "",
        False,
    ),
    "core.bigFileThreshold=10": ("[core]\n\tbigFileThreshold = 10\n", "", False),
    "attributes: * -diff": ("", "* -diff\n", False),
    "attributes: a required filter (lfs-like)": (
        '[filter "hostile"]\n\tclean = rev\n\tsmudge = rev\n\trequired = true\n',
        "*.py filter=hostile\n",
        False,
    ),
    "core.excludesFile ignoring the patch's files": ("", "", False),  # see _write_home
    "hooks: core.hooksPath, every hook fails": ("", "", True),
    "commit.gpgSign, tag.gpgSign": (
        "[commit]\n\tgpgSign = true\n[tag]\n\tgpgSign = true\n[gpg]\n\tprogram = /bin/false\n",
        "",
        False,
    ),
}

# Held already by options on the command line (--no-textconv, checkout and add
# converting back and forth): only in the all-at-once case.
ALSO_AT_ONCE: dict[str, tuple[str, str, bool]] = {
    "attributes: a diff driver with textconv": (
        '[diff "hostile"]\n\ttextconv = rev\n',
        "*.patch diff=hostile\n",
        False,
    ),
    "attributes: text eol=crlf": ("", "*.txt text eol=crlf\n", False),
}

ALL_AT_ONCE = "every family at once, in the system and the global file"


def _write_home(home: Path, family: str) -> dict[str, str]:
    """A hostile HOME for ``family``; returns the environment that points git at it."""
    home.mkdir(parents=True, exist_ok=True)
    families = {**FAMILIES, **ALSO_AT_ONCE}
    names = list(families) if family == ALL_AT_ONCE else [family]
    config, attributes, hooks = "", "", False
    for name in names:
        c, a, h = families[name]
        config, attributes, hooks = config + c, attributes + a, hooks or h
    hooks_dir = home / "hooks"
    if hooks:
        hooks_dir.mkdir()
        for hook in HOOKS:
            script = hooks_dir / hook
            script.write_text(f'#!/bin/sh\necho "$0" >> "{home}/hooks.log"\nexit 1\n')
            script.chmod(0o755)
        config += f"[core]\n\thooksPath = {hooks_dir}\n"
    if attributes:
        (home / "attributes").write_text(attributes)
        config += f"[core]\n\tattributesFile = {home / 'attributes'}\n"
    if family in ("core.excludesFile ignoring the patch's files", ALL_AT_ONCE):
        (home / "ignore").write_text("*.py\nvllm/\n")
        config += f"[core]\n\texcludesFile = {home / 'ignore'}\n"
    (home / ".gitconfig").write_text(config)
    # git reads these when no core.attributesFile / excludesFile is set.
    (home / ".config" / "git").mkdir(parents=True)
    (home / ".config" / "git" / "attributes").write_text(attributes or "* -diff\n")
    (home / ".config" / "git" / "config").write_text(config)
    env = {"HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config")}
    env["GIT_CONFIG_GLOBAL"] = str(home / ".gitconfig")
    if family == ALL_AT_ONCE:
        env["GIT_CONFIG_SYSTEM"] = str(home / ".gitconfig")
    return env


def _clean_env(home: Path) -> dict[str, str]:
    home.mkdir(parents=True, exist_ok=True)
    return {
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_CONFIG_SYSTEM": os.devnull,
    }


def _fp(project: Path, *args: str) -> str:
    code, out, err = fp_in(project, *args)
    assert code == 0, f"forkpatch {' '.join(args)} -> {code}\n{out}\n{err}"
    return out


def _status(project: Path) -> bytes:
    status = json.loads(_fp(project, "status", "--json"))
    status.pop("worktree")  # the project's own path
    return json.dumps(status, sort_keys=True).encode()


def workflow(fork: Path, incoming: list[Path], project: Path, *, rebase: bool) -> dict[str, bytes]:
    """The README's daily workflow (and the rebase): patches/, series.yaml and the
    verdicts (status and check --onto as JSON) it ends with."""
    project.mkdir()
    results: dict[str, bytes] = {}
    _fp(project, "init", "--fork-url", str(fork), "--base", "v1.2.1")
    _fp(project, "import", *map(str, incoming))
    results["status"] = _status(project)
    _fp(project, "apply")
    wt = project / ".forkpatch" / "worktree"
    _fp(project, "edit", "odd-width-padding")
    with (wt / FP8).open("a", encoding="utf-8") as fh:
        fh.write("\n\n# pad to the width   \n\n\n")
    _fp(project, "refresh")
    _fp(project, "new", "naive-sizes", "-m", "Größe für naïve widths")
    (wt / NEW_FILE).parent.mkdir(parents=True)
    (wt / NEW_FILE).write_bytes("SIZE = 'größe'\n\n\nWIDTH = 3\n".encode())
    _fp(project, "refresh")
    _fp(project, "export")
    check = json.loads(_fp(project, "check", "--onto", "v1.3.0", "--json"))
    results["check"] = json.dumps(check["patches"], sort_keys=True).encode()
    if rebase:
        _fp(project, "rebase", "--onto", "v1.3.0")
        results["status after rebase"] = _status(project)
    results.update(snapshot(project))
    return results


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, list[Path]]]:
    """The example fork and its format-patch files (one copy for the module)."""
    root = tmp_path_factory.mktemp("example")
    ex = copy_example(root, None, with_project=False)
    yield ex.fork.path, ex.incoming
    shutil.rmtree(root, ignore_errors=True)


def _run_in(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch, fork: Path, incoming, project, rebase
) -> dict[str, bytes]:
    with monkeypatch.context() as m:
        for key in ("GIT_CONFIG_SYSTEM", "GIT_CONFIG_NOSYSTEM", "GIT_CONFIG_COUNT"):
            m.delenv(key, raising=False)
        for key, value in env.items():
            m.setenv(key, value)
        return workflow(fork, incoming, project, rebase=rebase)


@pytest.fixture(scope="module")
def clean(example, tmp_path_factory) -> dict[bool, dict[str, bytes]]:
    """The workflow's results on a clean machine, without and with the rebase."""
    fork, incoming = example
    root = tmp_path_factory.mktemp("clean")
    out = {}
    with pytest.MonkeyPatch.context() as mp:
        for rebase in (False, True):
            out[rebase] = _run_in(
                _clean_env(root / "home"), mp, fork, incoming, root / f"p{rebase}", rebase
            )
    return out


def _same(got: dict[str, bytes], want: dict[str, bytes], home: Path) -> None:
    assert not (home / "hooks.log").exists(), (home / "hooks.log").read_text()
    assert got.keys() == want.keys()
    for key in want:
        assert got[key] == want[key], f"{key} differs:\n{got[key]!r}\n{want[key]!r}"


def test_the_readme_workflow_under_a_hostile_machine_gives_the_same_bytes(
    example, clean, tmp_path, monkeypatch
):
    fork, incoming = example
    env = _write_home(tmp_path / "home", ALL_AT_ONCE)
    got = _run_in(env, monkeypatch, fork, incoming, tmp_path / "project", True)
    _same(got, clean[True], tmp_path / "home")
    # The new patch holds its file under the name and with the bytes it was given.
    text = got["patches/naive-sizes.patch"]
    assert b'"b/vllm/na\\303\\257ve/gr\\303\\266\\303\\237e.py"' in text
    assert "+SIZE = 'größe'\n+\n+\n".encode() in text


@pytest.mark.parametrize("family", list(FAMILIES))
def test_each_family_of_user_settings_changes_nothing(
    family, example, clean, tmp_path, monkeypatch
):
    fork, incoming = example
    env = _write_home(tmp_path / "home", family)
    got = _run_in(env, monkeypatch, fork, incoming, tmp_path / "project", False)
    _same(got, clean[False], tmp_path / "home")


ENVIRONMENT = {
    "GIT_DIFF_OPTS=-u1": {"GIT_DIFF_OPTS": "-u1"},
    "a calling alias's git -c (GIT_CONFIG_PARAMETERS)": {
        "GIT_CONFIG_PARAMETERS": "'diff.context'='0' 'core.quotepath'='false'"
    },
    "GIT_CONFIG_COUNT settings": {
        "GIT_CONFIG_COUNT": "2",
        "GIT_CONFIG_KEY_0": "diff.noprefix",
        "GIT_CONFIG_VALUE_0": "true",
        "GIT_CONFIG_KEY_1": "diff.context",
        "GIT_CONFIG_VALUE_1": "0",
    },
    "GIT_ICASE_PATHSPECS / GIT_GLOB_PATHSPECS": {
        "GIT_ICASE_PATHSPECS": "1",
        "GIT_GLOB_PATHSPECS": "1",
    },
}


@pytest.mark.parametrize("name", list(ENVIRONMENT))
def test_the_users_git_variables_change_nothing(name, example, clean, tmp_path, monkeypatch):
    fork, incoming = example
    env = {**_clean_env(tmp_path / "home"), **ENVIRONMENT[name]}
    got = _run_in(env, monkeypatch, fork, incoming, tmp_path / "project", False)
    _same(got, clean[False], tmp_path / "home")


INSTEADOF = ("in the global file", "in GIT_CONFIG_COUNT variables (CI)")


@pytest.mark.parametrize("where", INSTEADOF)
def test_a_fetch_keeps_the_users_insteadof_rules(where, example, tmp_path, monkeypatch):
    """What a fetch needs from the user stays: their files and GIT_CONFIG_COUNT rules
    (credentials, mirrors), ssh and proxy variables; the pinned keys still win."""
    fork, _ = example
    url = "https://fork.invalid/1Cat-vLLM.git"
    rule = (f"url.{fork}/.git.insteadOf", url)
    if where == INSTEADOF[0]:
        (tmp_path / "gitconfig").write_text(f'[url "{fork}/.git"]\n\tinsteadOf = {url}\n')
        monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(tmp_path / "gitconfig"))
    else:
        monkeypatch.setenv("GIT_CONFIG_COUNT", "1")
        monkeypatch.setenv("GIT_CONFIG_KEY_0", rule[0])
        monkeypatch.setenv("GIT_CONFIG_VALUE_0", rule[1])
    monkeypatch.setenv("GIT_SSH_COMMAND", "ssh -o BatchMode=yes")
    project = tmp_path / "project"
    project.mkdir()
    _fp(project, "init", "--fork-url", url, "--base", "v1.2.1")
    assert f"url: {url}" in (project / "series.yaml").read_text()
    net, private = git_env(user_config=True), git_env()
    assert net["GIT_SSH_COMMAND"] == "ssh -o BatchMode=yes"
    assert "GIT_SSH_COMMAND" not in private and private["GIT_CONFIG_GLOBAL"] == os.devnull
    last = int(net["GIT_CONFIG_COUNT"]) - 1
    assert (net[f"GIT_CONFIG_KEY_{last}"], net[f"GIT_CONFIG_VALUE_{last}"]) == PINNED_CONFIG[-1]


RELIABILITY = [
    Row(
        "the user's environment",
        "the user's git config (diff.*, color, quotePath, log encoding, autocrlf/eol, "
        "signing), attributes files (-diff, textconv drivers, eol, required filters), "
        "excludes, hooks, GIT_* variables",
        f"{len(FAMILIES)} setting families + {len(ENVIRONMENT)} variables x the daily "
        "workflow; all at once (global + system) x the workflow and a rebase",
        "patches/, series.yaml, status and check --onto verdicts byte-identical to a clean "
        "machine; no hook runs",
    ),
    Row(
        "the user's environment",
        "what a fetch needs from the user: insteadOf rules (credentials, mirrors)",
        f"{len(INSTEADOF)} places (global file, GIT_CONFIG_COUNT)",
        "kept for fetch and ls-remote, under the same pinned keys",
    ),
]
