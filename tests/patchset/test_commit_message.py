"""A patch's commit message is written and read back in one module (trailer.py): what
commit_message writes, parse_commit_message reads back as the same name, summary and
description, whatever form the patch file's header has."""

from __future__ import annotations

import pytest

from forkpatch.series import PatchEntry
from forkpatch.trailer import TRAILER, commit_message, parse_commit_message

MAIL = (
    "From 1234 Mon Sep 17 00:00:00 2001\n"
    "From: A Dev <a@example.com>\n"
    "Subject: [PATCH] widen the padding\n"
    "\n"
    "The kernel reads 128 columns.\n"
    "\n"
    "Signed-off-by: A Dev <a@example.com>\n"
    "---\n"
    " vllm/ops.py | 2 +-\n"
)


@pytest.mark.parametrize(
    ("header", "description"),
    [
        ("", ""),
        ("Widen the padding.\n", "Widen the padding."),
        ("\n\nTwo paragraphs.\n\nThe second.\n\n", "Two paragraphs.\n\nThe second."),
        ("Above the notes.\n---\nnotes below\n", "Above the notes."),
        (MAIL, "The kernel reads 128 columns.\n\nSigned-off-by: A Dev <a@example.com>"),
    ],
    ids=["none", "plain", "paragraphs", "notes", "mail"],
)
@pytest.mark.parametrize(
    ("name", "summary"),
    [("odd-width-padding", "Widen the padding"), ("fp8", "fp8: a summary with a colon")],
)
def test_what_is_written_is_read_back(header, description, name, summary):
    message = commit_message(PatchEntry(name, summary, file=f"{name}.patch"), header)
    assert message.endswith(f"\n\n{TRAILER}: {name}\n")
    assert message.startswith(f"{name}: {summary}\n")
    assert parse_commit_message(message) == (name, summary, description)


def test_a_message_without_the_trailer_names_no_patch():
    assert parse_commit_message("a commit of someone else's\n\nIts body.\n") == (
        None,
        "a commit of someone else's",
        "Its body.",
    )
