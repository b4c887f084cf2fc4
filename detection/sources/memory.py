"""In-process sources: a producer in the same process (the simulated cluster run by the
benchmark or a test) hands lines and scrapes over directly, keeping the simulator's own clock.
The cursor contract is the same as every other source's."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from datetime import UTC, datetime
from itertools import islice
from typing import Any

from detection.core.telemetry import LogLine, MetricSample
from detection.sources.base import LogBatch
from detection.sources.prometheus import MetricScrape


class MemoryLogSource:
    """Lines pushed by a producer, numbered; the cursor is the number of the last one read.
    Keeps at most ``retain`` lines, so a consumer that falls far behind loses the oldest (and
    the batch says how many)."""

    def __init__(self, retain: int = 1_000_000, batch: int = 50_000) -> None:
        self.name = "in-process log lines"
        # Bounded, so a consumer that stops reading cannot grow memory without end.
        self._lines: deque[LogLine] = deque(maxlen=retain)
        self._pushed = 0
        self._batch = batch

    def push(self, lines: Iterable[LogLine]) -> None:
        for line in lines:
            self._lines.append(line)
            self._pushed += 1

    @property
    def pushed(self) -> int:
        """How many lines were pushed so far (the number of the newest)."""
        return self._pushed

    def since(self, number: int) -> list[LogLine]:
        """The lines pushed after line ``number`` that are still kept."""
        first_kept = self._pushed - len(self._lines)
        return list(islice(self._lines, max(0, number - first_kept), None))

    def fetch(self, cursor: dict[str, Any] | None, now: datetime) -> LogBatch:
        read = int((cursor or {}).get("read", 0))
        # Line numbers count every push, so a cursor keeps its meaning after old lines are dropped.
        first_kept = self._pushed - len(self._lines)
        lost = max(0, first_kept - read)
        start = max(read, first_kept) - first_kept
        end = min(len(self._lines), start + self._batch)
        # One pass: indexing a deque by position walks it from an end for every line.
        lines = tuple(islice(self._lines, start, end))
        notes = (f"{lost} lines were dropped before they were read",) if lost else ()
        return LogBatch(lines, {"read": first_kept + end}, more=end < len(self._lines), notes=notes)


class MemoryMetrics:
    """The latest scrape a producer published."""

    def __init__(self) -> None:
        self.name = "in-process metrics"
        self._samples: tuple[MetricSample, ...] = ()

    def publish(self, samples: Iterable[MetricSample]) -> None:
        self._samples = tuple(samples)

    def scrape(self, now: datetime | None = None) -> MetricScrape:
        # The simulator's clock, not the wall clock, when the caller gives no time.
        at = now or (self._samples[0].at if self._samples else datetime.now(UTC))
        return MetricScrape(at=at, samples=self._samples)
