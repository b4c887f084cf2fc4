"""Checking the attempts: the running ones for hangs, slowdowns and divergence, the ended ones
for what the scheduler says of how they ended."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import QuerySet

from detection.core.config import DetectorConfig
from detection.core.detectors.scheduler import scheduler_interruption
from detection.core.gaps import SourceReading
from detection.core.scrape import ScrapeByHost
from fleet.models import Attempt, Cluster, Node

from .. import gaps, monitors
from ..anomalies import record_interruption
from ..models import Anomaly, AnomalyFamily, AttemptMonitor
from .common import (
    FAILED_JOB_STATES,
    RECENT_ENDINGS,
    UNHEALTHY_NODE_STATES,
    WHOLE,
    ScanSummary,
    Shard,
)
from .diagnosis import _explained_hang, _explained_slowdown


def _check_running_attempts(
    cluster: Cluster,
    now: datetime,
    config: DetectorConfig,
    scrape: ScrapeByHost,
    progress_sources: list[SourceReading],
    metrics: SourceReading | None,
    summary: ScanSummary,
    part: Shard = WHOLE,
    owned: Collection[int] | None = None,
) -> None:
    """Hangs, slowdowns and divergence of the (shard's) running attempts, once the cycle knows
    whether its telemetry is in a gap: then silence and slowness wait, and the gap is what is
    told. Shard 0 opens and closes gaps, from its own jobs (a fair sample: jobs hash evenly);
    the other shards follow the gaps it keeps. ``owned``: the shard's running attempts
    (``_owned_running``), None for a whole scan."""
    running = _running(cluster)
    if owned is not None:
        running = running.filter(pk__in=owned)
    interrupted = set(
        Anomaly.objects.filter(attempt__in=running, family=AnomalyFamily.INTERRUPTION).values_list(
            "attempt_id", flat=True
        )
    )
    # Unread metrics say nothing of the GPUs: an idle spell seen before is not carried over.
    metrics_down = metrics is not None and not metrics.reachable
    counts_from = gaps.silence_counts_from(cluster, [r.name for r in progress_sources])
    verdicts: list[tuple[Attempt, AttemptMonitor, monitors.Verdicts]] = []
    attempts = list(running.select_related("monitor"))
    summary.attempts_checked = len(attempts)
    startups = monitors.earlier_startups(attempts)
    for attempt in attempts:
        monitor = monitors.load(attempt)
        before = (monitor.progress, monitor.throughput)
        # Each attempt is shown its own nodes' GPUs only (the scrape is grouped by host once).
        utilisation = None if metrics_down else scrape.utilisation_of(attempt.nodes)
        found = monitors.check(
            monitor,
            attempt,
            now,
            config,
            utilisation,
            scrape.gpus_of(attempt.nodes),
            counts_from,
            startups.get(attempt.pk),
        )
        if (monitor.progress, monitor.throughput) != before:
            monitor.save()  # most scans change nothing for most running attempts
        verdicts.append((attempt, monitor, found))
    overdue = [v.overdue for _, _, v in verdicts if v.overdue is not None]
    if part.leads:
        logs_wait = gaps.update_gaps(
            cluster, now, progress_sources, metrics, overdue, len(verdicts)
        )
    else:
        # A gap shard 0 closed this cycle holds back this shard's verdicts a cycle or two.
        settle = timedelta(seconds=2 * config.poll_seconds)
        logs_wait = gaps.logs_waiting(cluster, [r.name for r in progress_sources], now, settle)
    for attempt, monitor, found in verdicts:
        hang, slow = found.hang, found.slow
        if logs_wait:
            # No signal is not no progress; what the GPUs say still counts.
            hang = None if found.silent else hang
            slow = None
        if attempt.pk in interrupted:
            hang = diverged = None
        else:
            diverged = found.diverged
        if hang is not None:
            hang = _explained_hang(attempt, monitor, hang, config)
        if slow is not None:
            slow = _explained_slowdown(attempt, monitor, slow, config)
        findings = [f for f in (hang, slow, diverged) if f is not None]
        if not findings:
            continue  # the common case: no transaction for an attempt with nothing to record
        with transaction.atomic():
            for finding in findings:
                summary.count(record_interruption(attempt, finding, now))


def _running(cluster: Cluster) -> QuerySet[Attempt]:
    return Attempt.objects.filter(cluster=cluster, state="RUNNING", ended_at__isnull=True)


def _owned_running(cluster: Cluster, part: Shard) -> dict[int, list[str]] | None:
    """The shard's running attempts and the nodes each runs on (None for a whole scan: every
    running attempt is its own), read once for the metrics and the checks."""
    if part.of == 1:
        return None
    return {
        pk: list(nodes or ())
        for pk, job_id, nodes in _running(cluster).values_list("pk", "job_id", "nodes")
        if part.owns(job_id)
    }


def _check_ended_attempts(cluster: Cluster, now: datetime, summary: ScanSummary) -> None:
    """The scheduler's own word: an attempt that ended FAILED, NODE_FAIL, TIMEOUT ... is an
    interruption even when no log line said why."""
    ended = (
        Attempt.objects.filter(
            cluster=cluster, state__in=FAILED_JOB_STATES, ended_at__gte=now - RECENT_ENDINGS
        )
        .exclude(anomalies__family=AnomalyFamily.INTERRUPTION)
        .order_by("ended_at")
    )
    down = set(
        Node.objects.filter(cluster=cluster, state__in=UNHEALTHY_NODE_STATES).values_list(
            "name", flat=True
        )
    )
    for attempt in ended[:500]:
        ended_as = scheduler_interruption(
            attempt.job_id,
            attempt.state,
            at=attempt.ended_at or attempt.first_seen_at,
            reason=attempt.reason,
            exit_code=attempt.exit_code,
            nodes=attempt.nodes,
            unhealthy_nodes=down,
        )
        with transaction.atomic():
            summary.count(record_interruption(attempt, ended_as, now))
