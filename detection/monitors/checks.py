"""Running the hang, straggler and divergence detectors on a running attempt, from the state
its monitor keeps."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from detection.core.config import DetectorConfig
from detection.core.detectors.divergence import diverged, divergence_interruption
from detection.core.detectors.hang import SILENCE, check_hang, overdue_allowance
from detection.core.detectors.straggler import check_straggler, throttled_nodes
from detection.core.interruption import Interruption
from detection.core.scrape import GpuReadings
from fleet.models import Attempt

from ..models import AttemptMonitor
from .state import _history, _loss, _store_history, _store_tracker, _time, _tracker


@dataclass(frozen=True)
class Verdicts:
    """What the detectors say of a running attempt this cycle."""

    hang: Interruption | None
    slow: Interruption | None
    diverged: Interruption | None
    # The silence allowed (seconds) when the job is silent for longer: a telemetry gap is
    # decided from how many jobs are overdue at once.
    overdue: float | None

    @property
    def silent(self) -> bool:
        return self.hang is not None and self.hang.signature == SILENCE


def check(
    monitor: AttemptMonitor,
    attempt: Attempt,
    now: datetime,
    config: DetectorConfig,
    utilisation: list[float] | None,
    gpus: GpuReadings,
    silence_counts_from: datetime | None = None,
    earlier_startup_seconds: float | None = None,
) -> Verdicts:
    """Run the hang, straggler and divergence detectors on a running attempt.

    ``utilisation`` None: the metrics cannot be read, so nothing is known of the GPUs (an idle
    spell seen before is forgotten, not carried through the gap). ``silence_counts_from``: the
    end of the last telemetry gap of the logs; silence before it is not the job's.
    ``earlier_startup_seconds``: how long the workload's earlier attempts took to reach their
    first step (``earlier_startups``), which sets this one's start-up allowance."""
    tracker = _tracker(
        monitor, attempt.started_at or attempt.first_seen_at, earlier_startup_seconds
    )
    if utilisation is None:
        tracker = replace(tracker, gpus_idle_since=None)
    else:
        tracker = tracker.observe_gpus(now, utilisation, config.hang)
    _store_tracker(monitor, tracker)
    hang = check_hang(attempt.job_id, tracker, now, config.hang, silence_counts_from)
    history = _history(monitor)
    if utilisation is not None:  # metrics read: what they say of throttling is current
        history = history.note_throttled(now, throttled_nodes(gpus, attempt.nodes))
        _store_history(monitor, history)
    slow = check_straggler(
        attempt.job_id,
        history,
        gpus,
        attempt.nodes,
        config.straggler,
        now,
        node_event_at=tracker.node_event_at,
    )
    overdue = overdue_allowance(tracker, now, config.hang, silence_counts_from)
    return Verdicts(hang, slow, _divergence(monitor, attempt, now), overdue)


def earlier_startups(attempts: Sequence[Attempt]) -> dict[int, float]:
    """For each attempt not yet past its first step, the longest start-up (start to first
    progress) of its workload's earlier attempts, where any got that far: one query."""
    waiting = [a for a in attempts if not _has_progressed(a)]
    if not waiting:
        return {}
    earlier = AttemptMonitor.objects.filter(
        attempt__workload_id__in={a.workload_id for a in waiting},
        attempt__started_at__isnull=False,
        last_progress_at__isnull=False,
    ).values_list(
        "attempt__workload_id", "attempt__first_seen_at", "attempt__started_at", "progress"
    )
    startups_of: dict[int, list[tuple[datetime, float]]] = defaultdict(list)
    for workload_id, seen_at, started_at, progress in earlier:
        first = _time((progress or {}).get("first_progress_at"))
        if first is not None and started_at is not None and first >= started_at:
            startups_of[workload_id].append((seen_at, (first - started_at).total_seconds()))
    found = {}
    for attempt in waiting:
        startups = [
            took
            for seen, took in startups_of.get(attempt.workload_id, ())
            if seen < attempt.first_seen_at
        ]
        if startups:
            found[attempt.pk] = max(startups)
    return found


def _has_progressed(attempt: Attempt) -> bool:
    try:
        return attempt.monitor.last_progress_at is not None
    except AttemptMonitor.DoesNotExist:
        return False


def _divergence(monitor: AttemptMonitor, attempt: Attempt, now: datetime) -> Interruption | None:
    loss, peak = _loss(monitor)
    found = diverged(loss)
    if found is None:
        return None
    at = _time(peak.get("at")) or now
    return divergence_interruption(attempt.job_id, found, at, peak.get("text", ""))
