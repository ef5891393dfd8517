"""forkpatch's own settings (``FORKPATCH_*``) read the way people write them, and a value
that does not read stops every command with exit 2 naming the variable, what it holds
and a valid example: never a traceback from the middle of an import."""

from __future__ import annotations

import pytest

from forkpatch import settings
from forkpatch.errors import UsageError
from support.cli import fp
from support.projects import project_with_patches
from support.reliability import Row

DURATIONS = {
    "500ms": 0.5,
    "10s": 10.0,
    "5m": 300.0,
    "1h": 3600.0,
    "300": 300.0,
    "2.5": 2.5,
    " 90 s ": 90.0,
    "2min": 120.0,
    "1.5h": 5400.0,
}
SIZES = {
    "16G": 16 << 30,
    "16GiB": 16 << 30,
    "512MiB": 512 << 20,
    "1.5GB": 1_500_000_000,
    "4096": 4096,
    "64k": 64 << 10,
    "2T": 2 << 40,
    "100MB": 100_000_000,
}
FLAGS = {"1": True, "true": True, "Yes": True, "on": True, "0": False, "false": False, "NO": False}
BAD = {
    "duration": ["5 fortnights", "10 s s", "-1", "0", "nan", "inf", "1e400", "5x", "1:30"],
    "size": ["16X", "lots", "-5G", "0", "16i", "iB", "nan", "1e3"],
    "boolean": ["2", "yes please", "maybe"],
    "count": ["-1", "three", "1.5"],
    "url": ["api.github.com", "ftp://api.example.com", "https://", "https://h:port/api"],
}
URL_SECRETS = ["https://ghp_secret123@api.github.com", "https://u:pw12345678@h/api?x=1"]


@pytest.mark.parametrize(("text", "seconds"), sorted(DURATIONS.items()))
def test_durations(text, seconds):
    assert settings.duration("FORKPATCH_FETCH_TIMEOUT", 1.0, {"FORKPATCH_FETCH_TIMEOUT": text}) == (
        pytest.approx(seconds)
    )


@pytest.mark.parametrize(("text", "size"), sorted(SIZES.items()))
def test_sizes(text, size):
    env = {"FORKPATCH_WHEEL_MAX_BYTES": text}
    assert settings.size("FORKPATCH_WHEEL_MAX_BYTES", 1, env) == size


@pytest.mark.parametrize(("text", "value"), sorted(FLAGS.items()))
def test_booleans(text, value):
    assert settings.flag("FORKPATCH_KEEP_CONTAINER", {"FORKPATCH_KEEP_CONTAINER": text}) is value


NAMES = {
    "duration": "FORKPATCH_FORGE_TIMEOUT",
    "size": "FORKPATCH_WHEEL_MAX_BYTES",
    "boolean": "FORKPATCH_KEEP_SMOKE_ENV",
    "count": "FORKPATCH_TEST_KILL_AT",
    "url": "FORKPATCH_GITHUB_API",
}
BAD_CASES = [(kind, value) for kind, values in BAD.items() for value in values]


@pytest.mark.parametrize(("kind", "value"), BAD_CASES)
def test_a_value_that_does_not_read_names_the_variable_and_an_example(kind, value):
    name = NAMES[kind]
    with pytest.raises(UsageError) as err:
        settings.check_environment({name: value})
    assert err.value.exit_code == 2
    text = str(err.value)
    assert name in text and repr(value) in text
    assert f"{name}={settings.SETTINGS[name].example}" in text  # a value that would do


@pytest.mark.parametrize("value", URL_SECRETS)
def test_an_api_url_with_credentials_is_refused_without_showing_them(value):
    with pytest.raises(UsageError) as err:
        settings.check_environment({"FORKPATCH_GITLAB_API": value})
    assert "FORKPATCH_GITLAB_API" in str(err.value) and "credentials" in str(err.value)
    assert "secret123" not in str(err.value) and "pw12345678" not in str(err.value)


def test_an_empty_value_is_the_default():
    assert (
        settings.duration("FORKPATCH_FETCH_TIMEOUT", 300.0, {"FORKPATCH_FETCH_TIMEOUT": ""}) == 300
    )
    assert settings.size("FORKPATCH_WHEEL_MAX_BYTES", 7, {}) == 7
    assert settings.flag("FORKPATCH_DEBUG", {"FORKPATCH_DEBUG": " "}) is False


# every setting that has a unit or a form, set wrong, through a real command
COMMAND_CASES = [
    (name, BAD[s.kind][0])
    for name, s in settings.SETTINGS.items()
    if s.kind in BAD and not s.test_hook
]
GOOD_COMMAND = {
    "FORKPATCH_FETCH_TIMEOUT": "5m",
    "FORKPATCH_FORGE_TIMEOUT": "10s",
    "FORKPATCH_WHEEL_MAX_BYTES": "16G",
    "FORKPATCH_KEEP_CONTAINER": "yes",
}


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    root = tmp_path_factory.mktemp("settings")
    return project_with_patches(root, {"vllm/x.py": "a\n"}, [])[0]


def test_values_with_units_run_every_command(project):
    got = fp(project, "status", extra_env=GOOD_COMMAND, timeout=60)
    assert got.returncode == 0, got.stderr


@pytest.mark.parametrize(("name", "value"), COMMAND_CASES)
def test_a_bad_value_stops_a_command_with_exit_2(project, name, value):
    for args in (("status",), ("--version",), ("check", "--onto", "v1")):
        got = fp(project, *args, extra_env={name: value}, timeout=60)
        assert got.returncode == 2, (args, got.stdout, got.stderr)
        assert f"{name}={value!r}" in got.stderr and "tip:" in got.stderr
        assert "Traceback" not in got.stderr


RELIABILITY = [
    Row(
        "the user's environment",
        "forkpatch's own settings written with units (500ms, 5m, 1h, 16G, 512MiB, 1.5GB, "
        "yes/no) and written wrong (5 fortnights, -1, nan, 1e400, 16X, maybe, an API URL "
        "without a scheme or with a token in it), read through one reader (settings.py)",
        f"{len(DURATIONS) + len(SIZES) + len(FLAGS)} good + "
        f"{len(BAD_CASES) + len(URL_SECRETS)} bad + "
        f"{len(COMMAND_CASES)} through commands",
        "units read as written; a wrong value is exit 2 naming the variable, what it holds "
        "and a valid example, before the command does anything (--version too)",
        refused=str(len(BAD_CASES) + len(URL_SECRETS) + len(COMMAND_CASES)),
    ),
]
