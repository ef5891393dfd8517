"""Keeping credentials out of everything forkpatch writes or prints.

Two kinds of protection, applied together by :func:`redact`:

- **by position**: a password or token where a credential is expected is hidden
  whatever its length: the user-info part of a URL (``https://user:TOKEN@host``,
  ``https://TOKEN@host``), ``Authorization:`` header values, ``password=...``.
- **by value**: a known secret (e.g. ``TWINE_PASSWORD``) is hidden wherever it
  appears, but only when it is at least :data:`MIN_SECRET_LENGTH` characters
  long. Replacing a one-letter password everywhere would turn every ``e`` of the
  output into ``****`` and so tell anyone which letter it is; a short secret is
  still hidden in every credential position.

Fork URLs with credentials are refused where they would be stored
(:func:`check_url`): series.yaml, provenance and reports never hold one.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit

REDACTED = "****"
#: Secrets shorter than this are hidden only in credential positions, never by value.
MIN_SECRET_LENGTH = 8

# scheme://user:password@ (any scheme) and scheme://token@ for http(s), where a bare
# user name is how GitHub/GitLab tokens are passed.
# The password runs to the *last* "@" of the authority: a password may hold a raw "@".
# The scheme starts where no scheme character is before it: tried at every position of
# a long word, the pattern would cost the square of its length.
_URL_PASSWORD = re.compile(
    r"(?P<head>(?<![a-zA-Z0-9+.-])[a-zA-Z][a-zA-Z0-9+.-]*://[^/@\s:]*:)[^/?#\s]*@"
)
_HTTP_USER = re.compile(r"(?P<head>https?://)(?!\*\*\*\*@)[^/?#\s:]+@", re.IGNORECASE)
# A credential passed in a URL's query (GitLab's ?private_token=, ?access_token=,
# signed URLs' sig=).
_SECRET_PARAM = re.compile(
    r"[A-Za-z_.-]*(?:token|password|passwd|secret|apikey|api_key|sig|signature|auth)"
    r"[A-Za-z_.-]*",
    re.IGNORECASE,
)
_URL_QUERY_SECRET = re.compile(
    r"(?P<head>[?&;](?:" + _SECRET_PARAM.pattern + r")=)[^&#;\s'\"]+", re.IGNORECASE
)
_AUTH_HEADER = re.compile(
    r"(?P<head>\b(?:proxy-)?authorization\s*[:=]\s*(?:(?:basic|bearer|token)\s+)?)\S+",
    re.IGNORECASE,
)
_PASSWORD_FIELD = re.compile(
    r"(?P<head>\b[A-Za-z_]*(?:password|passwd|token|secret)\s*[=:]\s*['\"]?)[^\s'\"&]+",
    re.IGNORECASE,
)


def hide_url_secrets(text: str) -> str:
    """``https://user:TOKEN@host`` -> ``https://user:****@host``; ``https://TOKEN@host`` too."""
    text = _URL_PASSWORD.sub(lambda m: m.group("head") + REDACTED + "@", text)
    text = _HTTP_USER.sub(lambda m: m.group("head") + REDACTED + "@", text)
    return _URL_QUERY_SECRET.sub(lambda m: m.group("head") + REDACTED, text)


def hide_credential_fields(text: str) -> str:
    """Authorization header values and ``password=...``-style fields, whatever their length."""
    text = _AUTH_HEADER.sub(lambda m: m.group("head") + REDACTED, text)
    return _PASSWORD_FIELD.sub(lambda m: m.group("head") + REDACTED, text)


# Environment variables whose value is a credential (TWINE_PASSWORD, GITHUB_TOKEN,
# CI_JOB_TOKEN, AWS_SECRET_ACCESS_KEY, PYPI_API_TOKEN, HF_TOKEN, NETRC_PASSWD...): a word
# of the name says so. Sockets and helper programs (SSH_AUTH_SOCK, GIT_ASKPASS) are not.
_SECRET_NAME = re.compile(
    r"(?:^|_)(?:PASSWORD|PASSWD|PASS|TOKEN|SECRET|APIKEY|API_KEY|ACCESS_KEY|PRIVATE_KEY|"
    r"CREDENTIALS?|AUTH_TOKEN|PAT)(?:_|$)",
    re.IGNORECASE,
)
_NOT_SECRET_NAME = re.compile(r"(?:_SOCK|_FILE|_PATH|_DIR|ASKPASS)$", re.IGNORECASE)


def is_secret_name(name: str) -> bool:
    """Whether an environment variable named ``name`` holds a credential."""
    return bool(_SECRET_NAME.search(name)) and not _NOT_SECRET_NAME.search(name)


def env_secrets(environ: Mapping[str, str] | None = None) -> list[str]:
    """The values of the credential variables of ``environ`` (default: this process's),
    for redaction by value wherever output or a report is shown or stored."""
    import os

    env = os.environ if environ is None else environ
    return [v for k, v in env.items() if v and is_secret_name(k)]


