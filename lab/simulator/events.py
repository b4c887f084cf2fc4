"""Simulated time and the heap of due events that moves it forward."""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable
from datetime import datetime, timedelta

Handler = Callable[..., None]


def seeded(seed: int, stream: str) -> random.Random:
    """A random stream of its own for one part of the simulation, fixed by the seed.

    Separate streams keep parts independent: an action on one job does not shift the draws of
    every other. (Simulation, not cryptography.)
    """
    # A string seed hashes the same in every process (unlike hash()), so runs repeat exactly.
    return random.Random(f"{seed}:{stream}")  # noqa: S311


class Clock:
    """Seconds since the simulation started, and the datetime they stand for."""

    __slots__ = ("start", "t")

    def __init__(self, start: datetime) -> None:
        self.start = start
        self.t = 0.0

    def at(self, t: float) -> datetime:
        return self.start + timedelta(seconds=t)

    @property
    def now(self) -> datetime:
        return self.at(self.t)


class EventQueue:
    """Events ordered by time, then by the order they were pushed (so ties are deterministic)."""

    __slots__ = ("_heap", "_seq")

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Handler, tuple[object, ...]]] = []
        self._seq = 0

    def push(self, t: float, handler: Handler, *args: object) -> None:
        # The sequence breaks ties, so two handlers (which do not compare) are never compared.
        self._seq += 1
        heapq.heappush(self._heap, (t, self._seq, handler, args))

    def pop_due(self, until: float) -> tuple[float, Handler, tuple[object, ...]] | None:
        """The next event at or before ``until``, removed from the queue; None if there is none."""
        # Peek first: an event past ``until`` stays queued for the next advance.
        if not self._heap or self._heap[0][0] > until:
            return None
        t, _, handler, args = heapq.heappop(self._heap)
        return t, handler, args

    def __len__(self) -> int:
        return len(self._heap)
