"""Forward paging by nanosecond time cursor, shared by the Loki and VictoriaLogs clients.

Both servers answer "the first ``limit`` entries with ``start <= time < end``, oldest first". A
page that is full may end in the middle of a group of entries sharing one timestamp, so the
cursor keeps that timestamp (the next query starts there, inclusive) plus a count of the entries
already returned at it, keyed by a digest of (time, stream, line). The next page skips exactly
those, and asks for that many more entries so the skipped ones cannot crowd out new ones.

Cursor (JSON): ``{"v": 1, "start_ns": "<ns since epoch>", "seen": {"<digest>": <count>}}``.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from string import Template
from typing import Any

from detection.core.telemetry import LogLine
from detection.sources.base import LogBatch, check_job_id, job_id_from_filename

CURSOR_VERSION = 1
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
NS_PER_US = 1000


@dataclass(frozen=True)
class Entry:
    """One log entry as a server returned it, reduced to what de-duplication and lines need."""

    ts_ns: int
    stream: str
    text: str
    job_id: str | None = None
    host: str | None = None
    truncated: bool = False  # the text was cut at the line cap

    def digest(self) -> str:
        key = f"{self.ts_ns}\x00{self.stream}\x00{self.text}".encode("utf-8", "replace")
        return hashlib.blake2b(key, digest_size=12).hexdigest()

    def to_line(self) -> LogLine:
        return LogLine(
            at=ns_to_datetime(self.ts_ns), text=self.text, job_id=self.job_id, host=self.host
        )


@dataclass(frozen=True)
class Page:
    """What one query returned: its entries (any order) and the server's warnings."""

    entries: Sequence[Entry]
    warnings: tuple[str, ...] = ()


# (start_ns inclusive, end_ns exclusive, limit) -> Page; raises SourceUnavailable.
PageQuery = Callable[[int, int, int], Page]


@dataclass(frozen=True)
class PageLimits:
    """Bounds on one fetch, and where a first fetch starts.

    ``page_limit`` entries per request (the servers' cap is ``server_cap``, 5000 in Loki), at
    most ``max_pages`` requests or ``max_bytes`` of text per fetch. ``late_arrival`` is how long
    the cursor waits for lines that reach the server late (a shipper's batching) before moving
    past a quiet stretch; ``max_window`` caps one query's time range (Loki refuses over 721 h).
    """

    page_limit: int = 1000
    max_pages: int = 5
    max_bytes: int = 8 * 1024 * 1024
    server_cap: int = 5000
    initial_lookback: timedelta = timedelta(hours=1)
    late_arrival: timedelta = timedelta(minutes=2)
    max_window: timedelta = timedelta(hours=24)

    def __post_init__(self) -> None:
        if not 0 < self.page_limit <= self.server_cap:
            raise ValueError(f"page_limit must be 1..{self.server_cap}, got {self.page_limit}")
        if self.max_pages < 1 or self.max_bytes < 1:
            raise ValueError("max_pages and max_bytes must be positive")


@dataclass(frozen=True)
class LabelNames:
    """Which labels (Loki) or fields (VictoriaLogs) carry the job id, the host and the file name.

    Sites differ, so each is a list tried in order; the first present wins. When no job-id label
    is present, the job id comes from the file name (``slurm-1234.out`` -> ``"1234"``).
    """

    job_id: tuple[str, ...] = ("slurm_job_id", "job_id", "jobid")
    host: tuple[str, ...] = ("host", "hostname", "node")
    filename: tuple[str, ...] = ("filename",)
    filename_regex: str | None = None

    def job_of(self, labels: Mapping[str, str]) -> str | None:
        found = _first(labels, self.job_id)
        if found is None and (path := _first(labels, self.filename)):
            found = job_id_from_filename(path, self.filename_regex)
        return found

    def host_of(self, labels: Mapping[str, str]) -> str | None:
        return _first(labels, self.host)


