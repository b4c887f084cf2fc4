"""Feeding an attempt's new log lines to its detector state (progress, throughput, loss and
checkpoints) and keeping the lines that matched a signature, for diagnosis."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from detection.core.checkpoints import parse_checkpoint
from detection.core.config import DetectorConfig
from detection.core.constants import Role
from detection.core.detectors.hang import TrackedEvent
from detection.core.progress import Progress, parse_progress
from detection.core.telemetry import LogLine

from ..models import AttemptMonitor
from .resume import _check_resume
from .state import (
    _checkpoint,
    _history,
    _loss,
    _store_checkpoint,
    _store_history,
    _store_loss,
    _store_tracker,
    _tracker,
)

# Lines kept per attempt for diagnosis: the matched lines (repeats beyond a few are only
# counted) and, for exceptions, the traceback lines before them.
MAX_KEPT_LINES = 400
MAX_REPEATS_KEPT = 8
TRACEBACK_LINES = 30


@dataclass(frozen=True)
class Observed:
    new_matches: bool


def observe(monitor: AttemptMonitor, lines: Sequence[LogLine], config: DetectorConfig) -> Observed:
    """Feed an attempt's new lines to its progress tracker and keep the lines that matched."""
    tracker = _tracker(monitor)
    checkpoint = _checkpoint(monitor)
    reported_before = tracker.reports > 0
    # Each line read once; the detectors then take the scan's events of this attempt at once.
    events: list[TrackedEvent] = []
    for line in lines:
        progress = parse_progress(line.text, config.progress_pattern)
        if progress is not None:
            events.append((line.at, progress, line.text))
            checkpoint = checkpoint.observe_progress(line.at)
            continue
        event = parse_checkpoint(line.text)
        if event is not None:
            events.append((line.at, event, line.text))
            checkpoint = checkpoint.observe(line.at, event)
    tracker, current = tracker.observe_batch(events, config.hang.smoothing)
    # The reports progress stood at: their throughput and loss count.
    counted = [
        (at, report, text)
        for (at, report, text), now in zip(events, current, strict=True)
        if now and isinstance(report, Progress)
    ]
    history = _history(monitor).add_many(
        [(at, p.throughput) for at, p, _ in counted if p.throughput is not None], config.straggler
    )
    with_loss = [(at, p.loss, p.step, text) for at, p, text in counted if p.loss is not None]
    loss, peak = _loss(monitor)
    loss, moved = loss.add_many([(value, step) for _, value, step, _ in with_loss])
    if moved is not None:
        at, _, _, text = with_loss[moved]
        peak = {"at": at.isoformat(), "text": text[:2000]}
    new, node_event_at = _keep_matches(monitor, lines, config)
    if node_event_at is not None:
        tracker = tracker.observe_node_event(node_event_at)
    _store_tracker(monitor, tracker)
    _store_history(monitor, history)
    _store_loss(monitor, loss, peak)
    _store_checkpoint(monitor, checkpoint)
    if tracker.reports and not reported_before:
        # Its first progress: whatever it was going to load, it has loaded.
        _check_resume(monitor, checkpoint)
    monitor.lines_seen += len(lines)
    return Observed(new_matches=new)


def _keep_matches(
    monitor: AttemptMonitor, lines: Sequence[LogLine], config: DetectorConfig
) -> tuple[bool, datetime | None]:
    """Keep the lines that matched; whether any matters, and when the latest node-local
    event among them happened."""
    scan = config.library.scan([line.text for line in lines], [line.host for line in lines])
    wanted: dict[int, str] = {}
    node_events: list[datetime] = []
    for finding in scan.groups:
        # A node-local event alone (a link that went down) fails nothing, but it is kept: it
        # explains a hang or the failures that may follow.
        if finding.role is Role.CONTEXT and finding.implicates_node:
            node_events.append(lines[finding.line_numbers[-1] - 1].at)
        for number in finding.line_numbers[:MAX_REPEATS_KEPT]:
            wanted[number] = finding.role.value
        if finding.category.value == "application_error":
            start = max(1, finding.first_line - TRACEBACK_LINES)
            for number in range(start, finding.first_line):
                wanted.setdefault(number, "context")
    node_event_at = max(node_events, default=None)
    if not node_events and not any(role != Role.CONTEXT.value for role in wanted.values()):
        return False, None
    kept = list(monitor.matched_lines)
    for number in sorted(wanted)[: max(0, MAX_KEPT_LINES - len(kept))]:
        line = lines[number - 1]
        kept.append(
            {
                "seq": monitor.lines_seen + number,
                "at": line.at.isoformat(),
                "host": line.host,
                "text": line.text[:4000],
                "role": wanted[number],
            }
        )
    monitor.matched_lines = kept
    return True, node_event_at
