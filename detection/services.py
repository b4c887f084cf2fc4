"""Detection's settings services: a cluster's detector settings (changed at runtime, validated),
its telemetry sources as its settings name them, and which clusters are due a scan."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings as django_settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from detection.sources.base import SourceUnavailable
from detection.sources.config import (
    ClusterSources,
    build_sources,
    check_telemetry,
)
from fleet import audit
from fleet.models import Cluster
from fleet.outbound import allowed_hosts, secret_store

from .models import DetectionSettings, ScanShardLease, SourceCursor

# A scan (shard) holds its lease this long at most; a crashed one's runs out after it.
SCAN_LEASE = timedelta(minutes=2)


def detection_settings_of(cluster: Cluster) -> DetectionSettings:
    settings, _ = DetectionSettings.objects.get_or_create(cluster=cluster)
    return settings


def custom_signatures_of(cluster_name: str) -> list[dict[str, Any]]:
    settings = DetectionSettings.objects.filter(cluster__name=cluster_name).first()
    return list(settings.signatures) if settings else []


@transaction.atomic
def update_detection_settings(actor: str, cluster: Cluster, **changes: Any) -> DetectionSettings:
    """Change detector settings at runtime (validated: a bad signature is refused with why)."""
    allowed = {"signatures", "progress_pattern", "hang", "straggler", "poll_seconds", "scan_shards"}
    unknown = set(changes) - allowed
    if unknown:
        raise ValueError(f"not a detection setting: {', '.join(sorted(unknown))}")
    settings = DetectionSettings.objects.select_for_update().get(
        pk=detection_settings_of(cluster).pk
    )
    before = {name: getattr(settings, name) for name in changes}
    for name, value in changes.items():
        setattr(settings, name, value)
    settings.full_clean(exclude=["cluster"])
    if "scan_shards" in changes and changes["scan_shards"] != before["scan_shards"]:
        _reshard(settings, before["scan_shards"], changes["scan_shards"])
    settings.save()
    payload = {k: {"from": before[k], "to": v} for k, v in changes.items() if before[k] != v}
    audit.record(actor, "detection.settings_changed", settings, cluster=cluster, payload=payload)
    return settings


@contextmanager
def scan_lease(settings: DetectionSettings, shard: int = 0) -> Iterator[bool]:
    """A conditional update claims one shard of the cluster's scan (0: the cluster's own lease);
    a crashed scan's lease runs out after SCAN_LEASE."""
    wall = timezone.now()
    rows: QuerySet[Any]
    if shard == 0:
        rows = DetectionSettings.objects.filter(pk=settings.pk)
        field = "scan_lease_until"
    else:
        ScanShardLease.objects.get_or_create(cluster_id=settings.cluster_id, shard=shard)
        rows = ScanShardLease.objects.filter(cluster_id=settings.cluster_id, shard=shard)
        field = "lease_until"
    free = Q(**{f"{field}__isnull": True}) | Q(**{f"{field}__lt": wall})
    claimed = rows.filter(free).update(**{field: wall + SCAN_LEASE})
    try:
        yield claimed == 1
    finally:
        if claimed:
            rows.update(**{field: None})


def _reshard(settings: DetectionSettings, old: int, new: int) -> None:
    """Hand the log cursors over to a new shard count. Every shard then starts where the old
    ones all stood, so no line is read twice or skipped: that needs every old shard of a source
    at the same cursor (always so from one shard) and no scan running meanwhile."""
    with ExitStack() as leases:
        for shard in range(old):
            if not leases.enter_context(scan_lease(settings, shard)):
                raise ValidationError(
                    {"scan_shards": ["a scan of this cluster is running: change it again"]}
                )
        cursors = SourceCursor.objects.filter(cluster_id=settings.cluster_id).exclude(
            source="metrics"
        )
        by_source: dict[str, list[SourceCursor]] = {}
        for row in cursors.order_by("shard"):
            by_source.setdefault(row.source, []).append(row)
        for source, rows in by_source.items():
            if any(row.cursor != rows[0].cursor for row in rows):
                raise ValidationError(
                    {
                        "scan_shards": [
                            f"the shards of {source} stand at different places: the count can"
                            " change once they agree (every shard read to the end of a quiet"
                            " source)"
                        ]
                    }
                )
        cursors.filter(shard__gte=new).delete()
        for rows in by_source.values():
            lead = rows[0]
            for shard in range(1, new):
                SourceCursor.objects.update_or_create(
                    cluster_id=settings.cluster_id,
                    source=lead.source,
                    shard=shard,
                    defaults={
                        "cursor": lead.cursor,
                        "healthy": lead.healthy,
                        "last_error": lead.last_error,
                        "last_success_at": lead.last_success_at,
                        "newest_line_at": lead.newest_line_at,
                    },
                )


def cluster_sources(cluster: Cluster) -> ClusterSources:
    """The log and metrics sources the cluster's ``telemetry`` settings name."""
    return build_sources(
        cluster.name,
        cluster.telemetry or {},
        django_settings.SIMULATOR_OUTPUT_DIR,
        secret_store(),
        allowed_hosts(),
        cluster.backend,
    )


# How far back a remote log source is read for a job's latest output.
OUTPUT_WINDOW = timedelta(minutes=15)


@dataclass(frozen=True)
class OutputTail:
    """A job's latest output lines, and why it could not be read (empty: it could)."""

    lines: list[str]
    problem: str = ""


def job_output_tail(
    cluster: Cluster, job_id: str, lines: int = 40, until: datetime | None = None
) -> OutputTail:
    """The last lines a job wrote, read from the cluster's own log source as its telemetry
    settings name it (the job's output files, Loki or VictoriaLogs), in the quarter hour
    before ``until`` (default: now) for remote ones. Nodes' system logs are not job output."""
    problems = []
    for name, source in cluster_sources(cluster).logs.items():
        # Every source the settings build reads a job's output; a test's in-memory one may not.
        tail = getattr(source, "output_tail", None)
        if name == "node-logs" or tail is None:
            continue
        try:
            read = tail(job_id, lines, until or timezone.now(), OUTPUT_WINDOW)
        except SourceUnavailable as exc:
            problems.append(str(exc))
            continue
        if read:
            return OutputTail(read)
    return OutputTail([], "; ".join(problems))


def telemetry_problems(cluster: Cluster) -> dict[str, list[str]]:
    """The cluster check detection registers with the fleet: is the telemetry document one
    the sources understand?"""
    if not isinstance(cluster.telemetry, dict):
        return {}  # the fleet itself says it must be an object
    problems = check_telemetry(
        cluster.telemetry, secret_store(), allowed_hosts(), _backend_of(cluster)
    )
    return {"telemetry": problems} if problems else {}


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


def _backend_of(cluster: Cluster) -> str:
    # A scheduler document the fleet refuses is reported there; judge the telemetry as simulated.
    scheduler = cluster.scheduler if isinstance(cluster.scheduler, dict) else {}
    return "slurm" if scheduler.get("backend") == "slurm" else "simulated"


def scan_shards_of(cluster_id: int) -> int:
    """How many shards the cluster's scan is split into (1 for a cluster never set)."""
    shards = DetectionSettings.objects.filter(cluster_id=cluster_id).values_list(
        "scan_shards", flat=True
    )
    return next(iter(shards), 1)