@dataclass
class _Cursor:
    start_ns: int
    seen: Counter[str] = field(default_factory=Counter)

    @classmethod
    def load(cls, cursor: Mapping[str, Any] | None, now: datetime, lookback: timedelta) -> _Cursor:
        if cursor is None:
            return cls(datetime_to_ns(now - lookback))
        try:
            if cursor["v"] != CURSOR_VERSION:
                raise ValueError(f"version {cursor['v']!r}")
            seen = Counter({str(k): int(n) for k, n in dict(cursor.get("seen", {})).items()})
            return cls(int(cursor["start_ns"]), seen)
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"malformed log cursor {cursor!r}: {exc}") from exc

    def dump(self) -> dict[str, Any]:
        return {"v": CURSOR_VERSION, "start_ns": str(self.start_ns), "seen": dict(self.seen)}

    def unseen(self, entries: Iterable[Entry], end_ns: int) -> list[Entry]:
        """Entries in range that were not already returned at the boundary timestamp."""
        budget = Counter(self.seen)
        fresh = []
        for entry in entries:
            if not self.start_ns <= entry.ts_ns < end_ns:
                continue  # a server that ignores start/end must not make us repeat or skip
            if entry.ts_ns == self.start_ns and budget[digest := entry.digest()] > 0:
                budget[digest] -= 1
                continue
            fresh.append(entry)
        return fresh

    def after(self, fresh: Sequence[Entry]) -> _Cursor:
        if not fresh:
            return self
        last = fresh[-1].ts_ns
        at_last = Counter(e.digest() for e in fresh if e.ts_ns == last)
        return _Cursor(last, self.seen + at_last if last == self.start_ns else at_last)

    def settled(self, floor_ns: int) -> _Cursor:
        # Every line returned so far is older than floor_ns, so nothing needs remembering.
        return _Cursor(floor_ns) if floor_ns > self.start_ns else self


def fetch_forward(
    query: PageQuery, cursor: Mapping[str, Any] | None, now: datetime, limits: PageLimits
) -> LogBatch:
    """Read forward from ``cursor`` up to ``now`` in pages, never returning an entry twice."""
    state = _Cursor.load(cursor, now, limits.initial_lookback)
    now_ns = datetime_to_ns(now)
    end_ns = min(now_ns, state.start_ns + _ns(limits.max_window))
    out = _Collected()
    if end_ns <= state.start_ns:  # "now" is not past the cursor (a clock step back): wait
        return out.batch(state, more=False)
    for _ in range(limits.max_pages):
        limit = min(limits.page_limit + sum(state.seen.values()), limits.server_cap)
        page = query(state.start_ns, end_ns, limit)
        fresh = sorted(state.unseen(page.entries, end_ns), key=_order)
        out.notes.extend(w for w in page.warnings if w not in out.notes)
        if len(page.entries) < limit:  # the server had no more in [start, end)
            out.add(fresh)
            floor = min(end_ns, now_ns - _ns(limits.late_arrival))
            return out.batch(state.after(fresh).settled(floor), more=end_ns < now_ns)
        state = _full_page(state, fresh, out) if fresh else _skip_tie(state, out)
        if out.size >= limits.max_bytes:
            break
    return out.batch(state, more=True)


def _full_page(state: _Cursor, fresh: list[Entry], out: _Collected) -> _Cursor:
    """A full page may end inside a group of entries sharing its last timestamp. Hold that
    group back for the next page, which starts there, so the same cursor always yields the same
    lines; only a group that fills the whole page is returned in part and remembered."""
    last = fresh[-1].ts_ns
    before = [e for e in fresh if e.ts_ns < last]
    if before:
        out.add(before)
        return _Cursor(last)
    out.add(fresh)
    return state.after(fresh)


@dataclass
class _Collected:
    lines: list[LogLine] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    truncated: int = 0
    size: int = 0

    def add(self, fresh: Sequence[Entry]) -> None:
        self.lines.extend(e.to_line() for e in fresh)
        self.size += sum(len(e.text) for e in fresh)
        self.truncated += sum(e.truncated for e in fresh)

    def batch(self, state: _Cursor, more: bool) -> LogBatch:
        return LogBatch(tuple(self.lines), state.dump(), more, self.truncated, tuple(self.notes))


def _skip_tie(state: _Cursor, out: _Collected) -> _Cursor:
    # More entries share one nanosecond than the server will return in one page: the rest
    # cannot be reached by time paging, so move past them and say so rather than loop.
    out.notes.append(
        f"more than {sum(state.seen.values())} entries share timestamp {state.start_ns} ns; "
        "the rest of them were skipped"
    )
    return _Cursor(state.start_ns + 1)


def render_query(template: str, job_id: str | None) -> str:
    """Fill ``$job_id`` in a query template; other ``$`` signs (regexes) are left alone."""
    if job_id is None:
        return template
    return Template(template).safe_substitute(job_id=check_job_id(job_id))


def ns_to_datetime(ns: int) -> datetime:
    return EPOCH + timedelta(microseconds=ns // NS_PER_US)


def datetime_to_ns(value: datetime) -> int:
    if value.tzinfo is None:
        raise ValueError(f"naive datetime {value!r}: pass an aware time (UTC)")
    return (value - EPOCH) // timedelta(microseconds=1) * NS_PER_US


def _ns(delta: timedelta) -> int:
    return delta // timedelta(microseconds=1) * NS_PER_US


def _order(entry: Entry) -> tuple[int, str, str]:
    return (entry.ts_ns, entry.stream, entry.text)


def _first(labels: Mapping[str, str], names: Iterable[str]) -> str | None:
    for name in names:
        value = labels.get(name)
        if value:
            return value
    return None
