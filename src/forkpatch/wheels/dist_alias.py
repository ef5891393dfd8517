"""Build step ``vllm-dist-info`` (fork patch 5): ``importlib.metadata`` finds ``vllm``.

The problem. The fork installs as distribution ``1cat-vllm`` but its CLI and
third-party plugins call ``importlib.metadata.version("vllm")`` and get
``PackageNotFoundError``. Operators wrote a fake ``vllm-<ver>.dist-info`` into
site-packages by hand, which (1) shows a phantom ``vllm`` in ``pip list``,
(2) cannot be uninstalled (no RECORD), (3) makes pip treat every ``vllm``
requirement as satisfied, so a plugin pinned to upstream ``vllm==0.x`` installs
silently against the fork, and (4) carries a hand-typed version that drifts
from the real one (hiding suffixes such as ``+cpu`` that platform detection
reads).

The design. The wheel carries two more files, both listed in its RECORD:

* ``_1cat_vllm_dist_alias.py``, a small module that appends one finder to
  ``sys.meta_path``. Its ``find_distributions(context)`` answers only a
  *by-name* query for ``vllm`` (any spelling PEP 503 normalises to it), and
  answers it with the real installed ``1cat-vllm`` distribution found on the
  same search path. Version, metadata, files and entry points are therefore
  read live from 1cat-vllm's own dist-info: nothing to keep in sync, the exact
  version string including every local suffix.
* ``1cat_vllm_dist_alias.pth``, one line that imports that module inside a
  ``try`` so a damaged install can never break interpreter start.

Why this and not the alternatives:

* *Fake dist-info* (the operators' hack, or one generated at build time): a
  wheel may hold only one ``.dist-info`` (pip and installer reject two), and a
  second dist-info is exactly what makes pip see a phantom ``vllm``.
* *Companion ``vllm`` metapackage* (a real wheel depending on ``1cat-vllm``):
  uninstallable, but pip lists it and considers ``vllm`` requirements met:
  side effects (1) and (3) come back, on purpose.
* *Renaming the distribution to ``vllm``*: clashes with upstream vLLM on
  PyPI; ``pip install -U`` or any resolver run would happily "upgrade" the fork
  to upstream (which has no SM70 kernels).
* *Fixing the callers* (patch 6 does it for the CLI): cannot reach
  third-party plugins.
* *sitecustomize.py*: one per environment, owned by someone else.

Properties this gives (each checked by tests/wheels/test_build_dist_alias.py in a
real venv): ``version("vllm") == version("1cat-vllm")``; pip does not see a
``vllm`` (pip's importlib backend enumerates with ``distributions(path=...)``,
a query without a name, which the finder ignores), so ``pip list`` has no
``vllm``, ``pip check`` stays clean and a requirement on ``vllm`` is *not*
satisfied; ``importlib.metadata.distributions()`` and ``entry_points()`` do
not list 1cat-vllm twice; ``pip uninstall 1cat-vllm`` removes both files,
after which ``version("vllm")`` raises again. A real ``vllm`` distribution,
if one is installed, still wins (the finder is appended after the path
finder). The finder imports nothing at interpreter start; ``importlib`` and
``re`` are imported on the first ``vllm`` metadata query.

Limits: ``python -S`` (no site) has no alias; a ``.pth`` ``import`` line is
the mechanism setuptools' own editable installs use, so it works on every
CPython from 3.8 to 3.14.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING

from forkpatch.errors import BuildError

if TYPE_CHECKING:
    from forkpatch.wheels.overlay import WheelMembers

__all__ = [
    "STEP_NAME",
    "add_vllm_dist_alias",
    "alias_module_name",
    "alias_pth_name",
    "make_dist_alias_step",
]

STEP_NAME = "vllm-dist-info"

_MODULE_TEMPLATE = '''\
"""Let importlib.metadata find {alias!r} as the installed {target!r} distribution.

