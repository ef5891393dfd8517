"""What a Python-only build of the fork lacks and the checks' design assumes: its compiled
extension ``vllm._C``. The SM70 checks stand in for the compiled ops (the CPU stand-ins,
the PTX library), but vLLM's CUDA platform imports ``vllm._C`` unconditionally, so on a
CUDA machine (or with a CUDA platform selected) a wheel without it failed every check
that imports vLLM's platform, while on a CPU machine (CI) it passed.

:func:`install` adds, at the *end* of ``sys.meta_path``, a finder that answers
``vllm._C`` with an empty module marked as a stand-in, only when the installed wheel has
no such extension (a real one is always found first). :data:`SITECUSTOMIZE` is the same
for a process of its own (``vllm --version``), as a ``sitecustomize`` module.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from typing import Any

# The wheel's compiled extensions the checks' design stands in for.
EXTENSIONS = ("vllm._C",)
MARK = "__forkpatch_stand_in__"

SITECUSTOMIZE = '''"""forkpatch smoke: an empty stand-in for the fork's compiled extension(s) {names}
(absent from this Python-only wheel), found after every real finder."""
import importlib.abc, importlib.machinery, os, sys, types

_NAMES = {names!r}


class _Loader(importlib.abc.Loader):
    def create_module(self, spec):
        module = types.ModuleType(spec.name, "forkpatch smoke: empty stand-in, no compiled ops")
        setattr(module, {mark!r}, True)
        return module

    def exec_module(self, module):
        pass


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name in _NAMES:
            return importlib.machinery.ModuleSpec(name, _Loader())
        return None


sys.meta_path.append(_Finder())
# The sitecustomize this one shadows, if any, still runs.
_here = os.path.dirname(os.path.abspath(__file__))
_saved = list(sys.path)
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _here]
del sys.modules["sitecustomize"]
try:
    import sitecustomize  # noqa: F401
except ImportError:
    pass
finally:
    sys.path[:] = _saved
'''


def missing_extensions() -> list[str]:
    """Of :data:`EXTENSIONS`, those the installed ``vllm`` has no file for (nothing is
    imported: the package's directories are read)."""
    try:
        spec = importlib.util.find_spec("vllm")
    except (ImportError, ValueError):
        return []
    if spec is None or not spec.submodule_search_locations:
        return []
    dirs = list(spec.submodule_search_locations)
    out = []
    for name in EXTENSIONS:
        leaf = name.rpartition(".")[2]
        found = any(
            entry == leaf or entry.startswith(leaf + ".")
            for d in dirs
            if os.path.isdir(d)
            for entry in os.listdir(d)
        )
        if not found:
            out.append(name)
    return out


class _Loader:
    def create_module(self, spec: Any) -> Any:
        import types

        module = types.ModuleType(spec.name, "forkpatch smoke: empty stand-in, no compiled ops")
        setattr(module, MARK, True)
        return module

    def exec_module(self, module: Any) -> None:
        pass


class _Finder:
    def __init__(self, names: list[str]) -> None:
        self.names = set(names)

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name in self.names:
            import importlib.machinery

            return importlib.machinery.ModuleSpec(name, _Loader())  # type: ignore[arg-type]
        return None


_INSTALLED: list[str] = []


def install() -> list[str]:
    """Stand in for the wheel's missing compiled extensions in this process (once); the
    names stood in for."""
    if not _INSTALLED:
        names = missing_extensions()
        if names:
            sys.meta_path.append(_Finder(names))
            _INSTALLED.extend(names)
    return list(_INSTALLED)


def note(names: list[str]) -> str:
    return (
        f"{', '.join(names)}: not in this Python-only wheel; an empty stand-in module was "
        "provided, as the checks' design assumes (the SM70 ops come from the CPU stand-ins "
        "or the PTX library, never from it)"
    )


def write_sitecustomize(directory: str, names: list[str]) -> None:
    """:data:`SITECUSTOMIZE` for ``names`` as ``directory``/sitecustomize.py."""
    text = SITECUSTOMIZE.format(names=tuple(names), mark=MARK)
    with open(os.path.join(directory, "sitecustomize.py"), "w", encoding="utf-8") as fh:
        fh.write(text)
