"""What Loki and VictoriaLogs share as log sources: a server reached over HTTP, one query read
forward by time in pages (``paging``), a cursor that neither loses nor repeats an entry. Each
subclass says how to ask for one page and how to read the answer."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from detection.sources.base import LogBatch
from detection.sources.httpclient import HttpAuth, HttpClient
from detection.sources.paging import LabelNames, Page, PageLimits, fetch_forward, render_query


@dataclass(frozen=True)
class RemoteLogConfig:
    """How to reach the server and which lines to read. ``$job_id`` in ``query`` is replaced
    by ``job_id`` when given; ``labels`` names the labels or fields holding job id and host."""

    base_url: str
    query: str = '{job="slurm"}'
    job_id: str | None = None
    labels: LabelNames = field(default_factory=LabelNames)
    limits: PageLimits = field(default_factory=PageLimits)
    timeout: float = 10.0
    auth: HttpAuth | None = None
    max_response_bytes: int = 64 * 1024 * 1024
    allowed_hosts: tuple[str, ...] = ()  # the site's OUTBOUND_ALLOWED_HOSTS; empty: any
    ca_pem: str | None = None  # trust these CA certificates (PEM) instead of the system's


class RemoteLogSource:
    """Reads a query forward from a cursor; see ``paging`` for the cursor's shape."""

    kind = "remote"  # the source's name in errors and logs

    def __init__(self, config: RemoteLogConfig) -> None:
        self.config = config
        # Rendered once: a bad job id fails here, before any request is built from it.
        self.query = render_query(config.query, config.job_id)
        self.client = HttpClient.for_config(self.kind, config)

    @property
    def name(self) -> str:
        return self.client.name

    def fetch(self, cursor: dict[str, Any] | None, now: datetime) -> LogBatch:
        return fetch_forward(self._page, cursor, now, self.config.limits)

    def _page(self, start_ns: int, end_ns: int, limit: int) -> Page:
        body = self.client.get(*self.request(start_ns, end_ns, limit))
        try:
            return self.parse(body)
        except ValueError as exc:
            # Reported like an outage: the cursor stays put and the same page is asked for again.
            raise self.client.unavailable(f"answered an unexpected response: {exc}") from exc

    def request(
        self, start_ns: int, end_ns: int, limit: int
    ) -> tuple[str, list[tuple[str, str]], dict[str, str]]:
        """(path, query parameters, headers) of the request for one page."""
        raise NotImplementedError

    def parse(self, body: bytes) -> Page:
        """The entries of one page's answer; ``ValueError`` for anything malformed."""
        raise NotImplementedError
