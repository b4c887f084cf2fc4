"""One detection cycle of a cluster: read each telemetry source from its cursor, route the
lines to the attempts they belong to, feed each attempt's detectors, and record what they found.

Every batch is stored in one transaction with the cursor it advances, so a restart neither loses
nor repeats evidence. A lease keeps two workers from scanning one cluster at once.

A large cluster's scan is split into shards (``DetectionSettings.scan_shards``), each a Celery
task with a lease of its own. A shard owns the jobs whose id hashes to it (``core.sharding``):
it reads every log source from a cursor of its own and keeps only its jobs' lines, so each line
reaches each of its attempts through exactly one shard, and each attempt's monitor has one
writer. Shard 0 also does the cluster's share that cannot be split: the metrics cursor and its
faults, telemetry gaps, the scheduler's endings and resolving what settled.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import Q

from detection.core.config import DetectorConfig
from detection.core.constants import DEFAULT_GPUS_PER_NODE, Role
from detection.core.context import DiagnosisContext
from detection.core.detectors.gpu_faults import detect_metric_faults, read_scrape
from detection.core.detectors.scheduler import scheduler_interruption
from detection.core.diagnosis import diagnose_lines
from detection.core.gaps import SourceReading
from detection.core.interruption import Evidence, HostOrigin, Interruption
from detection.core.sharding import shard_of
from detection.core.telemetry import Dcgm, LogLine, MetricSample
from detection.sources.base import LogSource, SourceUnavailable
from detection.sources.config import ClusterSources
from fleet import audit
from fleet.models import Attempt, Cluster, Node

from . import gaps, monitors
from .anomalies import Recorded, record_interruption, resolve_settled
from .models import (
    Anomaly,
    AnomalyFamily,
    AttemptMonitor,
    PendingLines,
    SourceCursor,
)
from .services import cluster_sources, detection_settings_of, scan_lease

log = logging.getLogger(__name__)
ACTOR = "system:detection"
# Lines of an attempt may arrive after the scheduler reports its end (slow shippers, buffers).
LATE_LINES = timedelta(minutes=15)
# How far a node's system-log line may fall outside an attempt's run and still be its own: the
# clocks of nodes and the scheduler differ a little, and unstamped lines carry their read time.
NODE_LINE_SLACK = timedelta(seconds=60)
# An ended attempt the scheduler calls a failure gets an anomaly if it ended this recently.
RECENT_ENDINGS = timedelta(days=1)
MAX_BATCHES_PER_SCAN = 10
FAILED_JOB_STATES = ("FAILED", "NODE_FAIL", "TIMEOUT", "OUT_OF_MEMORY", "PREEMPTED")
UNHEALTHY_NODE_STATES = ("DOWN", "DRAINED", "DRAINING")
NODE_LOG_SOURCES = ("node-logs",)


@dataclass(frozen=True)
class Shard:
    """One shard of a cluster's scan: it owns the jobs whose id hashes to ``number``."""

    number: int = 0
    of: int = 1

    def owns(self, job_id: str) -> bool:
        return shard_of(job_id, self.of) == self.number

    @property
    def leads(self) -> bool:
        """Shard 0 does the cluster-wide part of a scan."""
        return self.number == 0


WHOLE = Shard()


@dataclass
class ScanSummary:
    """What one scan of a cluster did."""

    lines: int = 0
    new_anomalies: int = 0
    updated_anomalies: int = 0
    resolved_anomalies: int = 0
    failed_sources: list[str] = field(default_factory=list)
    skipped: bool = False
    out_of_time: bool = False

    def count(self, recorded: tuple[Anomaly, Recorded]) -> None:
        _, outcome = recorded
        if outcome is Recorded.NEW:
            self.new_anomalies += 1
        elif outcome is Recorded.SHARPENED:
            self.updated_anomalies += 1

    def __str__(self) -> str:
        if self.skipped:
            return "skipped: another scan of this cluster is running"
        failed = f", sources down: {'; '.join(self.failed_sources)}" if self.failed_sources else ""
        late = ", time budget spent (reading on next cycle)" if self.out_of_time else ""
        return (
            f"{self.lines} lines, {self.new_anomalies} new anomalies, "
            f"{self.updated_anomalies} updated, {self.resolved_anomalies} resolved{failed}{late}"
        )