def hide_env_secrets(text: str) -> str:
    """``text`` with the values of the environment's credentials (from
    :data:`MIN_SECRET_LENGTH` characters) replaced: every terminal line goes through it."""
    for secret in sorted(set(env_secrets()), key=len, reverse=True):
        if len(secret) >= MIN_SECRET_LENGTH:
            text = text.replace(secret, REDACTED)
    return text


def redact(text: str, secrets: Iterable[str | None] = ()) -> str:
    """Hide credentials in ``text``: by position always, by value for long secrets.

    A secret shorter than :data:`MIN_SECRET_LENGTH` is hidden only where it is a
    whole value: after ``=`` or ``:`` up to the end of the token (``tok=s3cr3t``),
    never inside other words.
    """
    for secret in sorted({s for s in secrets if s}, key=len, reverse=True):
        if len(secret) >= MIN_SECRET_LENGTH:
            text = text.replace(secret, REDACTED)
        else:
            text = re.sub(
                r"(?<=[=:])(\s*)" + re.escape(secret) + r"(?=$|[\s,;&'\"])",
                lambda m: m.group(1) + REDACTED,
                text,
                flags=re.M,
            )
    return hide_credential_fields(hide_url_secrets(text))


def redact_argv(argv: Iterable[str], secrets: Iterable[str | None] = ()) -> list[str]:
    """A command line with every argument that *is* a secret replaced (any length)."""
    known = {s for s in secrets if s}
    return [REDACTED if a in known else a for a in argv]


def scrub(data: Any, secrets: Iterable[str | None] | None = None) -> Any:
    """A copy of JSON-like ``data`` with URL credentials hidden in every string, and the
    values of ``secrets`` (default: the environment's credentials, :func:`env_secrets`)."""
    known = sorted(
        {s for s in (env_secrets() if secrets is None else secrets) if s},
        key=len,
        reverse=True,
    )
    return _scrub(data, known)


def _scrub(data: Any, known: list[str]) -> Any:
    if isinstance(data, str):
        for secret in known:
            if len(secret) >= MIN_SECRET_LENGTH:
                data = data.replace(secret, REDACTED)
        return hide_url_secrets(data)
    if isinstance(data, dict):
        return {k: _scrub(v, known) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [_scrub(v, known) for v in data]
    return data


def url_has_credentials(url: str) -> bool:
    """Whether a git URL carries a password or a token.

    ``user:password@`` in any URL; a bare ``user@`` in an http(s) URL (a token
    passed as the user name). ``ssh://git@host`` and ``git@host:path`` carry
    only a user name, which is not a secret.
    """
    if "://" not in url:
        return False
    if _secret_params(url):
        return True
    try:
        parts = urlsplit(url)
    except ValueError:
        return "@" in url.split("://", 1)[1].split("/", 1)[0]
    if parts.password is not None:
        return True
    return parts.username is not None and parts.scheme.lower() in ("http", "https")


def _secret_params(url: str) -> list[str]:
    """The query parameters of ``url`` that carry a credential (``?private_token=...``)."""
    query = url.split("?", 1)[1].split("#", 1)[0] if "?" in url else ""
    names = [item.split("=", 1)[0] for item in re.split(r"[&;]", query) if "=" in item]
    return [n for n in names if _SECRET_PARAM.fullmatch(n)]


def strip_url_credentials(url: str) -> str:
    """``url`` without its password or token (the host and path stay)."""
    if not url_has_credentials(url):
        return url
    secret = set(_secret_params(url))
    if secret:
        base, _, query = url.partition("?")
        query, hash_, fragment = query.partition("#")
        kept = [i for i in re.split(r"[&;]", query) if i and i.split("=", 1)[0] not in secret]
        url = base + ("?" + "&".join(kept) if kept else "") + hash_ + fragment
        if not url_has_credentials(url):
            return url
    scheme, rest = url.split("://", 1)
    netloc, sep, path = rest.partition("/")
    host = netloc.rsplit("@", 1)[-1]
    if scheme.lower() not in ("http", "https"):
        user = netloc.rsplit("@", 1)[0].split(":", 1)[0]
        host = f"{user}@{host}" if user else host
    return f"{scheme}://{host}{sep}{path}"


CREDENTIAL_TIP = (
    "keep the URL plain and give git the credentials instead: a credential helper "
    "(`git config --global credential.helper store`, or your platform's helper), "
    "GIT_ASKPASS, or in CI an `insteadOf` rule from variables: GIT_CONFIG_COUNT=1 "
    "GIT_CONFIG_KEY_0=url.https://x-access-token:$TOKEN@github.com/.insteadOf "
    "GIT_CONFIG_VALUE_0=https://github.com/"
)
