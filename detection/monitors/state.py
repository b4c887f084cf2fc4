"""The detectors' state as a monitor stores it, to and from JSON: the progress tracker, the
checkpoint state, the loss trend and the throughput history."""

from __future__ import annotations

import math
from datetime import datetime

from detection.core.checkpoints import CheckpointState
from detection.core.detectors.divergence import LossTrend
from detection.core.detectors.hang import ProgressTracker
from detection.core.detectors.straggler import ThroughputHistory

from ..models import AttemptMonitor


def _tracker(
    monitor: AttemptMonitor,
    started_at: datetime | None = None,
    earlier_startup_seconds: float | None = None,
) -> ProgressTracker:
    data = monitor.progress or {}
    # Derived from the attempt each time: a job seen pending starts its grace when it runs.
    start = started_at or monitor.attempt.started_at or monitor.attempt.first_seen_at
    return ProgressTracker(
        started_at=start,
        earlier_startup_seconds=earlier_startup_seconds,
        last_step=data.get("last_step"),
        first_progress_at=_time(data.get("first_progress_at")),
        node_event_at=_time(data.get("node_event_at")),
        last_progress_at=_time(data.get("last_progress_at")),
        interval_seconds=data.get("interval_seconds"),
        reports=data.get("reports", 0),
        checkpoint_since=_time(data.get("checkpoint_since")),
        pause=data.get("pause", ""),
        pause_ended_at=_time(data.get("pause_ended_at")),
        gpus_idle_since=_time(data.get("gpus_idle_since")),
        last_line=data.get("last_line", ""),
    )


# What else the progress document holds, kept when the tracker is stored.
_NOT_TRACKER = ("loss", "checkpoint")


def _checkpoint(monitor: AttemptMonitor) -> CheckpointState:
    return CheckpointState.from_json((monitor.progress or {}).get("checkpoint"))


def _store_checkpoint(monitor: AttemptMonitor, state: CheckpointState) -> None:
    if state == CheckpointState():
        return
    monitor.progress["checkpoint"] = state.as_json()
    monitor.checkpoint_step = state.saved_step
    monitor.checkpoint_at = state.saved_at


def _store_tracker(monitor: AttemptMonitor, tracker: ProgressTracker) -> None:
    kept = {k: v for k, v in (monitor.progress or {}).items() if k in _NOT_TRACKER and v}
    monitor.progress = {
        **kept,
        "last_step": tracker.last_step,
        "first_progress_at": _iso(tracker.first_progress_at),
        "node_event_at": _iso(tracker.node_event_at),
        "last_progress_at": _iso(tracker.last_progress_at),
        "interval_seconds": tracker.interval_seconds,
        "reports": tracker.reports,
        "checkpoint_since": _iso(tracker.checkpoint_since),
        "pause": tracker.pause,
        "pause_ended_at": _iso(tracker.pause_ended_at),
        "gpus_idle_since": _iso(tracker.gpus_idle_since),
        "last_line": tracker.last_line,
    }
    monitor.last_step = tracker.last_step
    monitor.last_progress_at = tracker.last_progress_at


def _loss(monitor: AttemptMonitor) -> tuple[LossTrend, dict[str, str]]:
    data = (monitor.progress or {}).get("loss") or {}
    numbers = {k: float(v) for k, v in data.items() if k in _LOSS_FLOATS and v is not None}
    trend = LossTrend(
        readings=int(data.get("readings", 0)),
        peak_at=data.get("peak_at"),
        since_spike=int(data.get("since_spike", 0)),
        **numbers,
    )
    return trend, dict(data.get("peak_line") or {})


_LOSS_FLOATS = ("lowest", "baseline", "peak", "last")


def _store_loss(monitor: AttemptMonitor, trend: LossTrend, peak: dict[str, str]) -> None:
    if not trend.readings:
        return
    stored = {name: _finite(getattr(trend, name)) for name in _LOSS_FLOATS}
    monitor.progress["loss"] = {
        **stored,
        "readings": trend.readings,
        "peak_at": trend.peak_at,
        "since_spike": trend.since_spike,
        "peak_line": peak,
    }


def _finite(value: float | None) -> float | None:
    # JSON has no infinity; an unset bound is stored as null and read back as the default.
    return value if value is not None and math.isfinite(value) else None


def _history(monitor: AttemptMonitor) -> ThroughputHistory:
    data = monitor.throughput or {}
    times = tuple(datetime.fromisoformat(t) for t in data.get("times", ()))
    throttled = tuple(
        (str(host), datetime.fromisoformat(since), str(why))
        for host, since, why in data.get("throttled", ())
    )
    return ThroughputHistory(
        values=tuple(data.get("values", ())),
        times=times,
        throttled=throttled,
        prior=data.get("prior"),
    )


def _store_history(monitor: AttemptMonitor, history: ThroughputHistory) -> None:
    monitor.throughput = {
        "values": list(history.values),
        "times": [t.isoformat() for t in history.times],
        **(
            {"throttled": [[h, s.isoformat(), w] for h, s, w in history.throttled]}
            if history.throttled
            else {}
        ),
        **({"prior": history.prior} if history.prior is not None else {}),
    }


def _time(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None