def scan_cluster(
    cluster: Cluster,
    now: datetime,
    sources: ClusterSources | None = None,
    deadline: float | None = None,
    shard: int = 0,
) -> ScanSummary:
    """One detection cycle (of one shard): read every source from its cursor, update detector
    state, check running attempts for hangs and slowdowns, and record what was found.

    Past ``deadline`` (``time.monotonic()``) each source stops after its first batch and the
    rest is read next cycle from the cursor, so a busy cluster cannot hold a worker for long.
    A shard beyond the cluster's shard count (the count was lowered) has nothing to do."""
    summary = ScanSummary()
    settings = detection_settings_of(cluster)
    part = Shard(shard, settings.scan_shards)
    if shard >= part.of:
        return summary
    with scan_lease(settings, part.number) as acquired:
        if not acquired:
            summary.skipped = True
            return summary
        config = settings.detector_config()
        sources = sources or cluster_sources(cluster)
        _adopt_pending_lines(cluster, now, config, summary, part)
        readings = [
            _read_log_source(cluster, name, source, now, config, summary, deadline, part)
            for name, source in sources.logs.items()
        ]
        if part.leads:
            samples, metrics = _read_metrics(cluster, sources, now, summary)
        else:
            samples, metrics = _scrape_metrics(sources, now)
        # Node logs carry no job's progress: their silence says nothing of a hang.
        progress = [r for r in readings if r.name not in NODE_LOG_SOURCES]
        _check_running_attempts(cluster, now, config, samples, progress, metrics, summary, part)
        if part.leads:
            _check_ended_attempts(cluster, now, summary)
            summary.resolved_anomalies = resolve_settled(cluster.pk, now)
    return summary


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


def _route_lines(
    cluster: Cluster, lines: Sequence[LogLine], now: datetime, part: Shard = WHOLE
) -> tuple[list[tuple[Attempt, list[LogLine]]], dict[str, list[LogLine]]]:
    """Each job line goes to the attempt of its job that produced it: the last one to start
    at or before the line's time (lines written after an attempt's end, before the next one
    starts, are its late lines). A node's system-log line goes to the attempts that ran on that
    node when it was written. Lines of jobs not reported yet wait in PendingLines. Of all
    that, a shard keeps what goes to its own jobs, and holds its own jobs' waiting lines."""
    job_ids = {line.job_id for line in lines if line.job_id}
    attempts_of = _attempts_of_jobs(cluster, job_ids)
    on_host = _attempts_by_host(cluster, now) if any(line.host for line in lines) else {}
    routed: dict[int, list[LogLine]] = defaultdict(list)
    attempts: dict[int, Attempt] = {}
    orphans: dict[str, list[LogLine]] = defaultdict(list)
    for line in lines:
        if line.job_id in attempts_of:
            targets = [attempt_at(attempts_of[line.job_id], line.at)]
        else:
            targets = _ran_on_host_at(on_host.get(line.host or "", []), line.at)
        if not targets and line.job_id and part.owns(line.job_id):
            orphans[line.job_id].append(line)
        for attempt in targets:
            if part.owns(attempt.job_id):
                attempts[attempt.pk] = attempt
                routed[attempt.pk].append(line)
    return [(attempts[pk], routed[pk]) for pk in routed], orphans


def attempt_at(attempts: Sequence[Attempt], at: datetime) -> Attempt:
    """Of one job's attempts (by attempt index), the one running at ``at``: the last to start
    at or before it. Not "the latest": when Slurm requeues a job itself, its new attempt may be
    recorded (pending) before the old one's last lines are read. Evidence older than every
    start (clocks apart) belongs to the first attempt."""
    chosen = attempts[0]
    for attempt in attempts:
        # Slurm reports start times in whole seconds, cut down: a line of that second counts.
        if attempt.started_at is not None and attempt.started_at <= at:
            chosen = attempt
    return chosen


