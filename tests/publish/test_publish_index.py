"""Publishing to a real pypiserver on loopback (twine upload), then pip install back.

The password is a canary: it must appear nowhere in forkpatch's output, the
reports it writes, or the text of its errors, even when the upload fails.
"""

from __future__ import annotations

import contextlib
import uuid
from pathlib import Path

import pytest

from support.cli import Runner
from support.servers import free_port
from support.venvs import install_from_index

pytestmark = pytest.mark.slow


def _all_text(*dirs: Path) -> str:
    out = []
    for d in dirs:
        for p in d.rglob("*"):
            if (p.is_file() and p.suffix in (".json", ".html", "")) or p.name == "SHA256SUMS":
                with contextlib.suppress(OSError):
                    out.append(p.read_text(errors="replace"))
    return "\n".join(out)


def test_publish_to_pypiserver_and_install_back(
    pypiserver, wheel_dir, tmp_path, capsys, monkeypatch
):
    wheel = next(wheel_dir.glob("*.whl"))
    monkeypatch.setenv("TWINE_USERNAME", pypiserver.user)
    monkeypatch.setenv("TWINE_PASSWORD", pypiserver.password)
    run = Runner(tmp_path, capsys)
    _, out, err = run(
        "publish", str(wheel), "--to", pypiserver.url, "--allow-missing-tier", "sm70", "--json"
    )
    assert pypiserver.files() == [wheel.name]
    assert (pypiserver.root / wheel.name).read_bytes() == wheel.read_bytes()
    assert pypiserver.password not in out + err
    # The report (with the override) and SHA256SUMS are written next to the wheel.
    assert "allowed_missing_tiers" in (wheel_dir / (wheel.name + ".smoke.json")).read_text()
    assert wheel.name in (wheel_dir / "SHA256SUMS").read_text()
    assert pypiserver.password not in _all_text(wheel_dir)

    # Idempotent.
    _, out, err = run("publish", str(wheel), "--to", pypiserver.url, "--allow-missing-tier", "sm70")
    assert "already published" in err and pypiserver.files() == [wheel.name]

    version = wheel.name.split("-")[1]
    index = pypiserver.url.replace("http://", f"http://{pypiserver.user}:{pypiserver.password}@")
    got = install_from_index(tmp_path / "consumer", index + "simple/", version)
    assert got["dist"] == got["vllm"] == version


def test_bad_credentials_are_refused_and_never_shown(
    pypiserver, wheel_dir, tmp_path, capsys, monkeypatch
):
    canary = f"canary-{uuid.uuid4().hex}"
    monkeypatch.setenv("TWINE_USERNAME", pypiserver.user)
    monkeypatch.setenv("TWINE_PASSWORD", canary)
    wheel = next(wheel_dir.glob("*.whl"))
    run = Runner(tmp_path, capsys)
    _code, out, err = run(
        "--debug",
        "publish",
        str(wheel),
        "--to",
        pypiserver.url,
        "--allow-missing-tier",
        "sm70",
        expect=1,
    )
    assert "refused access (HTTP 401)" in err or "refused access (HTTP 403)" in err
    assert pypiserver.files() == []
    assert canary not in out + err
    assert canary not in _all_text(wheel_dir, tmp_path)

    # Even when only the upload itself is rejected (listing is open), twine's
    # output is redacted.
    from forkpatch.errors import PublishError
    from forkpatch.publish import IndexTarget, PublishOptions, publish

    target = IndexTarget(pypiserver.url, None)
    target.existing = lambda name: {}  # type: ignore[method-assign]
    import forkpatch.publish as pub

    monkeypatch.setattr(pub, "open_target", lambda *a, **k: target)
    with pytest.raises(PublishError) as exc:
        publish(PublishOptions(wheels=(wheel,), to=pypiserver.url, allow_missing_tiers=("sm70",)))
    assert "failed (twine exited" in exc.value.message
    assert canary not in str(exc.value) and canary not in capsys.readouterr().err
    assert pypiserver.files() == []


def test_credentials_in_the_url_are_refused(wheel_dir, tmp_path, capsys):
    wheel = next(wheel_dir.glob("*.whl"))
    run = Runner(tmp_path, capsys)
    _, out, err = run(
        "publish",
        str(wheel),
        "--to",
        "http://u:hunter2@127.0.0.1:1/",
        "--allow-missing-tier",
        "sm70",
        expect=1,
    )
    assert "carries credentials" in err and "hunter2" not in out + err


def test_index_down(wheel_dir, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TWINE_USERNAME", "u")
    monkeypatch.setenv("TWINE_PASSWORD", "p-canary-down")
    wheel = next(wheel_dir.glob("*.whl"))
    run = Runner(tmp_path, capsys)
    port = free_port()
    _, out, err = run(
        "publish",
        str(wheel),
        "--to",
        f"http://127.0.0.1:{port}/",
        "--allow-missing-tier",
        "sm70",
        expect=1,
    )
    assert "cannot reach the index" in err and "nothing was uploaded" in err
    assert "p-canary-down" not in out + err


def test_different_file_same_name_is_refused(pypiserver, wheel_dir, tmp_path, capsys, monkeypatch):
    import hashlib
    import shutil

    monkeypatch.setenv("TWINE_USERNAME", pypiserver.user)
    monkeypatch.setenv("TWINE_PASSWORD", pypiserver.password)
    wheel = next(wheel_dir.glob("*.whl"))
    run = Runner(tmp_path, capsys)
    run("publish", str(wheel), "--to", pypiserver.url, "--allow-missing-tier", "sm70")
    other = tmp_path / "other"
    shutil.copytree(wheel_dir, other)
    w2 = other / wheel.name
    w2.write_bytes(w2.read_bytes() + b"\0")
    rep = other / (wheel.name + ".smoke.json")
    rep.write_text(
        rep.read_text().replace(
            hashlib.sha256(wheel.read_bytes()).hexdigest(),
            hashlib.sha256(w2.read_bytes()).hexdigest(),
        )
    )
    _, _, err = run(
        "publish", str(w2), "--to", pypiserver.url, "--allow-missing-tier", "sm70", expect=1
    )
    assert "already published with different content" in err
    assert (pypiserver.root / wheel.name).read_bytes() == wheel.read_bytes()
