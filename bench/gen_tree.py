"""Generate a deterministic vLLM-sized benchmark fork, patch series and upstream drift.

Everything is derived from one seed, so two runs produce byte-identical trees,
patches and commit ids:

* ``upstream.git`` (bare): ~5,800 Python/C++/Markdown files in a vLLM-like
  layout (vllm/, csrc/, tests/, docs/, benchmarks/, examples/, ...), 50-600
  lines each, committed once and tagged ``v1.0.0``;
* a branch ``series`` of N_MAX small patches on v1.0.0 (1-3 files, 1-3 hunks
  each, never overlapping, so they apply in order); ``series-<N>`` names the
  first N of them for every N asked for (default 100, 300, 1000);
* upstream drift on ``main`` up to the tag ``v1.1.0``: a few hundred commits
  that edit/add/delete/rename files nobody patches, edit patched files away from
  the hunks (the patches then land with an offset), edit a line *inside* a few
  hunks (context line 1: applies with fuzz / 3-way; a line between the two
  changes of a hunk: only a 3-way merge applies it, fuzz cannot) and carry a few
  patches verbatim (upstreamed). Every one of these merges cleanly, so
  ``git rebase --onto v1.1.0 v1.0.0 series-N`` completes without a conflict.

The same patches are written as
``format-patch/NNNN-*.patch`` (git format-patch), ``mbox-N.mbox`` (for ``git am``),
``quilt-N/patches/`` + ``series`` (for ``quilt push -a``) and ``project-N/``, a
forkpatch project made with ``forkpatch init`` + ``forkpatch import`` of the
format-patch files (series.yaml + patches/*.patch).

    python bench/gen_tree.py [--workdir DIR] [--sizes 100,300,1000] [--seed 1]
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import DEFAULT_WORKDIR, bench_env, forkpatch_argv, git, rmtree, run

GENERATOR_VERSION = 2  # bump when the output changes; cached data is rebuilt

# --------------------------------------------------------------------------- vocabulary

WORDS = """
attention kv cache block token seq batch sampler logits model layer weight quant scale fp8
gptq awq moe expert router tensor parallel rank world group device cuda rocm stream graph
capture config engine worker scheduler request prompt output input embed rotary rope norm
rms linear column row proj gate up down act silu gelu softmax topk topp temperature beam
spec decode draft target accept reject prefix chunk prefill lora adapter slot mapping
metadata backend flash paged xformers triton kernel launch grid warp shard gather scatter
reduce allreduce broadcast pipeline stage micro buffer pool alloc free evict swap offload
cpu gpu tpu xpu hpu neuron platform capability arch dtype bf16 fp16 fp32 int8 int4 marlin
machete cutlass fused rms_norm qkv head dim hidden vocab pad mask position offset stride
shape view reshape contiguous pinned async sync event timer metrics stats logger usage
tokenizer detok chat template tool call json schema grammar guided structured multimodal
image audio video processor encoder decoder cross mamba ssm conv state hybrid sliding window
alibi sink eagle medusa ngram mtp lookahead async_output step multi hash lru ref count
sequence group finished aborted waiting running preempted budget limit max min num total
""".split()
VERBS = (
    "Fix",
    "Add",
    "Handle",
    "Support",
    "Avoid",
    "Skip",
    "Use",
    "Guard",
    "Pad",
    "Cache",
    "Tune",
    "Keep",
    "Drop",
    "Allow",
    "Prefer",
    "Disable",
    "Enable",
    "Check",
    "Clamp",
)
TYPES = (
    "int",
    "float",
    "bool",
    "str",
    "torch.Tensor",
    "Optional[int]",
    "list[int]",
    "dict[str, Any]",
    "tuple[int, int]",
    "Optional[torch.Tensor]",
)

# Directory layout: (prefix, extension mix, number of directories, files per directory range)
LAYOUT = [
    ("vllm/model_executor/models", (".py",), 1, (240, 260)),
    ("vllm/model_executor/layers", (".py",), 14, (8, 30)),
    ("vllm/model_executor/layers/quantization", (".py",), 6, (10, 30)),
    ("vllm/model_executor/layers/fused_moe", (".py",), 3, (10, 25)),
    ("vllm/attention", (".py",), 6, (6, 20)),
    ("vllm/v1", (".py",), 22, (6, 28)),
    ("vllm/distributed", (".py",), 6, (5, 20)),
    ("vllm/engine", (".py",), 3, (6, 16)),
    ("vllm/entrypoints", (".py",), 8, (6, 24)),
    ("vllm/worker", (".py",), 2, (10, 24)),
    ("vllm/lora", (".py",), 4, (6, 18)),
    ("vllm/multimodal", (".py",), 3, (8, 20)),
    ("vllm/transformers_utils", (".py",), 5, (8, 40)),
    ("vllm/config", (".py",), 1, (20, 30)),
    ("vllm/compilation", (".py",), 2, (10, 20)),
    ("vllm/platforms", (".py",), 1, (10, 14)),
    ("vllm/utils", (".py",), 2, (10, 20)),
    ("vllm/spec_decode", (".py",), 2, (10, 20)),
    ("vllm/inputs", (".py",), 1, (6, 10)),
    ("vllm/plugins", (".py",), 2, (4, 10)),
    ("vllm/executor", (".py",), 1, (8, 14)),
    ("vllm/sequence", (".py",), 1, (4, 8)),
    ("vllm/core", (".py",), 3, (6, 14)),
    ("vllm/benchmarks", (".py",), 2, (6, 14)),
    ("vllm/third_party", (".py",), 2, (4, 10)),
    ("csrc", (".cu", ".cuh", ".cpp", ".h"), 40, (6, 18)),
    ("tests/models", (".py",), 12, (15, 45)),
    ("tests/kernels", (".py",), 8, (10, 35)),
    ("tests/v1", (".py",), 14, (8, 30)),
    ("tests/entrypoints", (".py",), 6, (10, 35)),
    ("tests", (".py",), 55, (6, 24)),
    ("docs", (".md",), 28, (8, 24)),
    ("benchmarks", (".py", ".sh"), 8, (8, 22)),
    ("examples", (".py", ".md"), 10, (10, 28)),
    ("tools", (".py", ".sh"), 4, (5, 14)),
    ("requirements", (".txt",), 1, (12, 16)),
    (".github/workflows", (".yml",), 1, (14, 20)),
    ("cmake", (".cmake",), 1, (6, 10)),
]

FILES_SCALE = 1.16  # tuned so that the tree has ~5,800 files, like vLLM's
WINDOW = 7  # lines around a hunk's changes that nothing else may touch (3 context + margin)


class Gen:
    """Deterministic text: Python-ish, C++-ish or Markdown lines, mostly unique."""

    def __init__(self, rng: random.Random) -> None:
        self.r = rng
        self.counter = 0

    def w(self) -> str:
        return self.r.choice(WORDS)

    def ident(self) -> str:
        return f"{self.r.choice(WORDS)}_{self.r.choice(WORDS)}"

    def sentence(self, n: int = 0) -> str:
        k = n or self.r.randint(4, 10)
        return " ".join(self.r.choice(WORDS) for _ in range(k))

    def py_stmt(self, ind: str) -> str:
        r = self.r.random()
        a, b = self.ident(), self.ident()
        if r < 0.22:
            return f"{ind}{a} = {b}({self.ident()}, {self.r.randint(0, 4096)})"
        if r < 0.34:
            return f"{ind}self.{a} = {b}.{self.w()}"
        if r < 0.44:
            return f"{ind}# {self.sentence()}"
        if r < 0.52:
            return f"{ind}{a}: {self.r.choice(TYPES)} = {self.r.randint(0, 65536)}"
        if r < 0.60:
            return f'{ind}assert {a}.shape[{self.r.randint(0, 3)}] == {b}, "{self.sentence(4)}"'
        if r < 0.68:
            return f'{ind}logger.debug("{self.sentence(5)} %s", {a})'
        if r < 0.76:
            return f"{ind}{a} = {b}.{self.w()}({self.w()}={self.ident()})"
        if r < 0.84:
            return f"{ind}out_{self.w()} = torch.{self.w()}({a}, dim={self.r.randint(-2, 2)})"
        if r < 0.92:
            return f"{ind}{a}.{self.w()}_({b}[{self.r.randint(0, 128)}:{self.ident()}])"
        return f"{ind}return {a}({b}={self.ident()})"

    def py_file(self, n: int, module: str) -> list[str]:
        r = self.r
        out = [
            "# SPDX-License-Identifier: Apache-2.0",
            "# SPDX-FileCopyrightText: Copyright contributors to the vLLM project",
            f'"""{self.sentence().capitalize()} for {module}."""',
            "",
            "from __future__ import annotations",
            "",
        ]
        for _ in range(r.randint(3, 12)):
            out.append(f"from vllm.{self.w()}.{self.ident()} import {self.ident()}")
        out += ["import torch", "", "logger = init_logger(__name__)", ""]
        while len(out) < n:
            if r.random() < 0.35:
                cls = "".join(x.capitalize() for x in self.ident().split("_"))
                out += [
                    "",
                    f"class {cls}{self.r.randint(0, 999)}({self.r.choice(('nn.Module', 'object', 'Enum', 'ABC'))}):",
                    f'    """{self.sentence().capitalize()}."""',
                    "",
                ]
                for _ in range(r.randint(1, 4)):
                    out += self._py_func("    ", method=True)
                    if len(out) >= n:
                        break
            else:
                out += ["", *self._py_func("", method=False)]
        return out[:n]

    def _py_func(self, ind: str, method: bool) -> list[str]:
        r = self.r
        args = ", ".join(f"{self.ident()}: {r.choice(TYPES)}" for _ in range(r.randint(0, 3)))
        if method:
            args = "self" + (", " + args if args else "")
        lines = [
            f"{ind}def {self.ident()}_{r.randint(0, 99)}({args}) -> {r.choice(TYPES)}:",
            f'{ind}    """{self.sentence().capitalize()}."""',
        ]
        body = ind + "    "
        for _ in range(r.randint(3, 22)):
            if r.random() < 0.12:
                lines.append(f"{body}if {self.ident()} is None:")
                lines.append(self.py_stmt(body + "    "))
            elif r.random() < 0.06:
                lines.append(f"{body}for {self.w()}_idx in range({self.ident()}.{self.w()}):")
                lines.append(self.py_stmt(body + "    "))
            else:
                lines.append(self.py_stmt(body))
        lines.append(f"{body}return {self.ident()}")
        lines.append("")
        return lines

    def c_stmt(self, ind: str) -> str:
        r = self.r.random()
        a, b = self.ident(), self.ident()
        if r < 0.3:
            return f"{ind}const int {a} = {b}[{self.r.randint(0, 256)}] * {self.ident()};"
        if r < 0.45:
            return f"{ind}// {self.sentence()}"
        if r < 0.6:
            return f"{ind}{a} += __shfl_xor_sync(0xffffffff, {b}, {self.r.randint(1, 16)});"
        if r < 0.75:
            return f"{ind}float {a} = static_cast<float>({b}.{self.w()});"
        if r < 0.88:
            return (
                f'{ind}TORCH_CHECK({a}.size({self.r.randint(0, 3)}) == {b}, "{self.sentence(4)}");'
            )
        return f"{ind}{a}[threadIdx.x + {self.r.randint(0, 512)}] = {b};"

    def c_file(self, n: int, module: str) -> list[str]:
        r = self.r
        out = [
            "// SPDX-License-Identifier: Apache-2.0",
            f"// {self.sentence()} ({module})",
            "#pragma once",
            "",
            "#include <torch/all.h>",
            "#include <cuda_runtime.h>",
            "",
            "namespace vllm {",
            "",
        ]
        while len(out) < n:
            out.append(f"template <typename scalar_t, int {self.w().upper()}_SIZE>")
            out.append(
                f"__global__ void {self.ident()}_kernel_{r.randint(0, 999)}("
                f"scalar_t* __restrict__ {self.ident()}, const int {self.ident()}) {{"
            )
            for _ in range(r.randint(4, 30)):
                out.append(self.c_stmt("  "))
            out += ["}", ""]
        out = [*out[: n - 1], "}  // namespace vllm"]
        return out

    def md_file(self, n: int, module: str) -> list[str]:
        r = self.r
        out = [f"# {self.sentence(3).title()}", "", f"{self.sentence(12).capitalize()}.", ""]
        while len(out) < n:
            x = r.random()
            if x < 0.15:
                out += [f"## {self.sentence(4).title()}", ""]
            elif x < 0.3:
                out += (
                    ["```python"] + [self.py_stmt("") for _ in range(r.randint(2, 8))] + ["```", ""]
                )
            elif x < 0.5:
                out += [
                    f"- {self.sentence().capitalize()} `{self.ident()}`."
                    for _ in range(r.randint(2, 6))
                ] + [""]
            else:
                out += [
                    f"{self.sentence(14).capitalize()} `{self.ident()}`,",
                    f"{self.sentence(12)} {r.randint(0, 9999)}.",
                    "",
                ]
        return out[:n]

    def other_file(self, n: int, ext: str) -> list[str]:
        if ext == ".txt":
            return [
                f"{self.w()}-{self.w()}>={self.r.randint(0, 9)}.{self.r.randint(0, 40)}"
                for _ in range(min(n, 60))
            ]
        if ext == ".yml":
            out = [f"name: {self.sentence(3)}", "on:", "  pull_request:", "jobs:"]
            while len(out) < n:
                out += [f"  {self.ident()}:", "    runs-on: ubuntu-latest", "    steps:"]
                out += [
                    f"      - run: {self.w()} {self.ident()} --{self.w()}={self.r.randint(0, 99)}"
                    for _ in range(self.r.randint(3, 12))
                ]
            return out[:n]
        if ext in (".sh", ".cmake"):
            return ["#!/bin/bash" if ext == ".sh" else f"# {self.sentence()}"] + [
                f"{self.w().upper()}_{self.w().upper()}=${{{self.w().upper()}:-{self.r.randint(0, 999)}}}"
                if self.r.random() < 0.5
                else f"# {self.sentence()}"
                for _ in range(n - 1)
            ]
        return [self.sentence() for _ in range(n)]

    def file(self, path: str, n: int) -> list[str]:
        ext = Path(path).suffix
        if ext == ".py":
            return self.py_file(n, path)
        if ext in (".cu", ".cuh", ".cpp", ".h"):
            return self.c_file(n, path)
        if ext == ".md":
            return self.md_file(n, path)
        return self.other_file(n, ext)

    def new_line(self, like: str, tag: str) -> str:
        """A changed/added line that looks like its neighbour and is globally unique."""
        self.counter += 1
        ind = like[: len(like) - len(like.lstrip())]
        kind = self.r.random()
        if like.lstrip().startswith(
            ("//", "const ", "float ", "TORCH_CHECK", "__")
        ) or like.rstrip().endswith(";"):
            return f"{ind}const int {self.ident()}_{tag} = {self.ident()} + {self.counter};"
        if kind < 0.5:
            return f"{ind}{self.ident()} = {self.ident()}_{tag}({self.ident()}, {self.counter})"
        if kind < 0.8:
            return f"{ind}# fork({tag}): {self.sentence(6)}"
        return f"{ind}if {self.ident()}_{tag} is not None and {self.counter}:"


# --------------------------------------------------------------------------- model


@dataclass
class Hunk:
    kind: str  # replace | insert | delete | double
    changed: list[int]  # base line indices replaced/deleted (empty for insert)
    anchor: int  # base index of the first line after an insert / first changed line
    ctx1: int  # base index of the first context line (3 lines before the change)
    mid: int | None = None  # double: base index of the middle unchanged line
    new_lines: list[list[str]] = field(default_factory=list)  # per change group


@dataclass
class Patch:
    index: int  # 1-based
    name: str
    subject: str
    body: str
    files: dict[str, list[Hunk]] = field(default_factory=dict)
    new_files: dict[str, list[str]] = field(default_factory=dict)
    kind: str = "plain"  # plain | offset | fuzz3way | mid3way | upstreamed | newfile


def build_tree(rng: random.Random, gen: Gen) -> dict[str, list[str]]:
    tree: dict[str, list[str]] = {}
    for prefix, exts, ndirs, (lo, hi) in LAYOUT:
        for d in range(ndirs):
            if ndirs == 1:
                dirpath = prefix
            else:
                dirpath = f"{prefix}/{gen.w()}_{gen.w() if rng.random() < 0.5 else d}"
            for _ in range(rng.randint(round(lo * FILES_SCALE), round(hi * FILES_SCALE))):
                ext = rng.choice(exts)
                path = f"{dirpath}/{gen.ident()}{ext}"
                if path in tree:
                    continue
                n = int(50 * 12 ** rng.random())
                tree[path] = gen.file(path, n)
            if ".py" in exts and prefix.startswith(("vllm", "tests")):
                tree.setdefault(
                    f"{dirpath}/__init__.py", ["# SPDX-License-Identifier: Apache-2.0", ""]
                )
    tree["README.md"] = gen.md_file(120, "README")
    tree["pyproject.toml"] = ["[project]", 'name = "vllm"', 'version = "1.0.0"'] + [
        f'{gen.w()} = "{gen.ident()}"' for _ in range(60)
    ]
    tree["setup.py"] = gen.py_file(400, "setup")
    tree["CMakeLists.txt"] = gen.other_file(300, ".cmake")
    return tree


def _good(line: str) -> bool:
    return len(line.strip()) > 14


def make_patches(
    rng: random.Random, gen: Gen, base: dict[str, list[str]], n: int
) -> tuple[list[Patch], dict[str, list[tuple[str, int]]], dict[str, dict[int, int]]]:
    """Plan n non-overlapping patches. Returns the patches, the patched files' final
    content as (text, base index or -1) lists, and per file: protected base lines -> patch."""
    candidates = sorted(
        p
        for p, lines in base.items()
        if p.endswith((".py", ".cu", ".cuh", ".cpp", ".h"))
        and p.startswith(("vllm/", "csrc/", "tests/"))
        and len(lines) >= 90
    )
    # Hot files: a fork's patches cluster in a few hundred files.
    hot = rng.sample(candidates, min(len(candidates), max(60, n // 2)))
    cur: dict[str, list[tuple[str, int]]] = {}
    prot: dict[str, dict[int, int]] = defaultdict(dict)
    patches: list[Patch] = []
    for i in range(1, n + 1):
        words = [gen.w() for _ in range(3)]
        name = f"p{i:04d}-{words[0]}-{words[1]}".replace("_", "-")
        verb = rng.choice(VERBS)
        p = Patch(
            i,
            name,
            f"{name}: {verb} {words[0]} {words[1]} {words[2]} handling",
            f"{gen.sentence(12).capitalize()}.\n{gen.sentence(10).capitalize()}.",
        )
        # Kinds, spread evenly so every prefix of the series has its share.
        if i % 97 == 50:
            p.kind = "upstreamed"
        elif i % 33 == 7:
            p.kind = "mid3way"
        elif i % 33 == 20:
            p.kind = "fuzz3way"
        elif i % 50 == 25:
            p.kind = "newfile"
        nfiles = rng.choices((1, 2, 3), (60, 30, 10))[0]
        if p.kind == "newfile":
            d = str(Path(rng.choice(candidates)).parent)
            path = f"{d}/fork_{name.replace('-', '_')}.py"
            p.new_files[path] = gen.py_file(rng.randint(20, 80), path)
            nfiles -= 1
        tried = 0
        while len(p.files) < nfiles and tried < 200:
            tried += 1
            path = rng.choice(hot) if rng.random() < 0.7 else rng.choice(candidates)
            if path in p.files:
                continue
            lines = cur.setdefault(path, [(t, j) for j, t in enumerate(base[path])])
            nh = rng.choices((1, 2, 3), (60, 30, 10))[0]
            hunks = []
            for h in range(nh):
                need_double = p.kind == "mid3way" and h == 0
                hk = _plan_hunk(rng, gen, lines, prot[path], i, p.name, need_double)
                if hk is not None:
                    hunks.append(hk)
                elif need_double:
                    break
            if hunks:
                p.files[path] = hunks
        if not p.files and not p.new_files:
            raise RuntimeError(f"could not place patch {i}: tree too small for {n} patches")
        if p.kind == "mid3way" and not any(
            h.kind == "double" for hs in p.files.values() for h in hs
        ):
            p.kind = "plain"
        patches.append(p)
    return patches, cur, prot


def _plan_hunk(
    rng: random.Random,
    gen: Gen,
    lines: list[tuple[str, int]],
    prot: dict[int, int],
    pid: int,
    tag: str,
    double: bool,
) -> Hunk | None:
    kind = (
        "double"
        if double
        else rng.choices(("replace", "insert", "delete", "double"), (50, 30, 8, 12))[0]
    )
    span = {"replace": rng.randint(1, 2), "insert": 0, "delete": rng.randint(1, 2), "double": 5}[
        kind
    ]
    tag = tag.split("-")[0]
    for _ in range(60):
        idx = rng.randint(WINDOW + 4, len(lines) - span - WINDOW - 4)
        window = lines[idx - WINDOW : idx + span + WINDOW]
        if any(b < 0 or b in prot for _, b in window):
            continue
        if not (
            _good(lines[idx - 1][0]) and _good(lines[idx + span][0]) and _good(lines[idx - 3][0])
        ):
            continue
        if kind == "double" and not (
            _good(lines[idx + 2][0]) and _good(lines[idx][0]) and _good(lines[idx + 4][0])
        ):
            continue
        for _, b in window:
            prot[b] = pid
        ctx1 = lines[idx - 3][1]
        like = lines[idx][0] if span else lines[idx - 1][0]
        if kind == "replace":
            new = [gen.new_line(like, tag) for _ in range(rng.randint(1, 3))]
            hk = Hunk(
                kind, [b for _, b in lines[idx : idx + span]], lines[idx][1], ctx1, new_lines=[new]
            )
            lines[idx : idx + span] = [(t, -1) for t in new]
        elif kind == "insert":
            new = [gen.new_line(like, tag) for _ in range(rng.randint(1, 5))]
            hk = Hunk(kind, [], lines[idx][1], ctx1, new_lines=[new])
            lines[idx:idx] = [(t, -1) for t in new]
        elif kind == "delete":
            hk = Hunk(
                kind, [b for _, b in lines[idx : idx + span]], lines[idx][1], ctx1, new_lines=[[]]
            )
            del lines[idx : idx + span]
        else:
            a, b = gen.new_line(lines[idx][0], tag), gen.new_line(lines[idx + 4][0], tag)
            hk = Hunk(
                kind,
                [lines[idx][1], lines[idx + 4][1]],
                lines[idx][1],
                ctx1,
                mid=lines[idx + 2][1],
                new_lines=[[a], [b]],
            )
            lines[idx] = (a, -1)
            lines[idx + 4] = (b, -1)
        return hk
    return None


# --------------------------------------------------------------------------- drift


@dataclass
class Op:
    """An upstream edit in base coordinates: replace base[start:end] with ``new``."""

    start: int
    end: int
    new: list[str]
    commit: int


def apply_ops(base: list[str], ops: list[Op], upto: int) -> list[str]:
    out: list[str] = []
    pos = 0
    for op in sorted((o for o in ops if o.commit <= upto), key=lambda o: (o.start, o.end)):
        assert op.start >= pos, "overlapping drift ops"
        out.extend(base[pos : op.start])
        out.extend(op.new)
        pos = op.end
    out.extend(base[pos:])
    return out


def plan_drift(
    rng: random.Random,
    gen: Gen,
    base: dict[str, list[str]],
    patches: list[Patch],
    prot: dict[str, dict[int, int]],
    n_commits: int,
) -> tuple[
    dict[str, list[Op]], dict[str, list[str]], dict[str, int], list[tuple[str, str, int]], list[str]
]:
    """Returns per-file ops, added files (path -> lines, commit), deleted (path -> commit),
    renames (old, new, commit), commit subjects."""
    ops: dict[str, list[Op]] = defaultdict(list)
    subjects = [
        f"{rng.choice(VERBS)} {gen.w()} {gen.w()} in {gen.w()} ({i + 1})" for i in range(n_commits)
    ]
    patched = {p for pt in patches for p in pt.files}
    new_in_patches = {p for pt in patches for p in pt.new_files}
    # 1. Patches upstreamed verbatim: one commit each, like a cherry-pick upstream.
    upstream_commits = {}
    for pt in patches:
        if pt.kind != "upstreamed":
            continue
        c = rng.randrange(n_commits)
        upstream_commits[pt.name] = c
        subjects[c] = f"{pt.subject.split(': ', 1)[1]} (upstreamed from the fork)"
        for path, hunks in pt.files.items():
            for h in hunks:
                if h.kind == "insert":
                    ops[path].append(Op(h.anchor, h.anchor, h.new_lines[0], c))
                elif h.kind in ("replace", "delete"):
                    ops[path].append(Op(h.changed[0], h.changed[-1] + 1, h.new_lines[0], c))
                else:
                    for b, new in zip(h.changed, h.new_lines, strict=True):
                        ops[path].append(Op(b, b + 1, new, c))
    # 2. Lines inside hunks, changed upstream so that only fuzz or a 3-way merge applies.
    for pt in patches:
        if pt.kind not in ("fuzz3way", "mid3way"):
            continue
        c = rng.randrange(n_commits)
        for path, hunks in pt.files.items():
            for h in hunks:
                if pt.kind == "mid3way" and h.kind == "double" and h.mid is not None:
                    line = base[path][h.mid]
                    ops[path].append(Op(h.mid, h.mid + 1, [line + "  # upstream: tweaked"], c))
                    break
                if pt.kind == "fuzz3way":
                    line = base[path][h.ctx1]
                    ops[path].append(Op(h.ctx1, h.ctx1 + 1, [line + "  # upstream"], c))
                    break
            else:
                continue
            break
    # 3. Edits away from the hunks: in half of the patched files (offsets) and in
    #    ~1,300 files nobody patches.
    others = sorted(p for p in base if p not in patched)
    rng.shuffle(others)
    touched_unpatched = others[:1300]
    deleted = {p: rng.randrange(n_commits) for p in others[1300:1340]}
    renames = [
        (
            p,
            p.replace(".py", "_v2.py") if p.endswith(".py") else p + ".v2",
            rng.randrange(n_commits),
        )
        for p in others[1340:1352]
    ]
    offset_files = [p for p in sorted(patched) if rng.random() < 0.5]
    for path in offset_files + touched_unpatched:
        lines = base[path]
        protected = prot.get(path, {})
        taken = sorted((o.start, o.end) for o in ops[path])
        n_ops = rng.randint(1, 4)
        for _ in range(n_ops * 6):
            if n_ops == 0:
                break
            start = rng.randint(0, max(0, len(lines) - 12))
            kind = rng.random()
            length = 0 if kind < 0.45 else rng.randint(1, 8)
            end = min(len(lines), start + length)
            lo, hi = start - 2, end + 2
            if any(b in protected for b in range(lo, hi)):
                continue
            if any(not (hi <= s or lo >= e) for s, e in taken):
                continue
            like = lines[min(start, len(lines) - 1)] if lines else ""
            new = [gen.new_line(like, "up") for _ in range(rng.randint(0 if length else 1, 12))]
            c = rng.randrange(n_commits)
            ops[path].append(Op(start, end, new, c))
            taken.append((start, end))
            n_ops -= 1
    # Files in the same op set must be applied in commit order; ops of one file are
    # independent (non-overlapping in base coordinates) so any order is fine.
    added: dict[str, list[str]] = {}
    for i in range(160):
        d = rng.choice(
            (
                "vllm/model_executor/models",
                "vllm/v1/" + gen.w(),
                "tests/models",
                "docs/" + gen.w(),
                "csrc/" + gen.w(),
                "vllm/entrypoints/" + gen.w(),
            )
        )
        ext = ".md" if d.startswith("docs") else (".cu" if d.startswith("csrc") else ".py")
        path = f"{d}/{gen.ident()}_{i}{ext}"
        if path in base or path in new_in_patches:
            continue
        added[path] = gen.file(path, int(50 * 12 ** rng.random()))
    return ops, added, deleted, renames, subjects


# --------------------------------------------------------------------------- writing


class Stream:
    """A git fast-import stream with inline blobs."""

    def __init__(self) -> None:
        self.chunks: list[bytes] = []
        self.mark = 0
        self.time = 1_700_000_000

    def commit(
        self,
        ref: str,
        message: str,
        changes: list[tuple[str, list[str] | None]],
        parent: str | None = None,
    ) -> str:
        self.mark += 1
        self.time += 60
        m = f":{self.mark}"
        msg = message.encode()
        who = f"Upstream Dev <dev@example.invalid> {self.time} +0000".encode()
        out = [
            f"commit {ref}\nmark {m}\n".encode(),
            b"author " + who + b"\n",
            b"committer " + who + b"\n",
            b"data %d\n" % len(msg),
            msg,
            b"\n",
        ]
        if parent:
            out.append(f"from {parent}\n".encode())
        for path, lines in changes:
            if lines is None:
                out.append(f"D {path}\n".encode())
            else:
                data = ("\n".join(lines) + "\n").encode()
                out.append(f"M 100644 inline {path}\ndata {len(data)}\n".encode())
                out.append(data)
                out.append(b"\n")
        out.append(b"\n")
        self.chunks.extend(out)
        return m

    def bytes(self) -> bytes:
        return b"".join(self.chunks) + b"done\n"


def generate(workdir: Path, sizes: list[int], seed: int, force: bool = False) -> dict:
    data = workdir / "data"
    stamp = data / "manifest.json"
    if stamp.exists() and not force:
        manifest = json.loads(stamp.read_text())
        if (
            manifest.get("seed") == seed
            and manifest.get("sizes") == sizes
            and manifest.get("version") == GENERATOR_VERSION
        ):
            print(f"gen_tree: reusing {data} (seed {seed}; --force to rebuild)")
            return manifest
    rmtree(data)
    data.mkdir(parents=True)
    t0 = time.perf_counter()
    rng = random.Random(seed)
    gen = Gen(rng)
    n_max = max(sizes)
    base = build_tree(rng, gen)
    patches, cur, prot = make_patches(rng, gen, base, n_max)
    n_drift = 400
    ops, added, deleted, renames, subjects = plan_drift(rng, gen, base, patches, prot, n_drift)
    t_plan = time.perf_counter() - t0

    # ---- the repository, in one fast-import stream
    s = Stream()
    root = s.commit(
        "refs/heads/main", "Initial import (v1.0.0)\n", [(p, base[p]) for p in sorted(base)]
    )
    # The series: replay each patch onto the patched files' content.
    state: dict[str, list[tuple[str, int]]] = {
        p: [(t, j) for j, t in enumerate(base[p])] for p in cur
    }
    parent = root
    marks_series = []
    # Rebuild per-patch file states by replaying the plan: the final content per file
    # is known (cur); intermediate content = base lines + changes of patches <= i.
    per_file_patches: dict[str, list[int]] = defaultdict(list)
    for pt in patches:
        for path in pt.files:
            per_file_patches[path].append(pt.index)
    for pt in patches:
        changes = []
        for path, hunks in pt.files.items():
            lines = state[path]
            for h in hunks:
                _apply_hunk(lines, h)
            changes.append((path, [t for t, _ in lines]))
        for path, lines in pt.new_files.items():
            changes.append((path, lines))
        parent = s.commit(
            "refs/heads/series", f"{pt.subject}\n\n{pt.body}\n", changes, parent=parent
        )
        marks_series.append(parent)
    for path in cur:
        assert [t for t, _ in state[path]] == [t for t, _ in cur[path]], path
    # The drift on main.
    by_commit: dict[int, set[str]] = defaultdict(set)
    for path, lst in ops.items():
        for o in lst:
            by_commit[o.commit].add(path)
    add_commit = {p: random.Random(f"{seed}:{p}").randrange(n_drift) for p in added}
    parent = root
    for c in range(n_drift):
        changes: list[tuple[str, list[str] | None]] = []
        for path in sorted(by_commit.get(c, ())):
            changes.append((path, apply_ops(base[path], ops[path], c)))
        for path, lines in added.items():
            if add_commit[path] == c:
                changes.append((path, lines))
        for path, dc in deleted.items():
            if dc == c:
                changes.append((path, None))
        for old, new, rc in renames:
            if rc == c:
                changes += [(old, None), (new, base[old])]
        parent = s.commit("refs/heads/main", f"{subjects[c]}\n", changes, parent=parent)
    upstream = data / "upstream.git"
    run(["git", "init", "-q", "--bare", str(upstream)])
    marks_file = data / "marks"
    run(
        ["git", "fast-import", "--quiet", "--done", f"--export-marks={marks_file}"],
        cwd=upstream,
        input=s.bytes(),
    )
    marks = dict(line.split() for line in marks_file.read_text().splitlines())
    git("tag", "v1.0.0", marks[root], cwd=upstream)
    git("tag", "v1.1.0", "main", cwd=upstream)
    for n in sizes:
        git("update-ref", f"refs/heads/series-{n}", marks[marks_series[n - 1]], cwd=upstream)
    git("symbolic-ref", "HEAD", "refs/heads/main", cwd=upstream)
    t_repo = time.perf_counter() - t0 - t_plan

    # ---- format-patch / mbox / quilt
    fp_dir = data / "format-patch"
    run(
        [
            "git",
            "format-patch",
            "-q",
            "--zero-commit",
            "--no-signature",
            "-o",
            str(fp_dir),
            f"v1.0.0..series-{n_max}",
        ],
        cwd=upstream,
    )
    fp_files = sorted(fp_dir.glob("*.patch"))
    assert len(fp_files) == n_max, len(fp_files)
    for n in sizes:
        with (data / f"mbox-{n}.mbox").open("wb") as fh:
            for f in fp_files[:n]:
                fh.write(f.read_bytes())
        qdir = data / f"quilt-{n}" / "patches"
        qdir.mkdir(parents=True)
        for f in fp_files[:n]:
            shutil.copyfile(f, qdir / f.name)
        (qdir / "series").write_text("".join(f"{f.name}\n" for f in fp_files[:n]))
    t_files = time.perf_counter() - t0 - t_plan - t_repo

    # ---- forkpatch projects: init + import of the format-patch files
    fp = forkpatch_argv()
    t_import = {}
    for n in sizes:
        proj = data / f"project-{n}"
        proj.mkdir()
        run(
            [*fp, "init", "--fork-url", str(upstream), "--base", "v1.0.0", "--name", "bench"],
            cwd=proj,
        )
        t1 = time.perf_counter()
        run([*fp, "-q", "import", *[str(f) for f in fp_files[:n]]], cwd=proj)
        t_import[n] = round(time.perf_counter() - t1, 2)
        shutil.rmtree(proj / ".forkpatch")  # each benchmark run starts from a fresh store

    kinds: dict[str, list[str]] = defaultdict(list)
    for pt in patches:
        kinds[pt.kind].append(pt.name)
    info = {
        "version": GENERATOR_VERSION,
        "seed": seed,
        "sizes": sizes,
        "files_v1_0_0": len(base),
        "lines_v1_0_0": sum(len(x) for x in base.values()),
        "bytes_v1_0_0": sum(len("\n".join(x)) + 1 for x in base.values()),
        "drift_commits": n_drift,
        "drift_files_changed": int(
            git("diff", "--shortstat", "v1.0.0", "v1.1.0", cwd=upstream).split()[0]
        ),
        "drift_shortstat": git("diff", "--shortstat", "-M", "v1.0.0", "v1.1.0", cwd=upstream),
        "patched_files": len(cur),
        "patched_files_changed_upstream": sum(1 for p in cur if ops.get(p)),
        "kinds": {k: v for k, v in sorted(kinds.items()) if k != "plain"},
        "kind_counts_per_size": {
            str(n): {
                k: sum(1 for x in patches[:n] if x.kind == k)
                for k in ("plain", "newfile", "fuzz3way", "mid3way", "upstreamed")
            }
            for n in sizes
        },
        "upstream": str(upstream),
        "seconds": {
            "plan": round(t_plan, 2),
            "repo": round(t_repo, 2),
            "format_patch_quilt": round(t_files, 2),
            "forkpatch_import": t_import,
            "total": round(time.perf_counter() - t0, 2),
        },
    }
    stamp.write_text(json.dumps(info, indent=2) + "\n")
    print(
        f"gen_tree: {info['files_v1_0_0']} files, {info['lines_v1_0_0']} lines, "
        f"{info['bytes_v1_0_0'] / 1e6:.1f} MB at v1.0.0; {n_max} patches; drift "
        f"{info['drift_shortstat']} in {n_drift} commits; {info['seconds']}"
    )
    return info


def _apply_hunk(lines: list[tuple[str, int]], h: Hunk) -> None:
    """Replay a planned hunk on a file state in (text, base index) form."""
    pos = {b: i for i, (_, b) in enumerate(lines) if b >= 0}
    if h.kind == "insert":
        i = pos[h.anchor]
        lines[i:i] = [(t, -1) for t in h.new_lines[0]]
    elif h.kind in ("replace", "delete"):
        i = pos[h.changed[0]]
        lines[i : i + len(h.changed)] = [(t, -1) for t in h.new_lines[0]]
    else:
        for b, new in zip(h.changed, h.new_lines, strict=True):
            i = pos[b]
            lines[i] = (new[0], -1)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR)
    ap.add_argument("--sizes", default="100,300,1000")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--force", action="store_true", help="rebuild even if cached")
    a = ap.parse_args(argv)
    bench_env()  # creates the private HOME
    generate(a.workdir, sorted(int(x) for x in a.sizes.split(",")), a.seed, a.force)
    return 0


if __name__ == "__main__":
    sys.exit(main())