Written by forkpatch (build step {step!r}) into the {target} wheel and loaded
by {pth}. Only a by-name query for {alias!r} is answered, with the real
{target} dist-info (exact version, read live); pip and
importlib.metadata.distributions() do not see an extra distribution.
Uninstalling {target} removes this file and the .pth.
"""

import sys

ALIAS = {alias!r}
TARGET = {target!r}


class DistAliasFinder:
    """sys.meta_path entry: imports nothing, finds one distribution name."""

    forkpatch_dist_alias = ALIAS

    @classmethod
    def find_spec(cls, fullname, path=None, target=None):
        return None

    @classmethod
    def invalidate_caches(cls):
        return None

    @classmethod
    def find_distributions(cls, context=None):
        name = getattr(context, "name", None)
        if not isinstance(name, str) or not name:
            return iter(())  # enumeration (pip, distributions()): stay invisible
        try:
            import re

            if re.sub(r"[-_.]+", "-", name).lower() != ALIAS:
                return iter(())
            # Answer with the metadata implementation that asked (stdlib
            # importlib.metadata or the importlib_metadata backport).
            md = sys.modules.get(type(context).__module__)
            if md is None or not hasattr(md, "MetadataPathFinder"):
                import importlib.metadata as md
            query = md.DistributionFinder.Context(name=TARGET, path=list(context.path))
            # The path finder directly, not sys.meta_path: no recursion into us.
            return iter(list(md.MetadataPathFinder.find_distributions(query))[:1])
        except Exception:
            return iter(())


def _install():
    for finder in sys.meta_path:
        if getattr(finder, "forkpatch_dist_alias", None) == ALIAS:
            return
    sys.meta_path.append(DistAliasFinder)


_install()
'''


def _module_stem(target: str) -> str:
    return "_" + re.sub(r"[-_.]+", "_", target).lower() + "_dist_alias"


def alias_module_name(target: str) -> str:
    """``1cat-vllm`` -> ``_1cat_vllm_dist_alias.py`` (top level of site-packages)."""
    return _module_stem(target) + ".py"


def alias_pth_name(target: str) -> str:
    """``1cat-vllm`` -> ``1cat_vllm_dist_alias.pth``."""
    return _module_stem(target)[1:] + ".pth"


def add_vllm_dist_alias(members: WheelMembers, *, alias: str = "vllm") -> None:
    """Add the alias module and its ``.pth`` to a wheel being assembled.

    Idempotent (rebuilding from a wheel that already has them replaces them).
    Refuses a wheel that is itself named ``alias`` or that carries a
    ``<alias>-*.dist-info`` (the hand-written hack baked into a wheel).
    """
    target = members.dist_name
    alias_norm = re.sub(r"[-_.]+", "-", alias).lower()
    if re.sub(r"[-_.]+", "-", target).lower() == alias_norm:
        raise BuildError(
            f"the wheel is already named {alias!r}; the {STEP_NAME} step is only for renamed forks",
            tip=f"drop {STEP_NAME} from the series' build steps",
        )
    alias_us = re.sub(r"[-_.]+", "_", alias).lower()
    for name in members.names():
        top = name.split("/", 1)[0]
        if top.endswith(".dist-info") and top.lower().startswith(alias_us + "-"):
            raise BuildError(
                f"the wheel contains {top}, a second (fake) dist-info for {alias!r}",
                tip="remove it from the build; the dist alias step provides the metadata",
            )
    stem = _module_stem(target)
    module = _MODULE_TEMPLATE.format(
        alias=alias_norm, target=target, step=STEP_NAME, pth=alias_pth_name(target)
    )
    # One line, executed by site.py; the try keeps a damaged install from
    # printing tracebacks at every interpreter start.
    pth = f'import sys; exec("try: import {stem}\\nexcept Exception: pass")\n'
    members.put(alias_module_name(target), module.encode("utf-8"))
    members.put(alias_pth_name(target), pth.encode("utf-8"))


def make_dist_alias_step(alias: str = "vllm") -> Callable[[WheelMembers], None]:
    """A build step (for ``overlay_wheel(extra_steps=...)``) adding an alias other than vllm."""

    def step(members: WheelMembers) -> None:
        add_vllm_dist_alias(members, alias=alias)

    step.__name__ = STEP_NAME
    return step
