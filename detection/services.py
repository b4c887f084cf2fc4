"""Detection services: read a cluster's telemetry, keep each attempt's detector state, and record
anomalies. Every write happens here, each with its audit entry, in one transaction with the
source cursor it advances, so a restart neither loses nor repeats evidence."""

from __future__ import annotations

import logging
import re
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from recovery_console import audit, events
from recovery_console.models import Attempt, Cluster, Node

from . import monitoring
from .config import DetectorConfig
from .constants import Kind, Role
from .detectors.findings import Finding
from .detectors.metrics import detect_metric_faults, read_scrape
from .diagnosis import Diagnosis, DiagnosisContext, diagnose_lines
from .models import (
    Anomaly,
    AnomalyFamily,
    AttemptMonitor,
    DetectionSettings,
    PendingLines,
    SourceCursor,
)
from .sources.base import SourceUnavailable
from .sourcing import ClusterSources, build_sources

log = logging.getLogger(__name__)
_LINE_REFERENCE = re.compile(r" at line \d+")
ACTOR = "system:detection"
# Lines of an attempt may arrive after the scheduler reports its end (slow shippers, buffers).
LATE_LINES = timedelta(minutes=15)
# An ended attempt the scheduler calls a failure gets an anomaly if it ended this recently.
RECENT_ENDINGS = timedelta(days=1)
MAX_BATCHES_PER_SCAN = 10
SCAN_LEASE = timedelta(minutes=2)
FAILED_JOB_STATES = ("FAILED", "NODE_FAIL", "TIMEOUT", "OUT_OF_MEMORY", "PREEMPTED")


@dataclass
class ScanSummary:
    """What one scan of a cluster did."""

    lines: int = 0
    new_anomalies: int = 0
    updated_anomalies: int = 0
    failed_sources: list[str] = field(default_factory=list)
    skipped: bool = False

    def __str__(self) -> str:
        if self.skipped:
            return "skipped: another scan of this cluster is running"
        failed = f", sources down: {'; '.join(self.failed_sources)}" if self.failed_sources else ""
        return (
            f"{self.lines} lines, {self.new_anomalies} new anomalies, "
            f"{self.updated_anomalies} updated{failed}"
        )


def detection_settings_of(cluster: Cluster) -> DetectionSettings:
    settings, _ = DetectionSettings.objects.get_or_create(cluster=cluster)
    return settings


def custom_signatures_of(cluster_name: str) -> list[dict[str, Any]]:
    settings = DetectionSettings.objects.filter(cluster__name=cluster_name).first()
    return list(settings.signatures) if settings else []


@transaction.atomic
def update_detection_settings(actor: str, cluster: Cluster, **changes: Any) -> DetectionSettings:
    """Change detector settings at runtime (validated: a bad signature is refused with why)."""
    allowed = {"signatures", "progress_pattern", "hang", "straggler", "poll_seconds"}
    unknown = set(changes) - allowed
    if unknown:
        raise ValueError(f"not a detection setting: {', '.join(sorted(unknown))}")
    settings = DetectionSettings.objects.select_for_update().get(
        pk=detection_settings_of(cluster).pk
    )
    before = {name: getattr(settings, name) for name in changes}
    for name, value in changes.items():
        setattr(settings, name, value)
    settings.save()
    payload = {k: {"from": before[k], "to": v} for k, v in changes.items() if before[k] != v}
    audit.record(actor, "detection.settings_changed", settings, cluster=cluster, payload=payload)
    return settings


def scan_cluster(
    cluster: Cluster, now: datetime, sources: ClusterSources | None = None
) -> ScanSummary:
    """One detection cycle: read every source from its cursor, update detector state, check
    running attempts for hangs and slowdowns, and record what was found."""
    summary = ScanSummary()
    with _scan_lease(cluster) as acquired:
        if not acquired:
            summary.skipped = True
            return summary
        config = detection_settings_of(cluster).detector_config()
        sources = sources or build_sources(cluster)
        _adopt_pending_lines(cluster, now, config, summary)
        for name, source in sources.logs.items():
            _read_log_source(cluster, name, source, now, config, summary)
        samples = _read_metrics(cluster, sources, now, summary)
        _check_running_attempts(cluster, now, config, samples, summary)
        _check_ended_attempts(cluster, now, summary)
    return summary


