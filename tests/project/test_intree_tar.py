"""intree.extract_tar: what tarfile's ``data`` filter gives where this Python has it, and
the same checks on the patch releases before it (Debian 12's 3.11.2), both ways on the
same archives: files, folders and links inside the tree unpacked, modes made plain, an
absolute name taken inside, and a name or a link outside the tree, a device or a pipe
refused."""

from __future__ import annotations

import io
import stat
import tarfile
from pathlib import Path

import pytest

from forkpatch.intree import extract_tar

WAYS = [False] + ([True] if hasattr(tarfile, "data_filter") else [])


def _tar(members: list[tuple[tarfile.TarInfo, bytes]]) -> tarfile.TarFile:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        for info, data in members:
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data) if data else None)
    buf.seek(0)
    return tarfile.open(fileobj=buf)


def _info(name: str, kind: bytes = tarfile.REGTYPE, mode: int = 0o644, link: str = ""):
    info = tarfile.TarInfo(name)
    info.type = kind
    info.mode = mode
    info.linkname = link
    return info


def _state(root: Path) -> dict[str, tuple[str, int, bytes | str]]:
    out: dict[str, tuple[str, int, bytes | str]] = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        st = p.lstat()
        if stat.S_ISLNK(st.st_mode):
            out[rel] = ("link", 0, str(p.readlink()))
        elif p.is_dir():
            out[rel] = ("dir", 0, b"")
        else:
            out[rel] = ("file", stat.S_IMODE(st.st_mode), p.read_bytes())
    return out


@pytest.mark.parametrize("data_filter", WAYS)
def test_files_folders_and_inside_links_are_unpacked_plain(tmp_path, data_filter):
    tf = _tar(
        [
            (_info("d", tarfile.DIRTYPE, 0o755), b""),
            (_info("d/run.sh", mode=0o4775), b"#!/bin/sh\n"),
            (_info("d/open.txt", mode=0o666), b"text\n"),
            (_info("d/near", tarfile.SYMTYPE, link="open.txt"), b""),
            (_info("up", tarfile.SYMTYPE, link="d/run.sh"), b""),
        ]
    )
    dest = tmp_path / "out"
    dest.mkdir()
    extract_tar(tf, dest, data_filter=data_filter)
    got = _state(dest)
    assert got["d/run.sh"] == ("file", 0o755, b"#!/bin/sh\n")  # no set-user-id, no g+w
    assert got["d/open.txt"] == ("file", 0o644, b"text\n")  # not world-writable
    assert got["d/near"] == ("link", 0, "open.txt")
    assert got["up"] == ("link", 0, "d/run.sh")


@pytest.mark.parametrize("data_filter", WAYS)
@pytest.mark.parametrize(
    "member",
    [
        ("../evil", tarfile.REGTYPE, ""),
        ("d/../../evil", tarfile.REGTYPE, ""),
        ("out", tarfile.SYMTYPE, "../../etc/passwd"),
        ("abs", tarfile.SYMTYPE, "/etc/passwd"),
        ("hard", tarfile.LNKTYPE, "../evil"),
        ("dev", tarfile.CHRTYPE, ""),
        ("pipe", tarfile.FIFOTYPE, ""),
    ],
)
def test_what_leaves_the_tree_or_is_no_file_is_refused(tmp_path, data_filter, member):
    name, kind, link = member
    tf = _tar([(_info(name, kind, link=link), b"x" if kind == tarfile.REGTYPE else b"")])
    dest = tmp_path / "a" / "out"
    dest.mkdir(parents=True)
    with pytest.raises((ValueError, tarfile.TarError)):
        extract_tar(tf, dest, data_filter=data_filter)
    assert not (tmp_path / "a" / "evil").exists() and not (tmp_path / "evil").exists()
    assert not (dest / "out").exists() and not (dest / "abs").exists()


@pytest.mark.parametrize("data_filter", WAYS)
def test_an_absolute_name_lands_inside(tmp_path, data_filter):
    tf = _tar([(_info("/etc/evil"), b"x")])
    dest = tmp_path / "out"
    dest.mkdir()
    extract_tar(tf, dest, data_filter=data_filter)
    assert (dest / "etc" / "evil").read_bytes() == b"x"
