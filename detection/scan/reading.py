"""Reading the log sources from their cursors, batch by batch, each batch stored in one
transaction with the cursor it advances; and adopting the lines that waited for their job."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from datetime import datetime

from django.db import transaction

from detection.core.config import DetectorConfig
from detection.core.gaps import SourceReading
from detection.core.telemetry import LogLine
from detection.sources.base import LogSource, SourceUnavailable
from fleet import audit
from fleet.models import Cluster

from .. import monitors
from ..models import PendingLines, SourceCursor
from .common import ACTOR, LATE_LINES, MAX_BATCHES_PER_SCAN, WHOLE, ScanSummary, Shard
from .diagnosis import _diagnose_from_logs
from .routing import _attempts_of_jobs, _route_lines

log = logging.getLogger(__name__)


def _read_log_source(
    cluster: Cluster,
    name: str,
    source: LogSource,
    now: datetime,
    config: DetectorConfig,
    summary: ScanSummary,
    deadline: float | None = None,
    part: Shard = WHOLE,
) -> SourceReading:
    # A new source is watched from now: its silence is measured from when we began to listen.
    row, _ = SourceCursor.objects.get_or_create(
        cluster=cluster, source=name, shard=part.number, defaults={"newest_line_at": now}
    )
    lines = 0
    for batch_number in range(MAX_BATCHES_PER_SCAN):
        # At least one batch per source per cycle, so a slow one cannot starve the others.
        if batch_number and deadline is not None and time.monotonic() >= deadline:
            summary.out_of_time = True
            break
        try:
            batch = source.fetch(row.cursor or None, now)
        except SourceUnavailable as exc:
            _mark_unhealthy(row, exc, summary)
            return SourceReading(name, reachable=False, error=str(exc))
        with transaction.atomic():
            _process_lines(cluster, batch.lines, now, config, summary, part)
            row.cursor, row.healthy, row.last_error, row.last_success_at = (
                batch.cursor,
                True,
                "",
                now,
            )
            row.newest_line_at = max(
                [line.at for line in batch.lines] + [row.newest_line_at or now - LATE_LINES]
            )
            row.save()
        summary.lines += len(batch.lines)
        lines += len(batch.lines)
        if not batch.more:
            break
    return SourceReading(
        name, reachable=True, newest_line_at=row.newest_line_at, lines_this_cycle=lines
    )


def _mark_unhealthy(row: SourceCursor, error: SourceUnavailable, summary: ScanSummary) -> None:
    """Say what happened and carry on with the other sources; the cursor is kept as it was."""
    log.warning("telemetry source %s unavailable: %s", row.source, error)
    summary.failed_sources.append(str(error))
    if row.healthy or row.last_error != str(error):
        SourceCursor.objects.filter(pk=row.pk).update(healthy=False, last_error=str(error))
        audit.record(
            ACTOR, "source.unavailable", row, cluster=row.cluster, payload={"error": str(error)}
        )


def _process_lines(
    cluster: Cluster,
    lines: Sequence[LogLine],
    now: datetime,
    config: DetectorConfig,
    summary: ScanSummary,
    part: Shard = WHOLE,
) -> None:
    by_attempt, orphans = _route_lines(cluster, lines, now, part)
    for job_id, job_lines in orphans.items():
        PendingLines.hold(cluster, job_id, job_lines)
    # One load and one bulk save for the whole batch, in the batch's transaction.
    kept = monitors.load_many([attempt for attempt, _ in by_attempt])
    for attempt, attempt_lines in by_attempt:
        monitor = kept[attempt.pk]
        update = monitors.observe(monitor, attempt_lines, config)
        if update.new_matches:
            _diagnose_from_logs(attempt, monitor, now, config, summary)
    monitors.save_many(kept.values())


def _adopt_pending_lines(
    cluster: Cluster, now: datetime, config: DetectorConfig, summary: ScanSummary, part: Shard
) -> None:
    """Lines that arrived before the scheduler reported their job join its attempt once it is
    known; lines of a job never reported within LATE_LINES are dropped (and said so). A shard
    adopts its own jobs' lines only: it is the one that held them."""
    pending = PendingLines.objects.filter(cluster=cluster)
    if not pending.exists():
        return
    job_ids = [j for j in pending.values_list("job_id", flat=True) if part.owns(j)]
    known = _attempts_of_jobs(cluster, job_ids)
    for job_id in job_ids:
        with transaction.atomic():
            lines = PendingLines.take(cluster, job_id)
            if job_id in known:
                _process_lines(cluster, lines, now, config, summary, part)
            elif lines and now - lines[0].at < LATE_LINES:
                PendingLines.hold(cluster, job_id, lines)
            else:
                log.warning(
                    "dropped %d lines of job %s: the scheduler never reported it",
                    len(lines),
                    job_id,
                )
