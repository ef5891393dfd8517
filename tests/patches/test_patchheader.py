"""Patch headers read without changing a byte: mail/plain forms, subjects, notes,
diffstats, metadata, upstream references."""

from __future__ import annotations

from dataclasses import replace

import pytest

from forkpatch.errors import SeriesError
from forkpatch.patchfile import upstream_refs
from forkpatch.patchheader import (
    HeaderLayout,
    description_of,
    header_fields,
    strip_subject_prefix,
)
from forkpatch.series import PatchEntry, dump_series, parse_series

SHA = "1234567890abcdef1234567890abcdef12345678"

MAIL = (
    f"From {SHA} Mon Sep 17 00:00:00 2001\n"
    "From: =?UTF-8?q?J=C3=B6rg?= <j@example.org>\n"
    "Date: Tue, 3 Sep 2024 10:00:00 +0200\n"
    "Subject: [PATCH 2/5] depmod: Ignore .debug directories and a subject\n"
    " that is folded\n"
    "\n"
    "The body.\n\nSigned-off-by: J <j@example.org>\n"
    "---\n"
    "Upstream-Status: Backport [https://git.kernel.org/x/commit/?id=abcdef1234567]\n"
    "\n"
    " tools/depmod.c | 2 +-\n"
    " 1 file changed, 1 insertion(+), 1 deletion(-)\n"
    "\n"
)


def test_mail_parts():
    h = HeaderLayout.parse(MAIL)
    assert h.mail
    assert h.subject == "depmod: Ignore .debug directories and a subject that is folded"
    assert h.description == "The body.\n\nSigned-off-by: J <j@example.org>"
    assert h.notes.startswith("---\nUpstream-Status: Backport")
    assert h.stat_span is not None
    assert MAIL[slice(*h.stat_span)] == (
        " tools/depmod.c | 2 +-\n 1 file changed, 1 insertion(+), 1 deletion(-)\n"
    )


@pytest.mark.parametrize(
    ("subject", "prefix", "rest"),
    [
        ("[PATCH] x: y", "[PATCH] ", "x: y"),
        ("[PATCH v3 02/17] x: y", "[PATCH v3 02/17] ", "x: y"),
        ("[RFC PATCH net-next] [PATCH 1/2] x", "[RFC PATCH net-next] [PATCH 1/2] ", "x"),
        ("[2/7] x", "[2/7] ", "x"),
        ("Re: [PATCH] x", "Re: [PATCH] ", "x"),
        ("[Bugfix] Read the CLI version", "", "[Bugfix] Read the CLI version"),
        ("[Doc] [PATCH] y", "", "[Doc] [PATCH] y"),
    ],
)
def test_subject_tags(subject, prefix, rest):
    assert strip_subject_prefix(subject) == (prefix, rest)


@pytest.mark.parametrize(
    ("header", "mail", "description"),
    [
        ("Title\n\nBody", False, "Title\n\nBody"),
        # A DEP-3 header ended by ---: the fields are the description, not notes.
        (
            "Description: x\n y\nOrigin: upstream\n---\n\n",
            False,
            "Description: x\n y\nOrigin: upstream",
        ),
        # DEP-3 with Subject only is no mail; with From: and Subject: it is.
        (
            "Subject: fix it\nOrigin: vendor\n\nMore.",
            False,
            "Subject: fix it\nOrigin: vendor\n\nMore.",
        ),
        ("From: A <a@b>\nSubject: fix it\n\nMore.\n---\n stat", True, "More."),
        # An mbox line followed by text that is no header block: still a mail.
        ("From nobody Mon Sep 17 00:00:00 2001\nJust text.", True, "Just text."),
        # quilt's header with its --diffstat block below ---.
        (
            "Fix.\n\nUpstream-Status: Pending\n---\n a.c |    2 +-\n 1 file changed\n",
            False,
            "Fix.\n\nUpstream-Status: Pending",
        ),
    ],
)
def test_description_of(header, mail, description):
    assert HeaderLayout.parse(header).mail is mail
    assert description_of(header) == description


