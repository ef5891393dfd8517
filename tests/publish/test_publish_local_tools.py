"""A local tool publish needs is named with the line that installs it, never reported
as the index's failure: twine (the `publish` extra) for an upload index, and the
variables twine reads when it has no credentials. twine's colours stay out of the
messages (``twine --no-color``)."""

from __future__ import annotations

import sys

import pytest

from support.cli import Runner
from support.servers import serve_pypiserver

pytestmark = pytest.mark.slow


def _publish(tmp_path, capsys, wheel, to, *, expect):
    return Runner(tmp_path, capsys)(
        "publish", str(wheel), "--to", to, "--allow-missing-tier", "sm70", expect=expect
    )


@pytest.mark.parametrize("to", ["http://127.0.0.1:9/", "https://pypi.internal.example/simple/"])
def test_without_twine_the_publish_extra_is_named(wheel_dir, tmp_path, capsys, monkeypatch, to):
    monkeypatch.setitem(sys.modules, "twine", None)  # not importable, as when not installed
    wheel = next(wheel_dir.glob("*.whl"))
    _, _, err = _publish(tmp_path, capsys, wheel, to, expect=1)
    assert "needs twine, which is not installed in forkpatch's own environment" in err
    assert sys.executable in err
    assert f"tip: install it there: {sys.executable} -m pip install 'forkpatch[publish]'" in err
    assert "index's logs" not in err and "No module named" not in err
    assert "+ " not in err  # refused before any command ran


def test_without_twine_a_directory_target_still_works(wheel_dir, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "twine", None)
    wheel = next(wheel_dir.glob("*.whl"))
    _, _, err = _publish(tmp_path, capsys, wheel, str(tmp_path / "index"), expect=0)
    assert (tmp_path / "index" / wheel.name).is_file() or "published" in err


def test_track_names_the_publish_extra_too(monkeypatch):
    from forkpatch.errors import ToolMissing
    from forkpatch.publish import check_uploader

    monkeypatch.setitem(sys.modules, "twine", None)
    with pytest.raises(ToolMissing) as exc:
        check_uploader("https://user:tok3n-secret@pypi.internal.example/")
    assert "pip install 'forkpatch[publish]'" in str(exc.value)
    assert "tok3n-secret" not in str(exc.value)
    check_uploader("/srv/wheels")  # a directory needs no twine


def test_without_credentials_the_variables_are_named(wheel_dir, tmp_path, capsys, monkeypatch):
    """Listing is open, uploading needs a password (pypiserver's default `-a update`)."""
    passlib = pytest.importorskip("passlib.apache")
    monkeypatch.delenv("TWINE_USERNAME", raising=False)
    monkeypatch.delenv("TWINE_PASSWORD", raising=False)
    ht = passlib.HtpasswdFile(str(tmp_path / "htpasswd"), new=True, default_scheme="apr_md5_crypt")
    ht.set_password("publisher", "s3cret-index-pw")
    ht.save()
    root = tmp_path / "index-root"
    root.mkdir()
    options = ["-P", str(tmp_path / "htpasswd"), "-a", "update", "--log-stream", "none"]
    wheel = next(wheel_dir.glob("*.whl"))
    with serve_pypiserver(root, options) as (url, _proc):
        _, _, err = _publish(tmp_path, capsys, wheel, url, expect=1)
    assert (
        "tip: twine has no credentials for the index: set TWINE_USERNAME and TWINE_PASSWORD" in err
    )
    assert "index's logs" not in err
    assert "\x1b[" not in err  # no ANSI colours from twine
    assert list(root.iterdir()) == []
