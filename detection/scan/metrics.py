"""Reading the metrics source: shard 0 keeps its cursor and records the GPU faults it shows;
the other shards take the samples alone."""

from __future__ import annotations

from datetime import datetime

from django.db import transaction

from detection.core.detectors.gpu_faults import detect_metric_faults, read_scrape
from detection.core.gaps import SourceReading
from detection.core.interruption import Interruption
from detection.core.telemetry import MetricSample
from detection.sources.base import SourceUnavailable
from detection.sources.config import ClusterSources
from fleet.models import Cluster

from ..anomalies import record_interruption
from ..models import SourceCursor
from .common import ScanSummary
from .reading import _mark_unhealthy
from .routing import _attempts_by_host, _attempts_of_jobs, attempt_at


def _read_metrics(
    cluster: Cluster, sources: ClusterSources, now: datetime, summary: ScanSummary
) -> tuple[list[MetricSample], SourceReading | None]:
    if sources.metrics is None:
        return [], None
    row, _ = SourceCursor.objects.get_or_create(cluster=cluster, source="metrics")
    try:
        scrape = sources.metrics.scrape(now)
    except SourceUnavailable as exc:
        _mark_unhealthy(row, exc, summary)
        return [], SourceReading("metrics", reachable=False, error=str(exc))
    current = read_scrape(scrape.samples)
    with transaction.atomic():
        for fault in detect_metric_faults(row.cursor.get("gpus", {}), current, now):
            _record_metric_fault(cluster, fault, now, summary)
        row.cursor, row.healthy, row.last_error, row.last_success_at = (
            {"gpus": current},
            True,
            "",
            now,
        )
        row.save()
    return list(scrape.samples), SourceReading("metrics", reachable=True)


def _scrape_metrics(
    sources: ClusterSources, now: datetime
) -> tuple[list[MetricSample], SourceReading | None]:
    """The samples alone, for a shard's own attempts: shard 0 keeps the metrics cursor and
    records the faults it shows, and says when the source is down."""
    if sources.metrics is None:
        return [], None
    try:
        return list(sources.metrics.scrape(now).samples), SourceReading("metrics", reachable=True)
    except SourceUnavailable as exc:
        return [], SourceReading("metrics", reachable=False, error=str(exc))


def _record_metric_fault(
    cluster: Cluster, fault: Interruption, now: datetime, summary: ScanSummary
) -> None:
    if fault.job_id:
        of_job = _attempts_of_jobs(cluster, [fault.job_id]).get(fault.job_id)
        attempts = [attempt_at(of_job, fault.first_evidence_at or now)] if of_job else []
    else:
        attempts = _attempts_by_host(cluster, now).get(fault.hosts[0], [])
    for attempt in attempts:
        summary.count(record_interruption(attempt, fault, now))