def _attempts_of_jobs(cluster: Cluster, job_ids: Iterable[str]) -> dict[str, list[Attempt]]:
    found: dict[str, list[Attempt]] = defaultdict(list)
    for attempt in Attempt.objects.filter(cluster=cluster, job_id__in=list(job_ids)).order_by(
        "job_id", "attempt_index"
    ):
        found[attempt.job_id].append(attempt)
    return dict(found)


def _ran_on_host_at(attempts: Sequence[Attempt], at: datetime) -> list[Attempt]:
    """The attempts a node's line belongs to: those running on the node when it was written,
    else one that had just ended (a line stamped when it was read may trail the end a little).
    A kernel error minutes after an attempt ended is the next job's, not evidence against it."""
    running = [
        a
        for a in attempts
        if (a.started_at or a.first_seen_at) - NODE_LINE_SLACK <= at
        and (a.ended_at is None or at <= a.ended_at)
    ]
    if running:
        return running
    return [a for a in attempts if a.ended_at and a.ended_at < at <= a.ended_at + NODE_LINE_SLACK]


def _attempts_by_host(cluster: Cluster, now: datetime) -> dict[str, list[Attempt]]:
    recent = Attempt.objects.filter(cluster=cluster).filter(
        Q(ended_at__isnull=True) | Q(ended_at__gte=now - LATE_LINES)
    )
    by_host: dict[str, list[Attempt]] = defaultdict(list)
    for attempt in recent:
        for host in attempt.nodes:
            by_host[host].append(attempt)
    return by_host


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


def _diagnose_from_logs(
    attempt: Attempt,
    monitor: AttemptMonitor,
    now: datetime,
    config: DetectorConfig,
    summary: ScanSummary,
) -> None:
    found, evidence = _diagnose_kept(attempt, monitor, config)
    if not found.is_failure:
        return
    found = dataclasses.replace(
        found,
        first_evidence_at=min((e.at for e in evidence if e.at), default=now),
        occurrences=sum(
            1 for entry in monitor.matched_lines if entry.get("role") != Role.CONTEXT.value
        ),
    )
    summary.count(record_interruption(attempt, found, now))


def _explained_hang(
    attempt: Attempt, monitor: AttemptMonitor, hang: Interruption, config: DetectorConfig
) -> Interruption:
    """A silent job whose kept lines show a node-local event first (a link of one of its nodes
    went down) hangs because of that node: the hang is attributed to it."""
    if not monitor.matched_lines:
        return hang
    found, evidence = _diagnose_kept(attempt, monitor, config, silent=True)
    if not (found.is_failure and found.node_local and found.hosts):
        return hang
    return dataclasses.replace(
        found,
        kind=hang.kind,
        summary=f"{hang.summary}, after {found.summary[:1].lower()}{found.summary[1:]}",
        evidence=(*evidence, *hang.evidence),
        first_evidence_at=min(
            [e.at for e in evidence if e.at] + [hang.first_evidence_at or attempt.first_seen_at]
        ),
        job_id=hang.job_id,
    )


def _explained_slowdown(
    attempt: Attempt, monitor: AttemptMonitor, slow: Interruption, config: DetectorConfig
) -> Interruption:
    """A whole-job slowdown after a node-local event on one of its nodes (a link that flapped
    and came back at a lower rate, a CPU lockup) is that node's. With events on several nodes
    it stays the job's: the fabric, not a node, is then the likelier cause."""
    kept = monitor.matched_lines
    if slow.hosts or not kept:
        return slow
    scan = config.library.scan([entry["text"] for entry in kept], [entry["host"] for entry in kept])
    events = [g for g in scan.groups if g.role is Role.CONTEXT and g.implicates_node]
    hosts = {host for g in events for host in g.hosts} & set(attempt.nodes)
    if len(hosts) != 1:
        return slow
    (host,) = hosts
    event = next(g for g in events if host in g.hosts)
    line = kept[event.first_line - 1]
    return dataclasses.replace(
        slow,
        attribution=event.attribution,
        root_cause=f"straggler:{host}",
        summary=f"{slow.summary}, after an event on {host}: {event.description.rstrip('.')}",
        hosts=(host,),
        node_local=True,
        host_origins=((host, HostOrigin.STREAM),),
        evidence=(
            Evidence(
                at=datetime.fromisoformat(line["at"]),
                source="log",
                text=line["text"],
                host=host,
                signature=event.signature,
            ),
            *slow.evidence,
        ),
    )


