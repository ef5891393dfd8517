"""The GitHub workflow without GitHub: its expressions evaluated by GitHub's own
evaluator (npm @actions/expressions, through gh_expr.mjs), and its jobs' `run:` steps
run in order in fresh workspaces, with a stand-in `gh` that records its calls.

`act` cannot run here (no image registry); what the runner itself does is emulated
in the open: `actions/checkout` is a fresh clone of the team repository (and
forkpatch's own tree for `.forkpatch-tool`), `setup-python` is this interpreter,
`upload-artifact`/`download-artifact` copy the files their `path`/`pattern` select
(relative to the paths' common directory, as upload-artifact stores them), and the
pip / venv install lines install nothing (forkpatch is already in this interpreter:
the stand-in `python`/`python3` record them)."""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from support import REPO_ROOT
from support.git import GIT_ENV, git
from support.track import node_module

WORKFLOW = REPO_ROOT / "ci" / "github" / "workflows" / "forkpatch-track.yml"
EXPR_SCRIPT = Path(__file__).with_name("gh_expr.mjs")
STATUS_FUNCS = ("success(", "always(", "failure(", "cancelled(")


def load_workflow() -> dict[str, Any]:
    wf = yaml.safe_load(WORKFLOW.read_text())
    wf["on"] = wf.pop(True)  # YAML 1.1 reads the key `on` as True
    return wf  # type: ignore[no-any-return]


def evaluate(requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """[{expr, context, status}] -> [{value, text}] by GitHub's evaluator."""
    module = node_module("@actions/expressions") / "dist" / "index.js"
    proc = subprocess.run(
        ["node", str(EXPR_SCRIPT)],
        input=json.dumps(requests),
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "ACTIONS_EXPRESSIONS_MODULE": str(module)},
        timeout=120,
    )
    answers = json.loads(proc.stdout)
    for req, ans in zip(requests, answers, strict=True):
        assert "error" not in ans, f"{req['expr']}: {ans['error']}"
    return answers  # type: ignore[no-any-return]


def job_if(expr: str | None) -> str:
    """A job's `if:` as the runner evaluates it: without ${{ }}, and with an implicit
    success() when it calls no status function."""
    text = (expr or "").strip()
    m = re.fullmatch(r"\$\{\{(.*)\}\}", text, re.S)
    if m:
        text = m.group(1).strip()
    if not text:
        return "success()"
    if not any(f in text for f in STATUS_FUNCS):
        return f"success() && ({text})"
    return text


def job_status(needs: dict[str, dict[str, Any]]) -> dict[str, bool]:
    results = [n["result"] for n in needs.values()]
    return {
        "always": True,
        "success": all(r == "success" for r in results),
        "failure": any(r == "failure" for r in results),
        "cancelled": False,
    }


def substitute(values: dict[str, str], context: dict[str, Any]) -> dict[str, str]:
    """Every ${{ }} in ``values`` replaced by what GitHub's evaluator makes of it."""
    pieces: list[tuple[str, str]] = []
    for key, raw in values.items():
        pieces += [(key, m) for m in re.findall(r"\$\{\{(.*?)\}\}", str(raw))]
    answers = evaluate([{"expr": e, "context": context, "status": {}} for _, e in pieces])
    out = {k: str(v) for k, v in values.items()}
    for (key, expr), ans in zip(pieces, answers, strict=True):
        out[key] = out[key].replace("${{" + expr + "}}", ans["text"], 1)
    return out


# =========================================================================== stand-ins

STANDIN_GH = r'''#!{python}
"""A stand-in for the GitHub CLI: records each call; pull requests and issues in a JSON file."""
import json, os, sys
state_path = os.environ["STANDIN_GH_STATE"]
args = sys.argv[1:]
with open(os.environ["STANDIN_GH_LOG"], "a") as log:
    log.write(json.dumps(args) + "\n")
state = json.load(open(state_path)) if os.path.exists(state_path) else {{"pulls": [], "issues": []}}
def opt(name):
    return args[args.index(name) + 1] if name in args else None
def body():
    return open(opt("--body-file")).read()
def save():
    json.dump(state, open(state_path, "w"))
if os.environ.get("STANDIN_GH_FAIL"):
    sys.stderr.write(os.environ["STANDIN_GH_FAIL"] + "\n"); sys.exit(1)
if args[:1] == ["api"]:
    print(args[1].split("/", 1)[1]); sys.exit(0)
kind, verb = args[0], args[1]
items = state["pulls" if kind == "pr" else "issues"]
open_items = [i for i in items if i["state"] == "open"]
if verb == "list":
    if kind == "pr":
        found = [i for i in open_items if i["head"] == opt("--head")]
        if opt("--json") == "body":
            print(found[0]["body"] if found else "")
        else:
            print(found[0]["number"] if found else "")
    else:
        print(json.dumps([{{"number": i["number"], "title": i["title"], "body": i["body"]}} for i in open_items]))
elif verb == "create":
    item = {{"number": len(items) + 1, "state": "open", "title": opt("--title"), "body": body(), "head": opt("--head"), "base": opt("--base")}}
    items.append(item); save()
    print(f"https://github.example/pull/{{item['number']}}")
elif verb == "edit":
    item = next(i for i in items if i["number"] == int(args[2]))
    item["body"] = body()
    if opt("--title"):
        item["title"] = opt("--title")
    save()
else:
    sys.stderr.write(f"stand-in gh: unknown command {{args}}\n"); sys.exit(2)
'''

