"""Where the console may connect to, and the secrets it sends there.

Settings documents (a cluster's telemetry and scheduler) are shown to every viewer and kept in
the audit trail, so they never hold a secret: they name one by reference, ``{"env": NAME}``
(an environment variable whose name starts with a configured prefix) or ``{"file": NAME}`` (a
file inside one configured directory). A free path or an inline value is refused: either would
let whoever edits the settings read, or send away, anything the server can read.

URLs the console connects to (telemetry servers, webhooks) are http(s) with a host, and a site
may limit the hosts. Plain Python: the caller passes the site's settings.
"""

from __future__ import annotations

import os
import re
import ssl
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

ENV_NAME = re.compile(r"^[A-Z_][A-Z0-9_]*$")
FILE_NAME = re.compile(r"^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$")
REDACTED = "(redacted)"
# Keys that hold a secret wherever they appear in a settings document.
SECRET_KEYS = frozenset({"password", "token", "secret", "api_key", "private_key"})


class SecretUnavailable(Exception):
    """A reference that cannot be read; the message names the reference, never a value."""


@dataclass(frozen=True)
class SecretStore:
    """Where references point: variables named ``env_prefix…``, files inside ``directory``
    (empty: no file references)."""

    env_prefix: str = "RC_SECRET_"
    directory: str = ""
    environ: Mapping[str, str] = field(default_factory=lambda: os.environ, repr=False)

    def problem(self, ref: object) -> str | None:
        """What is wrong with a reference as written (None: nothing)."""
        if not isinstance(ref, dict) or not is_reference(ref):
            return 'name the secret by reference: {"env": NAME} or {"file": NAME}'
        if "env" in ref:
            name = ref["env"]
            if not isinstance(name, str) or not ENV_NAME.match(name):
                return "the variable name must be upper case letters, digits and _"
            if not self.env_prefix or not name.startswith(self.env_prefix):
                return f"the variable must start with {self.env_prefix or '(no prefix is set)'}"
            return None
        name = ref["file"]
        if not self.directory:
            return "file references need SECRETS_DIR to be set"
        if not isinstance(name, str) or not FILE_NAME.match(name) or ".." in name.split("/"):
            return "a file name under SECRETS_DIR is expected (no absolute path, no ..)"
        try:
            self._path(name)
        except SecretUnavailable as exc:
            return str(exc)
        return None

    def read(self, ref: object) -> str:
        """The secret a valid reference names, stripped of surrounding white space."""
        problem = self.problem(ref)
        if problem:
            raise SecretUnavailable(problem)
        assert isinstance(ref, dict)  # noqa: S101  # problem() checked it
        if "env" in ref:
            value = self.environ.get(ref["env"])
            if not value:
                raise SecretUnavailable(f"environment variable {ref['env']} is not set")
            return value.strip()
        path = self._path(ref["file"])
        try:
            return path.read_text().strip()
        except OSError as exc:
            reason = f"secret file {ref['file']} cannot be read ({exc.strerror})"
            raise SecretUnavailable(reason) from None

    def path(self, ref: object) -> Path:
        """Where a valid ``{"file": NAME}`` reference points, for a program that reads the file
        itself (ssh's key and known_hosts)."""
        problem = self.problem(ref)
        if problem:
            raise SecretUnavailable(problem)
        if not isinstance(ref, dict) or "file" not in ref:
            raise SecretUnavailable('a file is needed here: {"file": NAME}')
        return self._path(ref["file"])

    def _path(self, name: str) -> Path:
        root = Path(self.directory).resolve()
        # Resolved, so a symlink inside the directory that points out of it is caught too.
        path = (root / name).resolve()
        if not path.is_relative_to(root) or path == root:
            raise SecretUnavailable(f"secret file {name} resolves outside SECRETS_DIR")
        return path


def is_reference(value: object) -> bool:
    return isinstance(value, dict) and len(value) == 1 and ("env" in value or "file" in value)


