"""Telemetry gaps of a cluster's sources: opened once when a source is unreachable, silent or
late, closed when it delivers again, each with its audit entry (which notifies) and a live
update of the cluster's pages. The only writer of ``TelemetryGap`` rows."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Q

from detection.core.gaps import SourceReading, gap_reason
from fleet import audit, events
from fleet.models import Cluster

from .models import TelemetryGap

ACTOR = "system:detection"


def silence_counts_from(cluster: Cluster, sources: list[str]) -> datetime | None:
    """When the last gap of these sources ended: silence before it is the gap's, not a job's."""
    return (
        TelemetryGap.objects.filter(cluster=cluster, source__in=sources, ended_at__isnull=False)
        .order_by("-ended_at")
        .values_list("ended_at", flat=True)
        .first()
    )


def logs_waiting(cluster: Cluster, sources: list[str], now: datetime, settle: timedelta) -> bool:
    """What ``update_gaps`` told the scan that keeps the gaps, for a scan that only follows
    them: a log source is in a gap, or its gap ended within ``settle``."""
    return (
        TelemetryGap.objects.filter(cluster=cluster, source__in=sources)
        .filter(Q(ended_at__isnull=True) | Q(ended_at__gte=now - settle))
        .exists()
    )


def update_gaps(
    cluster: Cluster,
    now: datetime,
    log_readings: list[SourceReading],
    metrics_reading: SourceReading | None,
    overdue_silences: list[float],
    running_jobs: int,
) -> bool:
    """Open, keep or close each source's gap from what this cycle read. True when the logs'
    verdicts must wait: a log source is in a gap, or its gap ended in this very cycle (its
    silence is not yet behind the jobs)."""
    logs_wait = False
    for reading in log_readings:
        reason = gap_reason(reading, now, overdue_silences)
        gap, closed = _settle(cluster, reading, reason, now, running_jobs)
        logs_wait |= gap is not None or closed
    if metrics_reading is not None:
        # Metrics feed no silence verdict of their own: only an unreachable source is a gap.
        _settle(cluster, metrics_reading, gap_reason(metrics_reading, now, []), now, running_jobs)
    return logs_wait


def _settle(
    cluster: Cluster, reading: SourceReading, reason: str | None, now: datetime, jobs: int
) -> tuple[TelemetryGap | None, bool]:
    """The source's open gap after this cycle, and whether one closed."""
    with transaction.atomic():
        gap = (
            TelemetryGap.objects.select_for_update()
            .filter(cluster=cluster, source=reading.name, ended_at__isnull=True)
            .first()
        )
        if gap is None and reason is None:
            return None, False
        if gap is None:
            return _open(cluster, reading.name, reason or "", now, jobs), False
        if reason is None:
            _close(gap, now)
            return None, True
        if jobs > gap.suspended_jobs:
            gap.suspended_jobs = jobs
            gap.save(update_fields=["suspended_jobs"])
        return gap, False


def _open(cluster: Cluster, source: str, reason: str, now: datetime, jobs: int) -> TelemetryGap:
    gap = TelemetryGap.objects.create(
        cluster=cluster, source=source, reason=reason, started_at=now, suspended_jobs=jobs
    )
    audit.record(
        ACTOR,
        "telemetry.gap_opened",
        gap,
        cluster=cluster,
        payload={"source": source, "reason": reason, "suspended_jobs": jobs},
        at=now,
    )
    events.send_cluster_changed(cluster.pk, "telemetry")
    return gap


def _close(gap: TelemetryGap, now: datetime) -> None:
    gap.ended_at = now
    gap.save(update_fields=["ended_at"])
    audit.record(
        ACTOR,
        "telemetry.gap_closed",
        gap,
        cluster=gap.cluster,
        payload={
            "source": gap.source,
            "reason": gap.reason,
            "seconds": round((now - gap.started_at).total_seconds()),
            "suspended_jobs": gap.suspended_jobs,
        },
        at=now,
    )
    events.send_cluster_changed(gap.cluster_id, "telemetry")
