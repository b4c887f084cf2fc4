"""Per-attempt detector state between scans: the progress tracker, the throughput history and
the log lines that matched a signature, kept as JSON on ``AttemptMonitor``. The decisions are
the pure detectors'; this module only loads, feeds and stores them."""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from django.db import connection
from django.utils import timezone

from detection.core.checkpoints import (
    CheckpointState,
    LastCheckpoint,
    Resume,
    parse_checkpoint,
    resume_verdict,
)
from detection.core.config import DetectorConfig
from detection.core.constants import Role
from detection.core.detectors.divergence import (
    LossTrend,
    diverged,
    divergence_interruption,
)
from detection.core.detectors.hang import (
    SILENCE,
    ProgressTracker,
    check_hang,
    overdue_allowance,
)
from detection.core.detectors.straggler import (
    ThroughputHistory,
    check_straggler,
    throttled_nodes,
)
from detection.core.interruption import Interruption
from detection.core.progress import parse_progress
from detection.core.telemetry import LogLine, MetricSample
from fleet import audit
from fleet.models import Attempt

from .models import AttemptMonitor

ACTOR = "system:detection"

# Lines kept per attempt for diagnosis: the matched lines (repeats beyond a few are only
# counted) and, for exceptions, the traceback lines before them.
MAX_KEPT_LINES = 400
MAX_REPEATS_KEPT = 8
TRACEBACK_LINES = 30


@dataclass(frozen=True)
class Observed:
    new_matches: bool


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


def load(attempt: Attempt) -> AttemptMonitor:
    """The attempt's monitor: the one already fetched with it (select_related), or the stored
    one, or a new one."""
    try:
        return attempt.monitor
    except AttemptMonitor.DoesNotExist:
        monitor, _ = AttemptMonitor.objects.get_or_create(
            attempt=attempt,
            defaults={"throughput": _seeded_throughput([attempt]).get(attempt.pk, {})},
        )
        return monitor


def load_many(attempts: Sequence[Attempt]) -> dict[int, AttemptMonitor]:
    """The monitors of ``attempts`` by attempt id, in two queries however many there are
    (three when some are new), each tied to its attempt so reading it costs no query."""
    wanted = [attempt.pk for attempt in attempts]
    found = {m.attempt_id: m for m in AttemptMonitor.objects.filter(attempt_id__in=wanted)}
    missing = [attempt for attempt in attempts if attempt.pk not in found]
    if missing:
        # The scan lease keeps other writers out; ignoring conflicts only makes a race harmless.
        seeded = _seeded_throughput(missing)
        AttemptMonitor.objects.bulk_create(
            [AttemptMonitor(attempt=a, throughput=seeded.get(a.pk, {})) for a in missing],
            ignore_conflicts=True,
        )
        new = AttemptMonitor.objects.filter(attempt_id__in=[a.pk for a in missing])
        found.update({m.attempt_id: m for m in new})
    for attempt in attempts:
        found[attempt.pk].attempt = attempt
    return found


def _seeded_throughput(attempts: Sequence[Attempt]) -> dict[int, dict[str, Any]]:
    """For new attempts of workloads that ran before, the previous attempt's median
    throughput as their prior (one query for all of them)."""
    workloads = {a.workload_id for a in attempts}
    new = {a.pk for a in attempts}
    earlier = (
        AttemptMonitor.objects.filter(attempt__workload_id__in=workloads)
        .exclude(attempt_id__in=new)
        .order_by("attempt__first_seen_at", "attempt_id")
        .values_list("attempt__workload_id", "throughput")
    )
    prior: dict[int, float] = {}
    for workload_id, data in earlier:
        values = (data or {}).get("values") or ()
        if values:  # the latest attempt that reported any throughput
            prior[workload_id] = statistics.median(values)
    return {
        a.pk: {"values": [], "times": [], "prior": prior[a.workload_id]}
        for a in attempts
        if a.workload_id in prior
    }


# What ``observe`` changes; saved together in one statement per chunk of monitors.
OBSERVED_FIELDS = (
    "progress",
    "throughput",
    "matched_lines",
    "lines_seen",
    "last_step",
    "last_progress_at",
    "checkpoint_step",
    "checkpoint_at",
    "resume",
    "resume_summary",
    "updated_at",
)