STANDIN_PYTHON = r"""#!/bin/sh
# A stand-in for the runner's python: installs record themselves and do nothing
# (forkpatch is in this interpreter already); `-m venv DIR` makes a real venv whose
# pip is a recorder too. Everything else is the real interpreter.
echo "$0 $*" >> "$STANDIN_INSTALL_LOG"
if [ "$1 $2" = "-m pip" ]; then exit 0; fi
if [ "$1 $2" = "-m venv" ]; then
    "{python}" -m venv --without-pip "$3" || exit 1
    printf '#!/bin/sh\necho "pip $*" >> "$STANDIN_INSTALL_LOG"\n' > "$3/bin/pip"
    chmod +x "$3/bin/pip"
    exit 0
fi
exec "{python}" "$@"
"""


@dataclass
class WorkflowRun:
    """One GitHub run of the workflow, job by job."""

    root: Path  # scratch space for workspaces, artifacts and stand-ins
    origin: Path  # the team repository (bare), what actions/checkout clones
    event: str  # schedule | workflow_dispatch
    inputs: dict[str, Any] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)  # the runner machine's environment
    vars: dict[str, str] = field(default_factory=dict)
    secrets: dict[str, str] = field(default_factory=dict)
    needs: dict[str, dict[str, Any]] = field(default_factory=dict)
    ran: list[str] = field(default_factory=list)
    logs: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.bin = self.root / "bin"
        self.bin.mkdir(parents=True, exist_ok=True)
        gh = self.bin / "gh"
        gh.write_text(STANDIN_GH.format(python=sys.executable))
        gh.chmod(0o755)
        for name in ("python", "python3"):
            p = self.bin / name
            p.write_text(STANDIN_PYTHON.format(python=sys.executable))
            p.chmod(0o755)
        self.artifacts = self.root / "artifacts"
        self.artifacts.mkdir(exist_ok=True)

    def gh_calls(self) -> list[list[str]]:
        log = self.root / "gh.log"
        if not log.exists():
            return []
        return [json.loads(line) for line in log.read_text().splitlines()]

    def context(self, workspace: Path, env: dict[str, str]) -> dict[str, Any]:
        return {
            "github": {
                "event_name": self.event,
                "workspace": str(workspace),
                "repository": "team/project",
                "token": "ghs-default-token",
                "ref_name": "main",
            },
            "inputs": self.inputs,
            "vars": self.vars,
            "secrets": self.secrets,
            "needs": self.needs,
            "env": env,
        }

    # ---------------------------------------------------------------- a whole run

    def run(self, wf: dict[str, Any]) -> None:
        for name, job in wf["jobs"].items():
            needs = job.get("needs", [])
            needs = [needs] if isinstance(needs, str) else needs
            mine = {n: self.needs[n] for n in needs}
            ctx = {**self.context(self.root, {}), "needs": mine}
            (ans,) = evaluate(
                [{"expr": job_if(job.get("if")), "context": ctx, "status": job_status(mine)}]
            )
            if not ans["value"]:
                self.needs[name] = {"result": "skipped", "outputs": {}}
                continue
            self.ran.append(name)
            self.needs[name] = self.run_job(name, job, wf.get("env", {}), mine)

    def run_job(
        self, name: str, job: dict[str, Any], wf_env: dict[str, str], needs: dict[str, Any]
    ) -> dict[str, Any]:
        workspace = self.root / "work" / name
        if workspace.exists():
            shutil.rmtree(workspace)
        git(self.root, "clone", "-q", str(self.origin), str(workspace))
        ctx = {**self.context(workspace, {}), "needs": needs}
        env = substitute(wf_env, ctx)
        env.update(substitute(job.get("env", {}), {**ctx, "env": env}))
        steps_out: dict[str, dict[str, str]] = {}
        result, log = "success", []
        for step in job["steps"]:
            step_if = step.get("if")
            if step_if is None and result != "success":
                continue
            if step_if is not None and step_if != "always()":
                raise AssertionError(f"{name}: step if {step_if!r} is not emulated")
            ok, text = self.run_step(step, workspace, {**ctx, "env": env, "steps": steps_out}, env)
            log.append(text)
            if step.get("id"):
                steps_out[step["id"]] = {"outputs": self._outputs(workspace)}
            if not ok:
                result = "failure"
        self.logs[name] = "\n".join(log)
        outputs = substitute(job.get("outputs", {}), {**ctx, "env": env, "steps": steps_out})
        return {"result": result, "outputs": outputs}

    def _outputs(self, workspace: Path) -> dict[str, str]:
        path = workspace / ".github-output"
        out: dict[str, str] = {}
        if path.exists():
            for line in path.read_text().splitlines():
                key, _, value = line.partition("=")
                out[key] = value
            path.unlink()
        return out

    def run_step(
        self, step: dict[str, Any], workspace: Path, ctx: dict[str, Any], env: dict[str, str]
    ) -> tuple[bool, str]:
        uses = step.get("uses", "")
        with_ = substitute(step.get("with", {}), ctx)
        if uses.startswith("actions/checkout@"):
            if with_.get("path") == ".forkpatch-tool":
                (workspace / ".forkpatch-tool").symlink_to(REPO_ROOT)
            return True, f"checkout {with_}"
        if uses.startswith("actions/setup-python@"):
            return True, "setup-python: this interpreter"
        if uses.startswith("actions/upload-artifact@"):
            return True, self.upload(workspace, with_)
        if uses.startswith("actions/download-artifact@"):
            return True, self.download(workspace, with_)
        assert "run" in step, f"step {step} is not emulated"
        step_env = substitute(step.get("env", {}), ctx)
        full = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("GITHUB_", "GITLAB_", "CI_", "FORKPATCH_", "GH_"))
        }
        full.update(GIT_ENV)
        full.update(self.env)
        full.update(env)
        full.update(step_env)
        extra_path = workspace / ".github-path"
        added = extra_path.read_text().split() if extra_path.exists() else []
        full["PATH"] = ":".join([*reversed(added), str(self.bin), full["PATH"]])
        full.update(
            {
                "GITHUB_ACTIONS": "true",
                "GITHUB_WORKSPACE": str(workspace),
                "GITHUB_OUTPUT": str(workspace / ".github-output"),
                "GITHUB_PATH": str(extra_path),
                "GITHUB_REPOSITORY": "team/project",
                "GITHUB_REF_NAME": "main",
                "GITHUB_EVENT_NAME": self.event,
                "STANDIN_GH_LOG": str(self.root / "gh.log"),
                "STANDIN_GH_STATE": str(self.root / "gh-state.json"),
                "STANDIN_INSTALL_LOG": str(self.root / "installs.log"),
            }
        )
        proc = subprocess.run(
            ["bash", "-e", "-c", step["run"]],
            cwd=workspace,
            env=full,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        return proc.returncode == 0, f"$ {step['run']}\n{proc.stdout}{proc.stderr}"

    # ---------------------------------------------------------------- artifacts

    def upload(self, workspace: Path, with_: dict[str, str]) -> str:
        lines = [p.strip() for p in with_["path"].splitlines() if p.strip()]
        keep = [p for p in lines if not p.startswith("!")]
        drop = [p[1:] for p in lines if p.startswith("!")]
        files: list[Path] = []
        for pattern in keep:
            for match in sorted(workspace.glob(pattern.rstrip("/"))):
                files += [match] if match.is_file() else sorted(match.rglob("*"))
        files = [
            f
            for f in files
            if f.is_file()
            and not any(
                fnmatch.fnmatch(str(f.relative_to(workspace)), d.rstrip("/") + "*")
                or "/.forkpatch/" in "/" + str(f.relative_to(workspace))
                for d in drop
            )
        ]
        dest = self.artifacts / with_["name"]
        if dest.exists():
            raise AssertionError(f"artifact {with_['name']} uploaded twice")
        if not files:
            return f"upload {with_['name']}: no files"
        # upload-artifact stores paths relative to the least common ancestor of the
        # search paths (here: of the files' directories).
        root = Path(os.path.commonpath([str(f.parent) for f in files]))
        for f in files:
            target = dest / f.relative_to(root)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(f, target)
        return f"upload {with_['name']}: {len(files)} file(s) from {root}"

    def download(self, workspace: Path, with_: dict[str, str]) -> str:
        if "name" in with_:
            names = [with_["name"]]
        else:
            pattern = with_["pattern"]
            m = re.fullmatch(r"(.*)\{(.*)\}(.*)", pattern)
            alts = [m.group(1) + a + m.group(3) for a in m.group(2).split(",")] if m else [pattern]
            names = sorted(
                p.name
                for p in self.artifacts.iterdir()
                if any(fnmatch.fnmatch(p.name, a) for a in alts)
            )
        dest = workspace / with_["path"]
        for name in names:
            src = self.artifacts / name
            merge = "name" in with_ or with_.get("merge-multiple", "").lower() == "true"
            target = dest if merge else dest / name
            for f in src.rglob("*"):
                if f.is_file():
                    out = target / f.relative_to(src)
                    assert not out.exists(), f"{out} arrives from two artifacts"
                    out.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(f, out)
        return f"download {names}"