def test_rewrites_keep_every_other_character():
    h = HeaderLayout.parse(MAIL)
    new = h.with_description("Another body.")
    assert new == MAIL.replace("The body.\n\nSigned-off-by: J <j@example.org>", "Another body.")
    assert HeaderLayout.parse(new).description == "Another body."
    subj = h.with_subject("depmod: a new summary")
    assert "Subject: [PATCH 2/5] depmod: a new summary\n\nThe body." in subj
    assert subj.replace("Subject: [PATCH 2/5] depmod: a new summary\n", "") == MAIL.replace(
        "Subject: [PATCH 2/5] depmod: Ignore .debug directories and a subject\n that is folded\n",
        "",
    )
    umlaut = HeaderLayout.parse(h.with_subject("depmod: über"))
    assert umlaut.subject == "depmod: über" and umlaut.text.isascii()
    assert h.with_subject(h.subject) == MAIL
    assert h.with_description(h.description) == MAIL
    stat = h.with_stat(" a | 1 +\n 1 file changed, 1 insertion(+)\n")
    assert " a | 1 +\n" in stat and "tools/depmod.c" not in stat
    # A plain header that is only a description stays canonical.
    assert HeaderLayout.parse("Old.\n\n").with_description("New.") == "New.\n\n"
    assert HeaderLayout.parse("Old.\n").with_description("New.") == "New.\n"
    assert HeaderLayout.parse("Old.\n\n").with_description("") == ""
    assert HeaderLayout.parse("").with_description("New.") == "New."
    # An empty mail body gets the description on lines of its own.
    empty = "From: a <a@b>\nSubject: s\n\n---\n x | 1 +\n 1 file changed, 1 insertion(+)\n"
    assert HeaderLayout.parse(empty).with_description("Why.") == empty.replace(
        "\n\n---", "\n\nWhy.\n---"
    )


def test_header_fields_anywhere():
    fields = header_fields(MAIL + "CVE: CVE-2024-1\nBug-Debian: https://bugs/1\n")
    assert (
        "Upstream-Status",
        "Backport [https://git.kernel.org/x/commit/?id=abcdef1234567]",
    ) in fields
    assert ("CVE", "CVE-2024-1") in fields and ("Bug-Debian", "https://bugs/1") in fields


@pytest.mark.parametrize(
    ("text", "refs"),
    [
        (MAIL, [SHA, "abcdef1234567"]),
        ("From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n", []),
        ("x\n(cherry picked from commit deadbeef12)\n", ["deadbeef12"]),
        (f"commit {SHA} upstream.\n", [SHA]),
        (f"[ Upstream commit {SHA} ]\n", [SHA]),
        ("Origin: upstream, https://github.com/a/b/commit/0a1b2c3d4e\n", ["0a1b2c3d4e"]),
        ("Origin: backport, https://x/?p=a.git;a=commit;h=abc1234def\n", ["abc1234def"]),
        ("Applied-Upstream: 2.38, commit:fedcba9876\n", ["fedcba9876"]),
        # Not references: a vendor origin, a pending status, a bug number, a date.
        ("Origin: vendor, 1234abcdef99\nUpstream-Status: Pending [abcdef12345]\n", []),
        ("Upstream-Status: Backport [bug 12345678, 20240903]\n", []),
    ],
)
def test_upstream_refs_in_text(text, refs):
    assert upstream_refs(text) == refs
    assert upstream_refs(text.encode()) == refs


def test_upstream_refs_of_an_entry_and_the_series_field():
    entry = PatchEntry(
        name="p",
        file="p.patch",
        summary="s",
        origin="upstream, https://github.com/a/b/commit/0a1b2c3d4e",
        upstream="Forwarded: no; Upstream-Status: Backport [abcdef1234567]",
        upstream_commits=(SHA,),
    )
    assert upstream_refs(entry) == [SHA, "0a1b2c3d4e", "abcdef1234567"]
    text = (
        "version: 1\nfork: {name: f, url: u}\nbase: {tag: v1, commit: " + "a" * 40 + "}\n"
        "patches:\n  - name: p\n    file: Odd_Name.DIFF\n    summary: s\n"
        f"    upstream-commits: [{SHA}, abcdef1]\n"
    )
    series = parse_series(text)
    assert series.patches[0].upstream_commits == (SHA, "abcdef1")
    assert series.patches[0].file == "Odd_Name.DIFF"
    again = parse_series(dump_series(series)).patches[0]
    assert replace(again, line=0) == replace(series.patches[0], line=0)
    for bad in ("[XYZ]", "[abc]", "notalist"):
        with pytest.raises(SeriesError, match=r"series\.yaml:8: patch 'p': upstream"):
            parse_series(text.replace(f"[{SHA}, abcdef1]", bad))