def save_many(monitors: Iterable[AttemptMonitor]) -> None:
    """Store what ``observe`` changed in the given (stored) monitors, in bulk.

    An upsert on the primary key writes a chunk of rows in one statement; Django's
    ``bulk_update`` would build a CASE expression per field and row, which costs more than
    the detectors themselves."""
    rows = list(monitors)
    stamp = timezone.now()
    for monitor in rows:
        monitor.updated_at = stamp  # bulk writes skip auto_now
    # MySQL upserts on any unique key it meets and takes no target; SQLite and PostgreSQL do.
    target = ["id"] if connection.features.supports_update_conflicts_with_target else None
    AttemptMonitor.objects.bulk_create(
        rows,
        batch_size=BULK_ROWS,
        update_conflicts=True,
        unique_fields=target,
        update_fields=OBSERVED_FIELDS,
    )


# Rows per statement: keeps its size and parameter count bounded.
BULK_ROWS = 500


def observe(monitor: AttemptMonitor, lines: Sequence[LogLine], config: DetectorConfig) -> Observed:
    """Feed an attempt's new lines to its progress tracker and keep the lines that matched."""
    tracker = _tracker(monitor)
    history = _history(monitor)
    loss, peak = _loss(monitor)
    checkpoint = _checkpoint(monitor)
    reported_before = tracker.reports > 0
    for line in lines:
        progress = parse_progress(line.text, config.progress_pattern)
        if progress is None:
            event = parse_checkpoint(line.text)
            if event is not None:
                tracker = tracker.observe_checkpoint(line.at, event)
                checkpoint = checkpoint.observe(line.at, event)
            continue
        tracker = tracker.observe(line.at, progress, line.text, config.hang.smoothing)
        checkpoint = checkpoint.observe_progress(line.at)
        if progress.throughput is not None and tracker.last_progress_at == line.at:
            history = history.add(line.at, progress.throughput, config.straggler)
        if progress.loss is not None and tracker.last_progress_at == line.at:
            before = loss.peak_at
            # Where the peak was: its step, or the reading's number when the format has none.
            at = progress.step if progress.step is not None else loss.readings + 1
            loss = loss.add(progress.loss, at, progress.step)
            if loss.peak_at != before:
                peak = {"at": line.at.isoformat(), "text": line.text[:2000]}
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


def check(
    monitor: AttemptMonitor,
    attempt: Attempt,
    now: datetime,
    config: DetectorConfig,
    utilisation: list[float] | None,
    samples: Iterable[MetricSample],
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
        history = history.note_throttled(now, throttled_nodes(samples, attempt.nodes))
        _store_history(monitor, history)
    slow = check_straggler(attempt.job_id, history, samples, attempt.nodes, config.straggler, now)
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


def _check_resume(monitor: AttemptMonitor, state: CheckpointState) -> None:
    """A restarted attempt that did not resume from the workload's last checkpoint is flagged
    (and audited): the work since that checkpoint is being done again."""
    attempt = monitor.attempt
    last = last_checkpoint_before(attempt)
    if last is None:
        return
    verdict = resume_verdict(last, state)
    if verdict is None:
        return
    monitor.resume, monitor.resume_summary = verdict.resume.value, verdict.summary[:200]
    if verdict.resume is not Resume.RESUMED:
        audit.record(
            ACTOR,
            "attempt.not_resumed",
            attempt,
            cluster=attempt.cluster,
            workload=attempt.workload,
            attempt=attempt,
            payload={
                "resume": verdict.resume.value,
                "summary": verdict.summary,
                "last_checkpoint_step": last.step,
            },
        )


def last_checkpoint_before(attempt: Attempt) -> LastCheckpoint | None:
    """The newest checkpoint written by an earlier attempt of the attempt's workload, when the
    attempt restarts a failed one (after a completed attempt it is a new run)."""
    earlier = Attempt.objects.filter(
        workload_id=attempt.workload_id, first_seen_at__lte=attempt.first_seen_at
    ).exclude(pk=attempt.pk)
    previous = earlier.order_by("-first_seen_at", "-pk").values_list("state", flat=True).first()
    if previous is None or previous == "COMPLETED":
        return None
    row = (
        AttemptMonitor.objects.filter(
            attempt__workload_id=attempt.workload_id, checkpoint_at__isnull=False
        )
        .exclude(attempt_id=attempt.pk)
        .filter(attempt__first_seen_at__lte=attempt.first_seen_at)
        .order_by("-checkpoint_at")
        .values("checkpoint_step", "checkpoint_at", "progress")
        .first()
    )
    if row is None or row["checkpoint_step"] is None or row["checkpoint_at"] is None:
        return None
    path = ((row["progress"] or {}).get("checkpoint") or {}).get("saved_path", "")
    return LastCheckpoint(row["checkpoint_step"], row["checkpoint_at"], path)


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
