#!/usr/bin/env python3
"""The forge side of ci/forkpatch-ci.sh: credentials, and the one pull/merge request
(or issue) per release. Standard library only; GitHub through `gh`, GitLab through
its REST API (v4).

    forge.py check                                   credentials + API reachable, before any push
    forge.py previous --branch B --tag T             body of the open change for T ("" if none)
    forge.py pull --branch B --base BASE --title T --body-file F    open or update the request
    forge.py issue --title T --body-file F           open or update the issue (same title)

Every failure is one line on stderr ("forkpatch-ci: error: ...") and exit 1,
never a traceback; `previous` only warns (a run without it redoes the stages).

Environment: FORKPATCH_CI_PLATFORM (github | gitlab; default from GITHUB_ACTIONS /
GITLAB_CI); GitHub: GH_TOKEN (or GITHUB_TOKEN), GITHUB_REPOSITORY, GITHUB_API_URL;
GitLab: FORKPATCH_GITLAB_TOKEN, FORKPATCH_GITLAB_API (default CI_API_V4_URL),
CI_PROJECT_ID.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

GITLAB_SCOPES = ("api", "write_repository")
GITHUB_NEEDS = (
    "a token that may push the bot branch and open pull requests and issues "
    "(contents: write, pull-requests: write, issues: write)"
)


class ForgeError(Exception):
    """One line for the operator."""


def platform() -> str:
    explicit = os.environ.get("FORKPATCH_CI_PLATFORM")
    if explicit:
        return explicit
    if os.environ.get("GITHUB_ACTIONS") == "true":
        return "github"
    if os.environ.get("GITLAB_CI") == "true":
        return "gitlab"
    return "none"


def _env(name: str, why: str) -> str:
    value = os.environ.get(name, "")
    if not value:
        raise ForgeError(f"{name} is not set: {why}")
    return value


# =========================================================================== GitHub


class GitHub:
    def __init__(self) -> None:
        self.repo = os.environ.get("GITHUB_REPOSITORY", "")

    def gh(self, *args: str) -> str:
        exe = shutil.which("gh")
        if exe is None:
            raise ForgeError("gh (the GitHub CLI) is not on PATH: the runner image must have it")
        proc = subprocess.run(
            [exe, *args], capture_output=True, text=True, check=False, timeout=300
        )
        if proc.returncode != 0:
            last = (proc.stderr.strip().splitlines() or ["(no message)"])[-1]
            raise ForgeError(f"gh {args[0]} {args[1] if len(args) > 1 else ''} failed: {last}")
        return proc.stdout

    def check(self) -> None:
        token = os.environ.get("GH_TOKEN") or os.environ.get("GITHUB_TOKEN")
        if not token:
            raise ForgeError(
                f"GH_TOKEN is not set: the open-change job needs {GITHUB_NEEDS}; the workflow "
                "passes secrets.FORKPATCH_BOT_TOKEN, else github.token"
            )
        repo = _env(
            "GITHUB_REPOSITORY", "run inside GitHub Actions (owner/name of this repository)"
        )
        try:
            self.gh("api", f"repos/{repo}", "--jq", ".full_name")
        except ForgeError as exc:
            text = str(exc)
            if "401" in text or "Bad credentials" in text:
                raise ForgeError(
                    f"the GitHub token was refused (401): GH_TOKEN must be {GITHUB_NEEDS}"
                ) from None
            if "404" in text or "Not Found" in text:
                raise ForgeError(
                    f"the GitHub token cannot see {repo} (404): give it access to the repository"
                ) from None
            raise ForgeError(f"cannot reach the GitHub API for {repo}: {text}") from None

    def previous(self, branch: str, tag: str) -> str:
        body = self.gh(
            "pr",
            "list",
            "--head",
            branch,
            "--state",
            "open",
            "--json",
            "body",
            "--jq",
            '.[0].body // ""',
        )
        if body.strip():
            return body
        raw = self.gh(
            "issue",
            "list",
            "--state",
            "open",
            "--search",
            f"in:title conflicts with {tag}",
            "--json",
            "title,body",
        )
        for item in _json_list(raw, "gh issue list"):
            if _is_conflict_title(str(item.get("title", "")), tag):
                return str(item.get("body") or "")
        return ""

    def pull(self, branch: str, base: str, title: str, body_file: str) -> None:
        number = self.gh(
            "pr",
            "list",
            "--head",
            branch,
            "--state",
            "open",
            "--json",
            "number",
            "--jq",
            ".[0].number // empty",
        ).strip()
        if number:
            self.gh("pr", "edit", number, "--title", title, "--body-file", body_file)
            say(f"updated pull request #{number}")
        else:
            out = self.gh(
                "pr",
                "create",
                "--head",
                branch,
                "--base",
                base,
                "--title",
                title,
                "--body-file",
                body_file,
            )
            say(f"opened a pull request: {out.strip()}")

    def issue(self, title: str, body_file: str) -> None:
        raw = self.gh(
            "issue",
            "list",
            "--state",
            "open",
            "--search",
            f'in:title "{title}"',
            "--json",
            "number,title",
        )
        numbers = [
            str(i["number"]) for i in _json_list(raw, "gh issue list") if i.get("title") == title
        ]
        if numbers:
            self.gh("issue", "edit", numbers[0], "--body-file", body_file)
            say(f"updated issue #{numbers[0]}")
        else:
            out = self.gh("issue", "create", "--title", title, "--body-file", body_file)
            say(f"opened an issue: {out.strip()}")


# =========================================================================== GitLab


class GitLab:
    def __init__(self) -> None:
        self.api = (
            os.environ.get("FORKPATCH_GITLAB_API") or os.environ.get("CI_API_V4_URL") or ""
        ).rstrip("/")
        self.project = os.environ.get("CI_PROJECT_ID", "")

    def token(self) -> str:
        return _env(
            "FORKPATCH_GITLAB_TOKEN",
            "add a project access token (role Developer, scopes "
            f"{' + '.join(GITLAB_SCOPES)}) as a masked CI/CD variable",
        )

    def call(self, method: str, path: str, data: dict[str, Any] | None = None) -> Any:
        if not self.api:
            raise ForgeError(
                "CI_API_V4_URL is not set: run inside GitLab CI (or set FORKPATCH_GITLAB_API)"
            )
        url = f"{self.api}/{path}"
        req = urllib.request.Request(
            url,
            method=method,
            data=None if data is None else json.dumps(data).encode(),
            headers={"PRIVATE-TOKEN": self.token(), "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as exc:
            if exc.code == 401:
                raise ForgeError(
                    f"FORKPATCH_GITLAB_TOKEN was refused by {self.api} (401 Unauthorized): "
                    "expired, revoked or mistyped?"
                ) from None
            if exc.code == 403:
                raise ForgeError(
                    f"FORKPATCH_GITLAB_TOKEN may not {method} {path} (403 Forbidden): it needs "
                    f"the role Developer and the scopes {' + '.join(GITLAB_SCOPES)}"
                ) from None
            raise ForgeError(f"{method} {url} failed: HTTP {exc.code} {exc.reason}") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise ForgeError(f"cannot reach the GitLab API at {self.api}: {reason}") from None
        try:
            return json.loads(raw.decode() or "null")
        except ValueError:
            raise ForgeError(
                f"{method} {url} answered with something that is not JSON "
                f"({raw[:60]!r}): is FORKPATCH_GITLAB_API / CI_API_V4_URL the API URL?"
            ) from None

    def check(self) -> None:
        self.token()
        _env("CI_PROJECT_ID", "run inside GitLab CI")
        info = self.call("GET", "personal_access_tokens/self")
        scopes = set(info.get("scopes") or []) if isinstance(info, dict) else set()
        missing = [s for s in GITLAB_SCOPES if s not in scopes]
        if missing:
            raise ForgeError(
                f"FORKPATCH_GITLAB_TOKEN lacks the scope(s) {', '.join(missing)} (it has: "
                f"{', '.join(sorted(scopes)) or 'none'}): create a project access token with "
                f"{' + '.join(GITLAB_SCOPES)}"
            )

    def _project(self, rest: str) -> str:
        return f"projects/{urllib.parse.quote(self.project, safe='')}/{rest}"

    def previous(self, branch: str, tag: str) -> str:
        q = urllib.parse.urlencode({"state": "opened", "source_branch": branch})
        mrs = self.call("GET", self._project(f"merge_requests?{q}"))
        if isinstance(mrs, list) and mrs:
            return str(mrs[0].get("description") or "")
        q = urllib.parse.urlencode(
            {"state": "opened", "in": "title", "search": f"conflicts with {tag}"}
        )
        for item in self.call("GET", self._project(f"issues?{q}")) or []:
            if _is_conflict_title(str(item.get("title", "")), tag):
                return str(item.get("description") or "")
        return ""

    def pull(self, branch: str, base: str, title: str, body_file: str) -> None:
        body = _read(body_file)
        q = urllib.parse.urlencode({"state": "opened", "source_branch": branch})
        found = self.call("GET", self._project(f"merge_requests?{q}")) or []
        if found:
            iid = found[0]["iid"]
            self.call(
                "PUT", self._project(f"merge_requests/{iid}"), {"title": title, "description": body}
            )
            say(f"updated merge request !{iid}")
            return
        made = self.call(
            "POST",
            self._project("merge_requests"),
            {
                "source_branch": branch,
                "target_branch": base,
                "title": title,
                "description": body,
                "remove_source_branch": True,
            },
        )
        say(f"opened merge request !{made.get('iid') if isinstance(made, dict) else '?'}")

    def issue(self, title: str, body_file: str) -> None:
        body = _read(body_file)
        q = urllib.parse.urlencode({"state": "opened", "in": "title", "search": title})
        found = [
            i
            for i in self.call("GET", self._project(f"issues?{q}")) or []
            if i.get("title") == title
        ]
        if found:
            iid = found[0]["iid"]
            self.call("PUT", self._project(f"issues/{iid}"), {"description": body})
            say(f"updated issue #{iid}")
            return
        made = self.call("POST", self._project("issues"), {"title": title, "description": body})
        say(f"opened issue #{made.get('iid') if isinstance(made, dict) else '?'}: {title}")


# =========================================================================== helpers


def say(text: str) -> None:
    print(f"[forkpatch-ci] {text}", file=sys.stderr)


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except OSError as exc:
        raise ForgeError(f"cannot read the body {path}: {exc.strerror}") from None


def _json_list(raw: str, what: str) -> list[dict[str, Any]]:
    try:
        data = json.loads(raw or "[]")
    except ValueError:
        raise ForgeError(f"{what} printed something that is not JSON: {raw[:60]!r}") from None
    return [d for d in data if isinstance(d, dict)] if isinstance(data, list) else []


def _is_conflict_title(title: str, tag: str) -> bool:
    return title.startswith("forkpatch: ") and title.endswith(f" conflicts with {tag}")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="forge.py")
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("check")
    prev = sub.add_parser("previous")
    prev.add_argument("--branch", required=True)
    prev.add_argument("--tag", required=True)
    pull = sub.add_parser("pull")
    for name in ("--branch", "--base", "--title", "--body-file"):
        pull.add_argument(name, required=True)
    issue = sub.add_parser("issue")
    for name in ("--title", "--body-file"):
        issue.add_argument(name, required=True)
    args = parser.parse_args(argv)
    where = platform()
    forge: GitHub | GitLab
    if where == "github":
        forge = GitHub()
    elif where == "gitlab":
        forge = GitLab()
    else:
        say(f"error: no CI platform (FORKPATCH_CI_PLATFORM={where!r}): set github or gitlab")
        return 1
    try:
        if args.cmd == "check":
            forge.check()
        elif args.cmd == "previous":
            sys.stdout.write(forge.previous(args.branch, args.tag))
        elif args.cmd == "pull":
            forge.pull(args.branch, args.base, args.title, args.body_file)
        else:
            forge.issue(args.title, args.body_file)
    except ForgeError as exc:
        if args.cmd == "previous":
            say(f"warning: cannot read the open change ({exc}); stages done before run again")
            return 0
        say(f"error: {exc}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
