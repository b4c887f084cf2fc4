"""A loopback HTTP server that replays Loki and VictoriaLogs answers in their documented shapes.

Loki and VictoriaLogs cannot be installed here, so the replay apps below behave like the parts
of their query APIs our clients use: they check the request (path, parameters, headers) and cut
pages from a recorded dataset by ``start`` (inclusive), ``end`` (exclusive) and ``limit``, in
time order with ties in a random order each time, as a real server may. Where each shape comes
from: ``tests/fixtures/http/SOURCES.md``.
"""

from __future__ import annotations

import calendar
import json
import random
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlsplit

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "http"
LOKI_MAX_ENTRIES = 5000
NDJSON = "application/stream+json; charset=utf-8"
T = TypeVar("T")


def fixture_bytes(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    params: dict[str, list[str]]
    headers: Message

    def param(self, name: str) -> str | None:
        values = self.params.get(name)
        return values[0] if values else None


@dataclass(frozen=True)
class Reply:
    status: int = 200
    body: bytes = b""
    content_type: str = "application/json"
    delay: float = 0.0
    drop: bool = False  # close the connection without answering


App = Callable[[Request], Reply]


def text_reply(status: int, text: str) -> Reply:
    return Reply(status, text.encode(), "text/plain; charset=utf-8")


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        request = Request("GET", parts.path, parse_qs(parts.query, True), self.headers)
        replay = self.server.replay
        replay.requests.append(request)
        reply = replay.app(request)
        time.sleep(reply.delay)
        if reply.drop:
            self.close_connection = True
            return
        self.send_response(reply.status)
        self.send_header("Content-Type", reply.content_type)
        self.send_header("Content-Length", str(len(reply.body)))
        self.end_headers()
        self.wfile.write(reply.body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    replay: ReplayServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that hung up on purpose (timeouts, oversized answers) is not news


class ReplayServer:
    """Serves ``app`` on 127.0.0.1 (a free port) from a thread; records every request."""

    def __init__(self) -> None:
        self.app: App = lambda request: text_reply(500, "no app set")
        self.requests: list[Request] = []
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.replay = self
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self._thread.start()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


# --- Loki ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class LokiEntry:
    ts: int
    labels: Mapping[str, str]
    line: str
    metadata: Mapping[str, str] = field(default_factory=dict)


def loki_entries_from_push(body: dict[str, Any]) -> list[LokiEntry]:
    """Entries of a push body: ``{"streams": [{"stream": {...}, "values": [[ns, line, md?]]}]}``."""
    return [
        LokiEntry(int(value[0]), stream["stream"], value[1], value[2] if len(value) > 2 else {})
        for stream in body["streams"]
        for value in stream["values"]
    ]


@dataclass
class LokiReplay:
    """``GET /loki/api/v1/query_range`` over ``entries`` for one expected LogQL query."""

    entries: list[LokiEntry]
    query: str
    headers: Mapping[str, str] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    shuffle_ties: bool = True
    rng: random.Random = field(default_factory=lambda: random.Random(7))

    def __call__(self, request: Request) -> Reply:
        error = self._refusal(request)
        if error is not None:
            return error
        start, end = int(request.param("start") or 0), int(request.param("end") or 0)
        limit = int(request.param("limit") or 100)
        chosen = [e for e in self.entries if start <= e.ts < end and self._matches(e)]
        page = _in_time_order(chosen, lambda e: e.ts, self.rng if self.shuffle_ties else None)
        categorize = request.headers.get("X-Loki-Response-Encoding-Flags") == "categorize-labels"
        return Reply(body=json.dumps(self._document(page[:limit], categorize)).encode())

    def _refusal(self, request: Request) -> Reply | None:
        if request.path != "/loki/api/v1/query_range":
            return text_reply(404, "404 page not found\n")
        for name, value in self.headers.items():
            if request.headers.get(name) != value:
                return text_reply(401, f"no org id or bad credentials ({name})\n")
        limit = request.param("limit") or "100"
        if int(limit) > LOKI_MAX_ENTRIES:
            return text_reply(
                400,
                "max entries limit per query exceeded, limit > max_entries_limit "
                f"({limit} > {LOKI_MAX_ENTRIES})\n",
            )
        if request.param("direction") != "forward" or request.param("query") != self.query:
            return text_reply(400, f"replay expects forward {self.query!r}\n")
        if (
            not (request.param("start") or "").isdigit()
            or not (request.param("end") or "").isdigit()
        ):
            return text_reply(400, "replay expects nanosecond start and end\n")
        return None

    def _matches(self, entry: LokiEntry) -> bool:
        labels = {**entry.labels, **entry.metadata}
        return all(labels.get(k) == v for k, v in re.findall(r'(\w+)\s*=\s*"([^"]*)"', self.query))

    def _document(self, page: list[LokiEntry], categorize: bool) -> dict[str, Any]:
        streams: dict[str, dict[str, Any]] = {}
        for e in page:
            labels = dict(e.labels) if categorize else {**e.labels, **e.metadata}
            stream = streams.setdefault(
                json.dumps(labels, sort_keys=True), {"stream": labels, "values": []}
            )
            extra = [{"structuredMetadata": dict(e.metadata)} if e.metadata else {}]
            stream["values"].append([str(e.ts), e.line, *(extra if categorize else [])])
        data: dict[str, Any] = {"resultType": "streams", "result": list(streams.values())}
        if categorize:
            data["encodingFlags"] = ["categorize-labels"]
        data["stats"] = json.loads(fixture_bytes("loki/stats_empty.json"))
        doc: dict[str, Any] = {"status": "success", "data": data}
        if self.warnings:
            doc["warnings"] = list(self.warnings)
        return doc


# --- VictoriaLogs ---------------------------------------------------------------------------

_PIPES = re.compile(r"^(?P<filter>.*) \| sort by \(_time\) \| limit (?P<limit>\d+)$")
_TIME = re.compile(r"^(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:\.(\d+))?Z$")


def rfc3339_ns(text: str) -> int:
    """The replay's own RFC3339 (UTC) parser, independent of the client's."""
    match = _TIME.match(text)
    if match is None:
        raise ValueError(text)
    *parts, fraction = match.groups()
    seconds = calendar.timegm(tuple(int(p) for p in parts) + (0, 0, 0))
    return seconds * 1_000_000_000 + int((fraction or "0").ljust(9, "0")[:9])


@dataclass
class VictoriaLogsReplay:
    """``/select/logsql/query`` over NDJSON ``rows`` for one expected LogsQL filter."""

    rows: list[bytes]
    filter: str
    headers: Mapping[str, str] = field(default_factory=dict)
    shuffle_ties: bool = True
    rng: random.Random = field(default_factory=lambda: random.Random(11))

    def __call__(self, request: Request) -> Reply:
        if request.path != "/select/logsql/query":
            return text_reply(400, f"unsupported path {request.path!r}\n")
        for name, value in self.headers.items():
            if request.headers.get(name) != value:
                return text_reply(401, f"missing {name} header\n")
        match = _PIPES.match(request.param("query") or "")
        if match is None or match["filter"] != self.filter:
            return text_reply(400, f"replay expects {self.filter!r} | sort by (_time) | limit N\n")
        try:
            start, end = (
                rfc3339_ns(request.param("start") or ""),
                rfc3339_ns(request.param("end") or ""),
            )
        except ValueError as exc:
            return text_reply(400, f"cannot parse start/end: {exc}\n")
        return Reply(body=self._page(start, end, int(match["limit"])), content_type=NDJSON)

    def _page(self, start: int, end: int, limit: int) -> bytes:
        timed = [(rfc3339_ns(json.loads(row)["_time"]), row) for row in self.rows]
        chosen = [(t, row) for t, row in timed if start <= t < end and self._matches(row)]
        page = _in_time_order(chosen, lambda pair: pair[0], self.rng if self.shuffle_ties else None)
        return b"".join(row + b"\n" for _, row in page[:limit])

    def _matches(self, row: bytes) -> bool:
        data = json.loads(row)
        stream = dict(re.findall(r'(\w+)="([^"]*)"', data.get("_stream", "")))
        fields = {**stream, **{k: v for k, v in data.items() if not k.startswith("_")}}
        return all(fields.get(k) == v for k, v in re.findall(r'(\w+):?="([^"]*)"', self.filter))


def _in_time_order(items: list[T], key: Callable[[T], int], rng: random.Random | None) -> list[T]:
    """Oldest first; entries sharing a timestamp in random order, as a real server may return."""
    tiebreak = {id(item): rng.random() if rng else i for i, item in enumerate(items)}
    return sorted(items, key=lambda item: (key(item), tiebreak[id(item)]))