def _diagnose_kept(
    attempt: Attempt, monitor: AttemptMonitor, config: DetectorConfig, *, silent: bool = False
) -> tuple[Interruption, tuple[Evidence, ...]]:
    """The diagnosis of the attempt's kept lines, its evidence numbered as the lines really
    were (the diagnosis numbers them within the kept excerpt)."""
    kept = monitor.matched_lines
    context = DiagnosisContext(nodes=tuple(attempt.nodes), tasks_per_node=_tasks_per_node(attempt))
    found = diagnose_lines(
        [entry["text"] for entry in kept],
        context,
        library=config.library,
        host_hints=[entry.get("host") for entry in kept],
        silent=silent,
    )
    evidence = tuple(
        _log_evidence(kept[item.line - 1], item.signature)
        for item in found.evidence
        if item.line is not None
    )
    return dataclasses.replace(found, evidence=evidence), evidence


def _log_evidence(entry: dict[str, Any], signature: str) -> Evidence:
    return Evidence(
        text=entry["text"],
        signature=signature,
        at=datetime.fromisoformat(entry["at"]),
        host=entry.get("host"),
        line=entry["seq"],
    )


def _tasks_per_node(attempt: Attempt) -> int:
    gpus = Node.objects.filter(
        cluster_id=attempt.cluster_id, name__in=attempt.nodes[:1]
    ).values_list("gpus", flat=True)
    return next(iter(gpus), 0) or DEFAULT_GPUS_PER_NODE


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


def _check_running_attempts(
    cluster: Cluster,
    now: datetime,
    config: DetectorConfig,
    samples: list[MetricSample],
    progress_sources: list[SourceReading],
    metrics: SourceReading | None,
    summary: ScanSummary,
    part: Shard = WHOLE,
) -> None:
    """Hangs, slowdowns and divergence of the (shard's) running attempts, once the cycle knows
    whether its telemetry is in a gap: then silence and slowness wait, and the gap is what is
    told. Shard 0 opens and closes gaps, from its own jobs (a fair sample: jobs hash evenly);
    the other shards follow the gaps it keeps."""
    running = Attempt.objects.filter(cluster=cluster, state="RUNNING", ended_at__isnull=True)
    if part.of > 1:
        owned = [a.pk for a in running.only("pk", "job_id") if part.owns(a.job_id)]
        running = running.filter(pk__in=owned)
    interrupted = set(
        Anomaly.objects.filter(attempt__in=running, family=AnomalyFamily.INTERRUPTION).values_list(
            "attempt_id", flat=True
        )
    )
    # Unread metrics say nothing of the GPUs: an idle spell seen before is not carried over.
    metrics_down = metrics is not None and not metrics.reachable
    by_host = _utilisation_by_host(samples)
    # Each attempt is shown its own nodes' samples only: the detectors compare its GPUs, and
    # scanning the whole cluster's samples per attempt would cost attempts x GPUs.
    samples_of: dict[str, list[MetricSample]] = defaultdict(list)
    for sample in samples:
        samples_of[sample.host].append(sample)
    counts_from = gaps.silence_counts_from(cluster, [r.name for r in progress_sources])
    verdicts: list[tuple[Attempt, AttemptMonitor, monitors.Verdicts]] = []
    attempts = list(running.select_related("monitor"))
    startups = monitors.earlier_startups(attempts)
    for attempt in attempts:
        monitor = monitors.load(attempt)
        before = (monitor.progress, monitor.throughput)
        utilisation = (
            None if metrics_down else [u for host in attempt.nodes for u in by_host.get(host, [])]
        )
        own = [sample for host in attempt.nodes for sample in samples_of.get(host, ())]
        found = monitors.check(
            monitor, attempt, now, config, utilisation, own, counts_from, startups.get(attempt.pk)
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


def _utilisation_by_host(samples: Iterable[MetricSample]) -> dict[str, list[float]]:
    by_host: dict[str, list[float]] = defaultdict(list)
    for sample in samples:
        if sample.name == Dcgm.GPU_UTIL:
            by_host[sample.host].append(sample.value)
    return by_host


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
