"""atheris target: parse any bytes as a patch file, then apply what parses.

Run: ``python fuzz/fuzz_patchfile.py -max_total_time=60 [corpus_dir]``. Every input
must end in success or a ``ForkpatchError`` (a ``HunkFailed`` from the applier is
its internal "does not apply" answer, turned into a message by the engine); any
other exception is a bug and makes libFuzzer save the input as ``crash-*``.
"""

from __future__ import annotations

import atheris
from fuzzkit import fuzz

with atheris.instrument_imports(include=["forkpatch"]):
    from forkpatch.applier import HunkFailed, apply_file_patch
    from forkpatch.errors import ForkpatchError
    from forkpatch.patchfile import check_paths, format_patch, parse_patch

SEEDS = [
    b"Fix it.\n\ndiff --git a/x.py b/x.py\n--- a/x.py\n+++ b/x.py\n@@ -1,2 +1,2 @@\n a\n-b\n+c\n",
    b"--- x.orig\n+++ x\n@@ -1 +1 @@\n-a\n\\ No newline at end of file\n+b\n",
    b"diff --git a/n b/n\nnew file mode 100644\n--- /dev/null\n+++ b/n\n@@ -0,0 +1 @@\n+x\r\n",
    b"diff --git a/b.bin b/b.bin\nindex 0000000..1111111 100644\nGIT binary patch\nliteral 1\n",
]


def test_one_input(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    original = fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 512))
    fuzz = fdp.ConsumeIntInRange(0, 3)
    text = fdp.ConsumeBytes(fdp.remaining_bytes())
    try:
        patch = parse_patch(text, source="fuzz.patch")
        check_paths(patch)
    except ForkpatchError:
        return
    # What parses must round-trip through the canonical writer.
    again = parse_patch(format_patch(patch.header, patch.diff), source="again.patch")
    assert again.diff == patch.diff and again.header == patch.header
    for fp in patch.files:
        for base in (original, None):
            try:
                res = apply_file_patch(base, fp, max_fuzz=fuzz)
            except HunkFailed:
                continue
            assert res.content is None or isinstance(res.content, bytes)


def main() -> None:
    fuzz(test_one_input, "patches/*.patch", SEEDS)


if __name__ == "__main__":
    main()
