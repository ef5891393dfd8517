"""The modules of forkpatch import each other without cycles.

Every import counts: at module level, inside functions (lazy imports only hide a
cycle), under ``TYPE_CHECKING``, and modules named as strings to
``importlib.import_module``. Importing ``a.b`` also runs ``a/__init__.py``, unless
the importer is itself inside ``a``.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import forkpatch

SRC = Path(forkpatch.__file__).resolve().parent


def _modules() -> dict[str, Path]:
    out = {}
    for path in SRC.rglob("*.py"):
        parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


@functools.cache  # the sources do not change during a run; no test changes the graph
def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for mod, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        dynamic = "import_module" in path.read_text(encoding="utf-8")
        wanted: list[str] = []
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                wanted += [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join([*up, base] if base else up)
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    wanted.append(full if full in modules else base)
            elif (
                dynamic
                and isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and node.value in modules
            ):
                wanted.append(node.value)
        for name in wanted:
            target = _resolve(name, modules)
            if target is None or target == mod:
                continue
            if mod.startswith(target + ".") and name != target:
                continue  # a submodule of its own package: the package is already running
            graph[mod].add(target)
            parent = target
            while "." in parent:
                parent = parent.rpartition(".")[0]
                if parent in modules and parent != mod and not mod.startswith(parent + "."):
                    graph[mod].add(parent)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycles():
    assert cycles(import_graph()) == []


def test_the_checker_sees_lazy_and_dynamic_imports():
    graph = import_graph()
    assert "forkpatch.cli.rebase" in graph["forkpatch.cli.app"]  # importlib.import_module(...)
    assert "forkpatch.stack" in graph["forkpatch.rebase.run"]  # a function-level import
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_the_core_does_not_import_the_layers_above_it():
    graph = import_graph()
    assert not any(m.startswith("forkpatch.rebase") for m in graph["forkpatch.project"])
    assert {m for m, targets in graph.items() if "forkpatch.demo" in targets} == {
        "forkpatch.cli.project"
    }
    assert "forkpatch.publish" not in graph["forkpatch.smoke.runner"]


# Inside smoke/, the floors the check processes sit on: the check suite (copied into the
# smoke venv, importing nothing of forkpatch), then session (the long-lived check
# processes: the runner below it, the suite beside it), then team and runner above it.
SMOKE_SESSION_MAY_IMPORT = {
    "forkpatch.kinds",  # the JSON value type of the check records (kinds imports nothing)
    "forkpatch.log",
    "forkpatch.proc",
    "forkpatch.smoke",
    "forkpatch.smoke.incheck",
}


def test_the_check_session_sits_below_team_and_runner():
    graph = import_graph()
    own = {m for m in graph["forkpatch.smoke.session"] if m.startswith("forkpatch")}
    assert own <= SMOKE_SESSION_MAY_IMPORT, own - SMOKE_SESSION_MAY_IMPORT
    users = {m for m, targets in graph.items() if "forkpatch.smoke.session" in targets}
    assert users == {"forkpatch.smoke.team", "forkpatch.smoke.runner"}, users


def test_only_the_editing_commands_and_the_rebase_reach_the_stack():
    """The stack (the editable work tree) is a top floor: the build, the importer and
    the engine below it use the engine's results, not the stack's helpers."""
    graph = import_graph()
    users = {m for m, targets in graph.items() if "forkpatch.stack" in targets}
    assert not any(m.startswith(("forkpatch.wheels", "forkpatch.smoke")) for m in users), users
    assert "forkpatch.importer" not in users
    assert "forkpatch.engine" not in users


def test_the_stack_is_reached_through_its_face():
    """Outside the stack package, only ``forkpatch.stack`` (Stack, StackState and the
    verbs the rebase needs) is imported, never its rooms: the rebase does not know the
    stack's branch, state keys or work-tree commands."""
    graph = import_graph()
    inside = [
        f"{m} -> {t}"
        for m, targets in graph.items()
        if not m.startswith("forkpatch.stack")
        for t in targets
        if t.startswith("forkpatch.stack.")
    ]
    assert inside == []


