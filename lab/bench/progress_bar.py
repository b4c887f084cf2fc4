"""A simple progress bar on stderr: stages with weights, each reporting the fraction done."""

from __future__ import annotations

import time
from collections.abc import Callable

Write = Callable[[str], None]
Tick = Callable[[float], None]
WIDTH = 30


class ProgressBar:
    """One bar over weighted stages. On a terminal it redraws in place; elsewhere (a log
    file, a test) it writes a line each time another tenth of the whole is done."""

    def __init__(self, write: Write | None, tty: bool = False) -> None:
        self.write = write
        self.tty = tty
        self.weights: dict[str, float] = {}
        self.total = 1.0
        self.done = 0.0
        self.started = time.monotonic()
        self.last_tenth = -1
        self.last_draw = 0.0

    def plan(self, weights: dict[str, float]) -> None:
        """The stages to come, each weighted by about how long it takes."""
        self.weights = weights
        self.total = sum(weights.values()) or 1.0

    def stage(self, name: str) -> Tick:
        """The tick function of stage ``name``; call it with the stage's fraction done."""
        before, weight = self.done, self.weights.get(name, 0.0)
        self.done += weight

        def tick(fraction: float) -> None:
            self._draw(name, (before + weight * min(1.0, fraction)) / self.total)

        tick(0.0)
        return tick

    def finish(self) -> None:
        if self.write is not None and self.tty:
            self.write("\n")

    def _draw(self, name: str, fraction: float) -> None:
        if self.write is None:
            return
        now = time.monotonic()
        tenth = int(fraction * 10)
        if self.tty and now - self.last_draw < 0.2 and fraction < 1.0:
            return
        if not self.tty and tenth == self.last_tenth:
            return
        self.last_draw, self.last_tenth = now, tenth
        filled = int(fraction * WIDTH)
        bar = "#" * filled + "-" * (WIDTH - filled)
        text = f"[{bar}] {fraction:4.0%} {name:<10} {now - self.started:6.0f} s"
        self.write(("\r" + text) if self.tty else text + "\n")
