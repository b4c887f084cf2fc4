"""A small HTTP GET client over ``urllib.request`` that turns every failure into
``SourceUnavailable`` with a message an operator can act on.

Shared by the Loki, VictoriaLogs and Prometheus clients. Bounded: one overall deadline per
request and a cap on the response size, so a slow or huge answer cannot hang or swamp a poll.
"""

from __future__ import annotations

import base64
import http.client
import json
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from detection.sources.base import SourceUnavailable
from fleet.core.outbound import NO_REDIRECTS, host_allowed, opener_trusting

# In chunks, so the size cap and the deadline are checked while the body arrives.
READ_CHUNK = 256 * 1024
ERROR_EXCERPT_CHARS = 300


@dataclass(frozen=True)
class HttpAuth:
    """Credentials sent with every request: HTTP basic auth or a bearer token, plus any extra
    headers (a tenant such as Loki's ``X-Scope-OrgID`` or VictoriaLogs' ``AccountID``)."""

    username: str | None = None
    password: str | None = None
    bearer_token: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)

    def as_headers(self) -> dict[str, str]:
        out = dict(self.headers)
        if self.bearer_token:
            out["Authorization"] = f"Bearer {self.bearer_token}"
        elif self.username is not None:
            # Basic only without a bearer token: a server reads a single Authorization header.
            pair = f"{self.username}:{self.password or ''}".encode()
            out["Authorization"] = "Basic " + base64.b64encode(pair).decode("ascii")
        return out


class ServerConfig(Protocol):
    """What every HTTP source's configuration says about reaching its server."""

    @property
    def base_url(self) -> str: ...
    @property
    def timeout(self) -> float: ...
    @property
    def auth(self) -> HttpAuth | None: ...
    @property
    def max_response_bytes(self) -> int: ...
    @property
    def allowed_hosts(self) -> tuple[str, ...]: ...
    @property
    def ca_pem(self) -> str | None: ...


class HttpClient:
    """GETs ``path`` under ``base_url`` and returns the body, or raises ``SourceUnavailable``."""

    @classmethod
    def for_config(cls, kind: str, config: ServerConfig) -> HttpClient:
        return cls(
            kind,
            config.base_url,
            timeout=config.timeout,
            auth=config.auth,
            max_response_bytes=config.max_response_bytes,
            allowed_hosts=config.allowed_hosts,
            ca_pem=config.ca_pem,
        )

    def __init__(
        self,
        kind: str,
        base_url: str,
        *,
        timeout: float = 10.0,
        auth: HttpAuth | None = None,
        max_response_bytes: int = 32 * 1024 * 1024,
        allowed_hosts: tuple[str, ...] = (),
        ca_pem: str | None = None,
    ) -> None:
        parsed = urllib.parse.urlsplit(base_url)
        # Checked once: a bad URL fails when the source is built, not at every poll.
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ValueError(f"{kind} URL must be http(s)://host[:port][/prefix], got {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self.name = f"{kind} at {self.base_url}"
        self.timeout = timeout
        self.headers = (auth or HttpAuth()).as_headers()
        self.max_response_bytes = max_response_bytes
        self.host = parsed.hostname or ""
        self.allowed_hosts = allowed_hosts  # empty: any host
        # A site's own CA, when its server's certificate is not signed by a public one.
        self.opener = opener_trusting(ca_pem) if ca_pem else NO_REDIRECTS

    def get(
        self,
        path: str,
        params: Sequence[tuple[str, str]],
        headers: Mapping[str, str] | None = None,
    ) -> bytes:
        # Checked at each request, not only when the settings were saved: the site's list may
        # have narrowed since.
        if not host_allowed(self.host, self.allowed_hosts):
            raise self.unavailable(f"host {self.host} is not in OUTBOUND_ALLOWED_HOSTS")
        url = f"{self.base_url}{path}?{urllib.parse.urlencode(params)}"
        # The scheme was checked in __init__: http or https only, never file: or custom ones.
        request = urllib.request.Request(url, headers={**self.headers, **(headers or {})})  # noqa: S310
        try:
            with self.opener.open(request, timeout=self.timeout) as response:
                return self._read(response)
        except urllib.error.HTTPError as exc:
            # HTTPError first: it is also a URLError, and its body says why the server refused.
            raise self.unavailable(_http_error_text(exc)) from exc
        except urllib.error.URLError as exc:
            raise self.unavailable(_connect_error_text(exc.reason, self.timeout)) from exc
        except TimeoutError as exc:
            # A timeout while reading the body arrives as itself, not wrapped in a URLError.
            raise self.unavailable(f"no answer within {self.timeout:g} s") from exc
        except (http.client.HTTPException, ConnectionError) as exc:
            raise self.unavailable(f"broken response ({type(exc).__name__}: {exc})") from exc
        except OSError as exc:
            raise self.unavailable(f"I/O error ({exc})") from exc

    def get_json(self, path: str, params: Sequence[tuple[str, str]]) -> Any:
        body = self.get(path, params)
        try:
            return json.loads(body)
        except ValueError as exc:
            reason = f"answered something that is not JSON: {excerpt(body)!r}"
            raise self.unavailable(reason) from exc

    def unavailable(self, reason: str) -> SourceUnavailable:
        return SourceUnavailable(self.name, reason)

    def _read(self, response: http.client.HTTPResponse) -> bytes:
        deadline = time.monotonic() + self.timeout  # overall, not per socket read
        chunks: list[bytes] = []
        size = 0
        while chunk := response.read(READ_CHUNK):
            size += len(chunk)
            if size > self.max_response_bytes:
                raise self.unavailable(
                    f"response larger than {self.max_response_bytes} bytes; lower the page limit"
                )
            if time.monotonic() > deadline:
                raise self.unavailable(f"response took longer than {self.timeout:g} s")
            chunks.append(chunk)
        return b"".join(chunks)


def excerpt(body: bytes | str, limit: int = ERROR_EXCERPT_CHARS) -> str:
    """The start of a body, printable, for an error message."""
    text = body.decode("utf-8", errors="replace") if isinstance(body, bytes) else body
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "..."


def _http_error_text(exc: urllib.error.HTTPError) -> str:
    try:
        # Bounded: an error page can be as large as any answer.
        body = exc.read(64 * 1024)
    except (OSError, http.client.HTTPException):
        body = b""
    detail = _error_detail(body)
    reason = exc.reason or http.client.responses.get(exc.code, "")
    if 300 <= exc.code < 400:
        detail = "redirects are not followed; set the URL to where it points"
    return f"HTTP {exc.code} {reason}" + (f": {detail}" if detail else "")


def _error_detail(body: bytes) -> str:
    """Prometheus says ``{"error": ...}``, Loki 3 ``{"message": ...}``, others plain text."""
    try:
        data = json.loads(body)
    except ValueError:
        return excerpt(body)
    if isinstance(data, dict):
        for key in ("error", "message"):
            if isinstance(data.get(key), str):
                kind = data.get("errorType")
                return excerpt(f"{kind}: {data[key]}" if isinstance(kind, str) else data[key])
    return excerpt(body)


def _connect_error_text(reason: object, timeout: float) -> str:
    if isinstance(reason, TimeoutError):
        return f"no answer within {timeout:g} s"
    if isinstance(reason, ConnectionRefusedError):
        return "connection refused (is the server running and the URL right?)"
    if isinstance(reason, socket.gaierror):
        return f"cannot resolve the host name ({reason})"
    return f"cannot connect ({reason})"
