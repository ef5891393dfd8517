"""forkpatch's own environment settings: every ``FORKPATCH_*`` variable, read here alone.

Each setting is a :class:`Setting` in :data:`SETTINGS` (its kind, default, what it does
and a valid example); every module reads its value through one of the readers below
(:func:`duration`, :func:`size`, :func:`flag`, :func:`count`, :func:`text`), never
through ``os.environ``. Values are written the way people write them:

- durations: ``500ms``, ``10s``, ``5m``, ``1h`` or plain seconds (``300``, ``2.5``);
- sizes: ``16G`` / ``16GiB`` (powers of 1024), ``1.5GB`` (powers of 1000), ``512MiB``,
  ``64k``, or plain bytes;
- booleans: ``1`` / ``0``, ``true`` / ``false``, ``yes`` / ``no``, ``on`` / ``off``;
- paths and words as they are.

An empty variable is the default. A value that does not read is a
:class:`~forkpatch.errors.UsageError` (exit 2) naming the variable, what it holds and
an example of a valid value; :func:`check_environment` reads every one that is set
before a command starts, so a wrong value stops the command before it does anything.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from forkpatch.errors import UsageError
from forkpatch.kinds import SettingKind


@dataclass(frozen=True)
class Setting:
    name: str
    kind: SettingKind
    default: str  # as written in the README ("" for none)
    summary: str
    example: str
    test_hook: bool = False


def _s(name: str, kind: SettingKind, default: str, summary: str, example: str) -> Setting:
    return Setting(name, kind, default, summary, example, name.startswith("FORKPATCH_TEST_"))


#: Every ``FORKPATCH_*`` variable forkpatch reads (the README's table lists the same).
SETTINGS: dict[str, Setting] = {
    s.name: s
    for s in (
        _s(
            "FORKPATCH_FORK_REPO",
            "path",
            "",
            "a local clone of the fork standing in for a network fork.url",
            "~/src/1Cat-vLLM",
        ),
        _s(
            "FORKPATCH_FETCH_TIMEOUT",
            "duration",
            "300s",
            "how long one git fetch or ls-remote of the fork may take",
            "5m",
        ),
        _s(
            "FORKPATCH_FORGE_TIMEOUT",
            "duration",
            "10s",
            "how long one forge API request of `status --upstream` may take",
            "10s",
        ),
        _s(
            "FORKPATCH_GITHUB_API",
            "url",
            "https://api.github.com",
            "the GitHub API `status --upstream` asks (a GitHub Enterprise server)",
            "https://github.example.com/api/v3",
        ),
        _s(
            "FORKPATCH_GITLAB_API",
            "url",
            "https://<host>/api/v4",
            "the GitLab API `status --upstream` asks (default: the merge request's host)",
            "https://gitlab.example.com/api/v4",
        ),
        _s(
            "FORKPATCH_WHEEL_MAX_BYTES",
            "size",
            "16G",
            "the most a wheel's members may add up to, uncompressed",
            "32G",
        ),
        _s(
            "FORKPATCH_CACHE",
            "text",
            "ccache (sccache with SCCACHE_BUCKET)",
            "the compiler cache of a container build: ccache, sccache or none",
            "none",
        ),
        _s(
            "FORKPATCH_CCACHE_VOLUME",
            "text",
            "forkpatch-ccache",
            "the Docker volume that holds the ccache",
            "team-ccache",
        ),
        _s(
            "FORKPATCH_KEEP_CONTAINER",
            "boolean",
            "0",
            "keep a failed build's container to inspect it",
            "1",
        ),
        _s(
            "FORKPATCH_KEEP_SMOKE_ENV",
            "boolean",
            "0",
            "keep the smoke test's virtual environment (as `smoke --keep-env`)",
            "1",
        ),
        _s(
            "FORKPATCH_SMOKE_ENV_CACHE",
            "path",
            "",
            "a directory where `smoke` keeps its environments (`--deps system` or `none`) "
            "by wheel and interpreter, to reuse them verified file by file (unset: a "
            "fresh one each run)",
            "~/.cache/forkpatch/smoke-envs",
        ),
        _s(
            "FORKPATCH_SERVER",
            "boolean",
            "1",
            "run commands through the background command server (`forkpatch server`); "
            "0: each command in its own process only",
            "0",
        ),
        _s(
            "FORKPATCH_DEBUG",
            "boolean",
            "0",
            "tracebacks on errors (as `--debug`)",
            "1",
        ),
        _s(
            "FORKPATCH_OUT",
            "path",
            "",
            "`track`'s work directory (as `track --out`)",
            "track-out",
        ),
        _s(
            "FORKPATCH_PUBLISH_TO",
            "path",
            "",
            "where `track` publishes (as `track --publish-to`)",
            "/srv/wheels",
        ),
        _s(
            "FORKPATCH_BASE_WHEEL",
            "path",
            "",
            "the release wheel `track` overlays (as `track --base-wheel`)",
            "dist/1cat_vllm-1.2.1-cp312-cp312-linux_x86_64.whl",
        ),
        _s(
            "FORKPATCH_TEST_KILL_AT",
            "count",
            "0",
            "test hook: the process kills itself at the n-th file write event",
            "3",
        ),
        _s(
            "FORKPATCH_TEST_COUNT_WRITES",
            "path",
            "",
            "test hook: one line per file write event appended to this file",
            "/tmp/events",
        ),
        _s(
            "FORKPATCH_TEST_PAUSE_AFTER",
            "text",
            "",
            "test hook: the process stops itself (SIGSTOP) at this named point",
            "start",
        ),
    )
}

_DURATION = re.compile(r"(\d+(?:\.\d+)?|\.\d+)\s*(ms|s|sec|secs|m|min|mins|h|hr|hours?)?")
_SECONDS = {None: 1.0, "ms": 0.001, "s": 1.0, "sec": 1.0, "secs": 1.0, "m": 60.0}
_SECONDS |= {"min": 60.0, "mins": 60.0, "h": 3600.0, "hr": 3600.0, "hour": 3600.0}
_SECONDS["hours"] = 3600.0
_SIZE = re.compile(r"(\d+(?:\.\d+)?|\.\d+)\s*([kmgt]?)(i?)(b?)", re.IGNORECASE)
_POWER = {"": 0, "k": 1, "m": 2, "g": 3, "t": 4}
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")
_EXAMPLES: dict[SettingKind, str] = {
    "duration": "300, 500ms, 10s, 5m or 1h",
    "size": "17179869184, 512MiB, 1.5GB or 16G",
    "boolean": "1 or 0 (true/false, yes/no, on/off)",
    "count": "0, 1, 2 ...",
    "url": "an http(s) URL without credentials",
    "path": "a path",
    "text": "a word",
}


def _raw(name: str, env: Mapping[str, str] | None) -> str:
    if name not in SETTINGS:  # a new setting gets its row first (and the README's)
        raise KeyError(f"{name} is not in forkpatch.settings.SETTINGS")
    return (os.environ if env is None else env).get(name, "").strip()


def _bad(name: str, value: str, what: str) -> UsageError:
    setting = SETTINGS[name]
    return UsageError(
        f"{name}={value!r} is not {what}",
        tip=f"write it as {_EXAMPLES[setting.kind]} (for example {name}={setting.example}),"
        f" or unset it for the default ({setting.default or 'none'})",
    )


def parse_duration(text: str) -> float | None:
    """Seconds in ``text`` ("500ms", "10s", "5m", "1h", "300"); None if it does not read."""
    m = _DURATION.fullmatch(text.strip().lower())
    if m is None:
        return None
    seconds = float(m.group(1)) * _SECONDS[m.group(2)]
    return seconds if math.isfinite(seconds) else None


def parse_size(text: str) -> int | None:
    """Bytes in ``text`` ("16G", "512MiB", "1.5GB", "4096"); None if it does not read.
    A letter alone or with ``iB`` counts in 1024s, with ``B`` alone in 1000s."""
    m = _SIZE.fullmatch(text.strip())
    if m is None:
        return None
    number, letter, binary, byte = m.groups()
    if binary and not (letter and byte):
        return None  # "16i", "iB"
    base = 1000 if (byte and not binary and letter) else 1024
    value = float(number) * base ** _POWER[letter.lower()]
    return int(value) if math.isfinite(value) else None


def duration(name: str, default: float, env: Mapping[str, str] | None = None) -> float:
    """The setting ``name`` in seconds (more than zero), ``default`` when unset."""
    value = _raw(name, env)
    if not value:
        return default
    seconds = parse_duration(value)
    if seconds is None or seconds <= 0:
        raise _bad(name, value, "a duration of more than zero")
    return seconds


def size(name: str, default: int, env: Mapping[str, str] | None = None) -> int:
    """The setting ``name`` in bytes (more than zero), ``default`` when unset."""
    value = _raw(name, env)
    if not value:
        return default
    got = parse_size(value)
    if got is None or got <= 0:
        raise _bad(name, value, "a size of more than zero bytes")
    return got


def count(name: str, default: int = 0, env: Mapping[str, str] | None = None) -> int:
    """The setting ``name`` as a whole number of zero or more."""
    value = _raw(name, env)
    if not value:
        return default
    if not value.isdigit():
        raise _bad(name, value, "a whole number")
    return int(value)


def flag(name: str, env: Mapping[str, str] | None = None) -> bool:
    """The boolean setting ``name`` (False when unset)."""
    value = _raw(name, env)
    if not value or value.lower() in _FALSE:
        return False
    if value.lower() in _TRUE:
        return True
    raise _bad(name, value, "a boolean")


def flag_or_false(name: str) -> bool:
    """As :func:`flag`, False for a value that does not read (:func:`check_environment`
    reports it once the command's error handling runs)."""
    try:
        return flag(name)
    except UsageError:
        return False


def text(name: str, env: Mapping[str, str] | None = None) -> str | None:
    """The setting ``name`` as written (a path or a word), None when unset or empty."""
    return _raw(name, env) or None


def url(name: str, env: Mapping[str, str] | None = None) -> str | None:
    """The setting ``name`` as an http(s) URL with a host and no user name, password or
    token in it (a token is the forge's own variable's), None when unset."""
    value = _raw(name, env)
    if not value:
        return None
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 (a port that is no number raises here)
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise _bad(name, value, "an http(s) URL")
    if "@" in parts.netloc or parts.query:
        raise UsageError(
            f"{name} holds a URL with credentials or a query; forkpatch never sends one",
            tip=f"set it to the API's plain URL (for example {name}="
            f"{SETTINGS[name].example}); the token goes in the forge's own variable",
        )
    return value


_READERS: dict[SettingKind, Callable[[str, Mapping[str, str] | None], object]] = {
    "duration": lambda name, env: duration(name, 1.0, env),
    "size": lambda name, env: size(name, 1, env),
    "count": lambda name, env: count(name, 0, env),
    "boolean": flag,
    "url": url,
    "path": text,
    "text": text,
}


def check_environment(env: Mapping[str, str] | None = None) -> None:
    """Read every setting that is set: the first that does not read is a UsageError."""
    for name, setting in SETTINGS.items():
        _READERS[setting.kind](name, env)