@contextmanager
def _scan_lease(cluster: Cluster) -> Iterator[bool]:
    """A conditional update claims the cluster's scan; a crashed scan's lease runs out."""
    settings = detection_settings_of(cluster)
    wall = timezone.now()
    claimed = DetectionSettings.objects.filter(
        Q(scan_lease_until__isnull=True) | Q(scan_lease_until__lt=wall), pk=settings.pk
    ).update(scan_lease_until=wall + SCAN_LEASE)
    try:
        yield claimed == 1
    finally:
        if claimed:
            DetectionSettings.objects.filter(pk=settings.pk).update(scan_lease_until=None)


def _read_log_source(
    cluster: Cluster,
    name: str,
    source: Any,
    now: datetime,
    config: DetectorConfig,
    summary: ScanSummary,
) -> None:
    row, _ = SourceCursor.objects.get_or_create(cluster=cluster, source=name)
    for _ in range(MAX_BATCHES_PER_SCAN):
        try:
            batch = source.fetch(row.cursor or None, now)
        except SourceUnavailable as exc:
            _mark_unhealthy(row, exc, summary)
            return
        with transaction.atomic():
            _process_lines(cluster, batch.lines, now, config, summary)
            row.cursor, row.healthy, row.last_error, row.last_success_at = (
                batch.cursor,
                True,
                "",
                now,
            )
            row.save()
        summary.lines += len(batch.lines)
        if not batch.more:
            return


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
    lines: Sequence[Any],
    now: datetime,
    config: DetectorConfig,
    summary: ScanSummary,
) -> None:
    by_attempt, orphans = _route_lines(cluster, lines, now)
    for job_id, job_lines in orphans.items():
        PendingLines.hold(cluster, job_id, job_lines)
    for attempt, attempt_lines in by_attempt:
        monitor = monitoring.load(attempt)
        update = monitoring.observe(monitor, attempt_lines, config)
        monitor.save()
        if update.new_matches:
            _diagnose_from_logs(attempt, monitor, now, config, summary)


def _route_lines(
    cluster: Cluster, lines: Sequence[Any], now: datetime
) -> tuple[list[tuple[Attempt, list[Any]]], dict[str, list[Any]]]:
    """Each job line goes to the latest attempt of its job; a node's system-log line to the
    attempts running on that node. Lines of jobs not reported yet wait in PendingLines."""
    job_ids = {line.job_id for line in lines if line.job_id}
    latest = _latest_attempts(cluster, job_ids)
    on_host = _attempts_by_host(cluster, now) if any(line.host for line in lines) else {}
    routed: dict[int, list[Any]] = defaultdict(list)
    attempts: dict[int, Attempt] = {}
    orphans: dict[str, list[Any]] = defaultdict(list)
    for line in lines:
        targets = (
            [latest[line.job_id]] if line.job_id in latest else on_host.get(line.host or "", [])
        )
        if not targets and line.job_id:
            orphans[line.job_id].append(line)
        for attempt in targets:
            attempts[attempt.pk] = attempt
            routed[attempt.pk].append(line)
    return [(attempts[pk], routed[pk]) for pk in routed], orphans


