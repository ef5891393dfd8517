"""The options several commands share, declared once (``build-wheel``, ``smoke``,
``publish``, ``droppable`` and ``track`` name the same things, some under a prefixed
flag), and the one rule for where a setting comes from: :func:`pick`.

Each function returns click's decorator for the option under the flag and the
parameter name the command gives it; the type, the choices and the words are the same
wherever it appears.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import click

from forkpatch.kinds import BUILD_MODES, SMOKE_DEPS

T = TypeVar("T")
Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]


def pick(option: T | None, configured: T | None, default: T) -> T:
    """The command line over series.yaml over the built-in default: the one order
    every command resolves a setting in."""
    if option is not None:
        return option
    if configured is not None:
        return configured
    return default


def as_json(what: str = "Machine-readable output") -> Decorator:
    return click.option("--json", "as_json", is_flag=True, help=f"{what} on stdout.")


def allow_missing_tier(tiers: Sequence[str], *, what: str) -> Decorator:
    """``what``: what goes ahead although the tier did not run."""
    return click.option(
        "--allow-missing-tier",
        "allow_missing",
        multiple=True,
        type=click.Choice(tiers),
        help=f"{what} although this tier (asked for or required) did not run; recorded "
        "in the report, never covers a failed tier. Repeatable.",
    )


def base_wheel(
    *, for_what: str, url: bool = False, exists: bool = False, envvar: str | None = None
) -> Decorator:
    """The fork's released wheel an overlay build starts from (``url``: a URL too, with
    ``{tag}`` and ``{version}`` filled in)."""
    return click.option(
        "--base-wheel",
        type=click.STRING if url else click.Path(exists=exists, dir_okay=False, path_type=Path),
        metavar="PATH|URL" if url else "PATH",
        envvar=envvar,
        show_envvar=envvar is not None,
        help=f"The fork's released wheel {for_what} (default: build.base-wheel"
        + ("; {tag} and {version} are filled in)." if url else ")."),
    )


def build_mode(flag: str, dest: str, *, default: str | None = None) -> Decorator:
    return click.option(
        flag,
        dest,
        type=click.Choice(BUILD_MODES),
        default=default,
        show_default=default is not None,
        help="overlay: patch the released wheel (Python-only series); container: build "
        "from source in the CUDA 12.8 builder image; auto: overlay when the series "
        "touches no compiled source (default: build.mode, else auto).",
    )


def smoke_deps(flag: str, dest: str, *, default: str | None = None) -> Decorator:
    return click.option(
        flag,
        dest,
        type=click.Choice(SMOKE_DEPS),
        default=default,
        show_default=default is not None,
        help="Where the smoke environment's dependencies come from: the interpreter's "
        "own packages (system: torch/CUDA of the box), the index (index), or nowhere "
        "(none; checks needing torch are not run).",
    )


def smoke_python(flag: str, dest: str) -> Decorator:
    return click.option(
        flag,
        dest,
        metavar="PYTHON",
        help="Interpreter for the smoke environment (default: smoke.python, else this "
        "one). On a V100 box: the python that has torch.",
    )


def publish_to(flag: str, dest: str, *, envvar: str | None = None) -> Decorator:
    return click.option(
        flag,
        dest,
        metavar="URL|DIR",
        envvar=envvar,
        show_envvar=envvar is not None,
        help="An upload index (http[s]://...) or a directory kept as a static PEP 503 "
        "index (default: publish.to).",
    )