def test_the_tracker_keeps_its_results_and_views_below_its_actions():
    """Only `forkpatch track` reaches the track package. Inside it, the stage results,
    the work directory and the summary are read by jobs on other machines (the bot
    branch, a later stage): they import neither the stages' work (pipeline, act) nor
    the machinery it drives (rebase, wheels, smoke, publish, the stack)."""
    graph = import_graph()
    track = {m for m in graph if m == "forkpatch.track" or m.startswith("forkpatch.track.")}
    assert {m for m, targets in graph.items() if targets & track and m not in track} == {
        "forkpatch.cli.track"
    }
    machinery = ("forkpatch.rebase", "forkpatch.wheels", "forkpatch.smoke", "forkpatch.stack")
    actions = {"forkpatch.track.pipeline", "forkpatch.track.act"}
    for mod in ("stages", "workdir", "summary", "bot"):
        targets = graph[f"forkpatch.track.{mod}"]
        assert not targets & actions, (mod, targets & actions)
        reached = {t for t in targets if t.startswith(machinery) or t == "forkpatch.publish"}
        assert not reached, (mod, reached)
    assert {m for m in track if "forkpatch.track.pipeline" in graph[m]} == {
        "forkpatch.track",
        "forkpatch.track.act",
    }


# The patch-file package from the bottom up: a module imports only the rows below
# its own (and, of the rest of forkpatch, only errors and fsutil); the package's
# face imports nothing but its own modules.
PATCHFILE_LAYERS = (
    ("model", "lines", "names", "binary", "refs"),
    ("hunks", "safety", "render"),
    ("parser",),
)


def test_the_patch_file_modules_import_from_the_bottom_up():
    graph = import_graph()
    package = "forkpatch.patchfile"
    inside = {m for m in graph if m.startswith(package + ".")}
    layered = [f"{package}.{name}" for row in PATCHFILE_LAYERS for name in row]
    assert sorted(layered) == sorted(inside), "a new module of patchfile/: give it a row"
    below: set[str] = {"forkpatch.errors", "forkpatch.fsutil"}
    wrong = []
    for row in PATCHFILE_LAYERS:
        names = {f"{package}.{name}" for name in row}
        for mod in sorted(names):
            wrong += [f"{mod} -> {target}" for target in sorted(graph[mod] - below)]
        below |= names
    assert wrong == []
    assert graph[package] <= inside  # the face only re-exports


# The stack's parts from the bottom up: the model reads, the writer writes, the sync
# record holds a model, the commands hold the three, the face composes them all. A
# module imports only the rows below its own (TYPE_CHECKING and lazy imports count).
STACK_LAYERS = (
    ("worktree", "mergebase"),
    ("model",),
    ("writer",),
    ("sync",),
    ("checkout", "editing", "export", "moves", "refresh"),
    ("edits",),
    ("commands",),
)


def test_the_stack_modules_import_from_the_bottom_up():
    graph = import_graph()
    package = "forkpatch.stack"
    inside = {m for m in graph if m.startswith(package + ".")}
    layered = [f"{package}.{name}" for row in STACK_LAYERS for name in row]
    assert sorted(layered) == sorted(inside), "a new module of stack/: give it a row"
    below: set[str] = set()
    wrong = []
    for row in STACK_LAYERS:
        names = {f"{package}.{name}" for name in row}
        for mod in sorted(names):
            wrong += [f"{mod} -> {t}" for t in sorted((graph[mod] & inside) - below)]
        below |= names
    assert wrong == []
    # What `top` and `status` read loads nothing that applies or renders a patch.
    heavy = {"forkpatch.engine", "forkpatch.patchtext", "forkpatch.applier"}
    assert not graph[f"{package}.model"] & (heavy | {"forkpatch.patchfile"})