def _latest_attempts(cluster: Cluster, job_ids: Iterable[str]) -> dict[str, Attempt]:
    latest: dict[str, Attempt] = {}
    for attempt in Attempt.objects.filter(cluster=cluster, job_id__in=list(job_ids)).order_by(
        "job_id", "attempt_index"
    ):
        latest[attempt.job_id] = attempt
    return latest


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
    cluster: Cluster, now: datetime, config: DetectorConfig, summary: ScanSummary
) -> None:
    """Lines that arrived before the scheduler reported their job join its attempt once it is
    known; lines of a job never reported within LATE_LINES are dropped (and said so)."""
    pending = PendingLines.objects.filter(cluster=cluster)
    if not pending.exists():
        return
    known = _latest_attempts(cluster, pending.values_list("job_id", flat=True))
    for job_id in pending.values_list("job_id", flat=True):
        with transaction.atomic():
            lines = PendingLines.take(cluster, job_id)
            if job_id in known:
                _process_lines(cluster, lines, now, config, summary)
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
    kept = monitor.matched_lines
    context = DiagnosisContext(nodes=tuple(attempt.nodes), gpus_per_node=_gpus_per_node(attempt))
    diagnosis = diagnose_lines(
        [entry["text"] for entry in kept],
        context,
        library=config.library,
        host_hints=[entry.get("host") for entry in kept],
    )
    if diagnosis.kind == Kind.NONE:
        return
    evidence = [_log_evidence(kept[item.line - 1], item.signature) for item in diagnosis.evidence]
    first = min((kept[item.line - 1]["at"] for item in diagnosis.evidence), default=now.isoformat())
    record_interruption(
        attempt,
        now,
        kind=diagnosis.kind.value,
        category=diagnosis.category.value,
        attribution=diagnosis.attribution.value,
        confidence=(diagnosis.confidence.value, diagnosis.confidence.label.value),
        hosts=list(diagnosis.implicated_hosts),
        root_cause=_root_cause_of(diagnosis),
        # The diagnosis numbers lines within the kept excerpt; the evidence carries real ones.
        summary=_LINE_REFERENCE.sub("", diagnosis.explanation.split(". ")[0])[:500],
        explanation=diagnosis.explanation,
        evidence=evidence,
        first_evidence_at=datetime.fromisoformat(first),
        occurrences=sum(1 for entry in kept if entry.get("role") != Role.CONTEXT.value),
        summary_out=summary,
    )


def _log_evidence(entry: dict[str, Any], signature: str) -> dict[str, Any]:
    return {
        "source": "log",
        "at": entry["at"],
        "line": entry["seq"],
        "text": entry["text"][:2000],
        "signature": signature,
        "host": entry.get("host"),
    }


def _root_cause_of(diagnosis: Diagnosis) -> str:
    signature = diagnosis.evidence[0].signature if diagnosis.evidence else diagnosis.category.value
    hosts = ",".join(diagnosis.implicated_hosts)
    return f"{signature}:{hosts}" if hosts else signature


def _gpus_per_node(attempt: Attempt) -> int:
    gpus = Node.objects.filter(
        cluster_id=attempt.cluster_id, name__in=attempt.nodes[:1]
    ).values_list("gpus", flat=True)
    return next(iter(gpus), 0) or 8


def _read_metrics(
    cluster: Cluster, sources: ClusterSources, now: datetime, summary: ScanSummary
) -> list[Any]:
    if sources.metrics is None:
        return []
    row, _ = SourceCursor.objects.get_or_create(cluster=cluster, source="metrics")
    try:
        scrape = sources.metrics.scrape(now)
    except SourceUnavailable as exc:
        _mark_unhealthy(row, exc, summary)
        return []
    current = read_scrape(scrape.samples)
    with transaction.atomic():
        for finding in detect_metric_faults(row.cursor.get("gpus", {}), current, now):
            _record_metric_finding(cluster, finding, now, summary)
        row.cursor, row.healthy, row.last_error, row.last_success_at = (
            {"gpus": current},
            True,
            "",
            now,
        )
        row.save()
    return list(scrape.samples)


def _record_metric_finding(
    cluster: Cluster, finding: Finding, now: datetime, summary: ScanSummary
) -> None:
    if finding.job_id:
        attempts = list(_latest_attempts(cluster, [finding.job_id]).values())
    else:
        attempts = _attempts_by_host(cluster, now).get(finding.hosts[0], [])
    for attempt in attempts:
        record_finding(attempt, finding, now, confidence=(0.8, "supported"), summary_out=summary)