def secret_key_problems(document: Any, where: str, store: SecretStore) -> list[str]:
    """Every secret in a settings document, at any depth, that is not a valid reference; every
    ``…_file`` key (a free path) too."""
    problems: list[str] = []
    if isinstance(document, dict):
        for key, value in document.items():
            path = f"{where}.{key}" if where else str(key)
            if str(key).endswith("_file") or key in ("identity", "known_hosts"):
                problems.append(
                    f"{path}: a free path is not accepted; name a secret by reference "
                    '({"file": NAME} under SECRETS_DIR, or {"env": NAME})'
                )
            elif key in SECRET_KEYS:
                if is_reference(value):
                    problem = store.problem(value)
                    if problem:
                        problems.append(f"{path}: {problem}")
                else:
                    problems.append(
                        f"{path}: an inline secret is not accepted (settings are shown to "
                        'every viewer); use {"env": NAME} or {"file": NAME}'
                    )
            else:
                problems.extend(secret_key_problems(value, path, store))
    elif isinstance(document, list):
        for index, value in enumerate(document):
            problems.extend(secret_key_problems(value, f"{where}[{index}]", store))
    return problems


def redacted(document: Any) -> Any:
    """The document with any secret that is not a reference (one stored before references
    were required) replaced, and passwords in URLs masked: what viewers are shown."""
    if isinstance(document, dict):
        return {
            key: (
                REDACTED
                if (key in SECRET_KEYS or str(key).endswith("_file")) and not is_reference(value)
                else redacted(value)
            )
            for key, value in document.items()
        }
    if isinstance(document, list):
        return [redacted(value) for value in document]
    if isinstance(document, str) and "://" in document:
        return redacted_url(document)
    return document


def redacted_url(url: str) -> str:
    """A URL with its user and password, if any, masked (the rest is kept)."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return parts._replace(netloc=f"{REDACTED}@{parts.netloc.rpartition('@')[2]}").geturl()


def url_problem(url: object, allowed_hosts: Sequence[str]) -> str | None:
    """What is wrong with a URL the console would connect to (None: nothing)."""
    if not isinstance(url, str) or not url.strip():
        return "must be a URL"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018  # a bad port raises here
    except ValueError as exc:
        return f"not a URL ({exc})"
    if parts.scheme not in ("http", "https"):
        return f"the scheme must be http or https, not {parts.scheme or '(none)'!r}"
    if not parts.hostname:
        return "no host"
    if "@" in parts.netloc:
        return "credentials do not belong in the URL (they would be shown and logged)"
    if not host_allowed(parts.hostname, allowed_hosts):
        return f"host {parts.hostname} is not in OUTBOUND_ALLOWED_HOSTS"
    return None


def url_host(url: str) -> str:
    """``host[:port]`` of a URL, without any user or password: what logs and messages name."""
    parts = urlsplit(url)
    try:
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        port = ""
    return f"{parts.hostname or ''}{port}"


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


# Redirects are errors, not followed: urllib would carry our headers (an Authorization) and
# body on to wherever one points, past the outbound allowlist.
NO_REDIRECTS = urllib.request.build_opener(_NoRedirects)


def opener_trusting(ca_pem: str) -> urllib.request.OpenerDirector:
    """An opener that follows no redirect and trusts only ``ca_pem`` (PEM text) for HTTPS:
    a site's own certificate authority. ``ValueError`` when the text holds no certificate."""
    try:
        context = ssl.create_default_context(cadata=ca_pem)
    except (ssl.SSLError, ValueError) as exc:
        raise ValueError(f"the CA is not a PEM certificate ({exc})") from exc
    return urllib.request.build_opener(_NoRedirects, urllib.request.HTTPSHandler(context=context))


def host_allowed(host: str, allowed_hosts: Sequence[str]) -> bool:
    """Empty: any host. Otherwise an exact name, or ``*.example.org`` for its sub-domains."""
    if not allowed_hosts:
        return True
    host = host.lower().rstrip(".")
    for allowed in (a.strip().lower().rstrip(".") for a in allowed_hosts):
        if allowed.startswith("*.") and host.endswith(allowed[1:]):
            return True
        if host == allowed:
            return True
    return False