def _check_running_attempts(
    cluster: Cluster,
    now: datetime,
    config: DetectorConfig,
    samples: list[Any],
    summary: ScanSummary,
) -> None:
    running = Attempt.objects.filter(cluster=cluster, state="RUNNING", ended_at__isnull=True)
    interrupted = set(
        Anomaly.objects.filter(attempt__in=running, family=AnomalyFamily.INTERRUPTION).values_list(
            "attempt_id", flat=True
        )
    )
    by_host = _utilisation_by_host(samples)
    for attempt in running.select_related("monitor"):
        with transaction.atomic():
            monitor = monitoring.load(attempt)
            before = monitor.progress
            utilisation = [u for host in attempt.nodes for u in by_host.get(host, [])]
            hang, slow = monitoring.check(monitor, attempt, now, config, utilisation, samples)
            if monitor.progress != before:
                monitor.save()  # most scans change nothing for most running attempts
            if hang is not None and attempt.pk not in interrupted:
                record_finding(
                    attempt, hang, now, confidence=(0.6, "supported"), summary_out=summary
                )
            if slow is not None:
                record_finding(
                    attempt, slow, now, confidence=(0.6, "supported"), summary_out=summary
                )


def _utilisation_by_host(samples: Iterable[Any]) -> dict[str, list[float]]:
    by_host: dict[str, list[float]] = defaultdict(list)
    for sample in samples:
        if sample.name == "DCGM_FI_DEV_GPU_UTIL":
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
        Node.objects.filter(cluster=cluster, state__in=["DOWN", "DRAINED", "DRAINING"]).values_list(
            "name", flat=True
        )
    )
    for attempt in ended[:500]:
        with transaction.atomic():
            finding, confidence = monitoring.scheduler_finding(attempt, down)
            record_finding(attempt, finding, now, confidence=confidence, summary_out=summary)


def record_finding(
    attempt: Attempt,
    finding: Finding,
    now: datetime,
    *,
    confidence: tuple[float, str],
    summary_out: ScanSummary,
) -> None:
    """Record a detector's finding as the attempt's interruption or straggler anomaly."""
    evidence = [
        {
            "source": e.source,
            "at": e.at.isoformat(),
            "text": e.text,
            "signature": e.signature,
            "host": e.host,
        }
        for e in finding.evidence
    ]
    attribution = monitoring.attribution_of(finding)
    record_interruption(
        attempt,
        now,
        kind=finding.kind,
        category=finding.category,
        attribution=attribution,
        confidence=confidence,
        hosts=list(finding.hosts),
        root_cause=finding.root_cause,
        summary=finding.summary,
        explanation=finding.summary,
        evidence=evidence,
        first_evidence_at=finding.first_evidence_at,
        occurrences=1,
        summary_out=summary_out,
        family=AnomalyFamily.STRAGGLER
        if finding.kind == "straggler"
        else AnomalyFamily.INTERRUPTION,
    )


def record_interruption(
    attempt: Attempt,
    now: datetime,
    *,
    kind: str,
    category: str,
    attribution: str,
    confidence: tuple[float, str],
    hosts: list[str],
    root_cause: str,
    summary: str,
    explanation: str,
    evidence: list[dict[str, Any]],
    first_evidence_at: datetime,
    occurrences: int,
    summary_out: ScanSummary,
    family: str = AnomalyFamily.INTERRUPTION,
) -> Anomaly:
    """Create the attempt's anomaly of this family, or merge new evidence into it.

    The diagnosis kept is the stronger one: more confident, or naming hosts where the other
    named none (a hang seen in the log, then the Xid that caused it in the metrics)."""
    found = {
        "kind": kind,
        "category": category,
        "attribution": attribution,
        "confidence": confidence[0],
        "confidence_label": confidence[1],
        "implicated_hosts": sorted(hosts),
        "root_cause": root_cause[:200],
        "summary": summary[:500],
        "explanation": explanation,
    }
    anomaly = Anomaly.objects.select_for_update().filter(attempt=attempt, family=family).first()
    if anomaly is None:
        return _create_anomaly(
            attempt, family, found, evidence, first_evidence_at, now, occurrences, summary_out
        )
    return _merge_anomaly(
        anomaly, found, evidence, first_evidence_at, now, occurrences, summary_out
    )


def _create_anomaly(
    attempt: Attempt,
    family: str,
    found: dict[str, Any],
    evidence: list[dict[str, Any]],
    first_evidence_at: datetime,
    now: datetime,
    occurrences: int,
    summary_out: ScanSummary,
) -> Anomaly:
    anomaly = Anomaly.objects.create(
        cluster_id=attempt.cluster_id,
        workload_id=attempt.workload_id,
        attempt=attempt,
        family=family,
        evidence=evidence,
        occurrences=max(occurrences, 1),
        first_evidence_at=first_evidence_at,
        detected_at=now,
        updated_at=now,
        **found,
    )
    audit.record(
        ACTOR,
        "anomaly.detected",
        anomaly,
        cluster=attempt.cluster,
        workload=attempt.workload,
        attempt=attempt,
        payload={
            **found,
            "first_evidence_at": first_evidence_at.isoformat(),
            "detected_at": now.isoformat(),
        },
    )
    events.send_anomaly(attempt.cluster_id, attempt.workload_id, anomaly.pk)
    summary_out.new_anomalies += 1
    return anomaly


def _merge_anomaly(
    anomaly: Anomaly,
    found: dict[str, Any],
    evidence: list[dict[str, Any]],
    first_evidence_at: datetime,
    now: datetime,
    occurrences: int,
    summary_out: ScanSummary,
) -> Anomaly:
    sharper = _is_sharper(found, anomaly)
    known = {(e.get("source"), e.get("text")) for e in anomaly.evidence}
    added = [e for e in evidence if (e.get("source"), e.get("text")) not in known]
    if not sharper and not added:
        if occurrences > anomaly.occurrences:
            Anomaly.objects.filter(pk=anomaly.pk).update(occurrences=occurrences)
        return anomaly
    before = {k: getattr(anomaly, k) for k in found}
    if sharper:
        for name, value in found.items():
            setattr(anomaly, name, value)
    anomaly.evidence = (anomaly.evidence + added)[:50]
    anomaly.first_evidence_at = min(anomaly.first_evidence_at, first_evidence_at)
    anomaly.occurrences = max(anomaly.occurrences, occurrences)
    anomaly.updated_at = now
    anomaly.save()
    changed = {
        k: {"from": before[k], "to": getattr(anomaly, k)}
        for k in found
        if before[k] != getattr(anomaly, k)
    }
    if changed:
        audit.record(
            ACTOR,
            "anomaly.sharpened",
            anomaly,
            cluster=anomaly.cluster,
            workload=anomaly.workload,
            attempt=anomaly.attempt,
            payload=changed,
        )
        summary_out.updated_anomalies += 1
        events.send_anomaly(anomaly.cluster_id, anomaly.workload_id, anomaly.pk)
    return anomaly


def _is_sharper(found: dict[str, Any], anomaly: Anomaly) -> bool:
    if found["implicated_hosts"] and not anomaly.implicated_hosts and found["confidence"] >= 0.5:
        return True
    if anomaly.implicated_hosts and not found["implicated_hosts"]:
        return False
    return bool(found["confidence"] > anomaly.confidence)


def claim_due_scans(now: datetime) -> list[int]:
    """The clusters due a scan, each claimed by moving its next scan time (so two dispatchers
    never enqueue the same scan twice)."""
    for cluster in Cluster.objects.filter(detection__isnull=True):
        detection_settings_of(cluster)
    due = DetectionSettings.objects.filter(Q(next_scan_at__isnull=True) | Q(next_scan_at__lte=now))
    claimed = []
    for settings in due:
        next_at = now + timedelta(seconds=settings.poll_seconds)
        if DetectionSettings.objects.filter(
            pk=settings.pk, next_scan_at=settings.next_scan_at
        ).update(next_scan_at=next_at):
            claimed.append(settings.cluster_id)
    return claimed
