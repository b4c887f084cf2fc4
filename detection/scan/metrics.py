"""Reading the metrics source: each shard keeps the GPU state of its own nodes (by host hash)
and records the faults it shows, and takes the samples of the nodes its attempts run on;
shard 0 keeps the source's health."""

from __future__ import annotations

from collections.abc import Collection, Iterator
from datetime import datetime

from django.db import transaction
from django.db.models.functions import Mod

from detection.core.detectors.gpu_faults import detect_metric_faults
from detection.core.gaps import SourceReading
from detection.core.interruption import Interruption
from detection.core.scrape import NodeGpuStates, ScrapeByHost, by_gpu, read_by_host
from detection.core.sharding import stable_hash
from detection.sources.base import SourceUnavailable
from detection.sources.config import ClusterSources
from fleet.models import Cluster

from ..anomalies import record_interruption
from ..models import NodeGpuState, SourceCursor
from .common import MAX_HOST_CHARS, WHOLE, ScanSummary, Shard
from .reading import _mark_unhealthy
from .routing import _attempts_by_host, _attempts_of_jobs, attempt_at


def _read_metrics(
    cluster: Cluster,
    sources: ClusterSources,
    now: datetime,
    summary: ScanSummary,
    part: Shard = WHOLE,
    nodes: Collection[str] = (),
) -> tuple[ScrapeByHost, SourceReading | None]:
    """The scrape, by host, of the shard's own nodes (their GPU state and faults) and of
    ``nodes`` (where its running attempts run). Shard 0 keeps the source's health."""
    if sources.metrics is None:
        return ScrapeByHost(), None
    row = (
        SourceCursor.objects.get_or_create(cluster=cluster, source="metrics")[0]
        if part.leads
        else None
    )
    try:
        scrape = sources.metrics.scrape(now)
    except SourceUnavailable as exc:
        if row is not None:
            _mark_unhealthy(row, exc, summary)
        return ScrapeByHost(), SourceReading("metrics", reachable=False, error=str(exc))
    # A whole scan keeps every node; a shard its own nodes and those its attempts run on.
    owned = None if part.of == 1 else part.owns_host
    wanted = set(nodes)
    by_host = read_by_host(
        scrape.samples, None if owned is None else (lambda h: owned(h) or h in wanted)
    )
    current = by_host.gpu_states(owned)
    with transaction.atomic():
        stored = _stored_gpu_states(cluster, part)
        for fault in detect_metric_faults(by_gpu(stored), by_gpu(current), now):
            _record_metric_fault(cluster, fault, now, summary)
        _store_gpu_states(cluster, stored, current)
        if row is not None:
            # The GPUs' state is in NodeGpuState; the cursor row says whether the source is up.
            row.cursor, row.healthy, row.last_error, row.last_success_at = {}, True, "", now
            row.save()
    return by_host, SourceReading("metrics", reachable=True)


# Rows per bulk statement: far below MariaDB's default 16 MB packet even for nodes of many GPUs.
STATE_CHUNK = 500


def _stored_gpu_states(cluster: Cluster, part: Shard) -> NodeGpuStates:
    rows = NodeGpuState.objects.filter(cluster=cluster)
    if part.of > 1:
        rows = rows.alias(bucket=Mod("host_hash", part.of)).filter(bucket=part.number)
    return dict(rows.values_list("host", "gpus"))


def _store_gpu_states(cluster: Cluster, stored: NodeGpuStates, current: NodeGpuStates) -> None:
    """Write the nodes whose GPUs changed since the last scrape (new, different or gone), in
    chunks; a node whose GPUs look as they did is not written at all."""
    # No real host name is this long (DNS stops at 253): a label that is cannot be a node.
    by_host = {host: gpus for host, gpus in current.items() if len(host) <= MAX_HOST_CHARS}
    new = [h for h in by_host if h not in stored]
    changed = [h for h in by_host if h in stored and stored[h] != by_host[h]]
    gone = [h for h in stored if h not in by_host]
    NodeGpuState.objects.bulk_create(
        (
            NodeGpuState(cluster=cluster, host=h, host_hash=stable_hash(h), gpus=by_host[h])
            for h in new
        ),
        batch_size=STATE_CHUNK,
    )
    rows = NodeGpuState.objects.filter(cluster=cluster)
    for chunk in _chunks(changed, STATE_CHUNK):
        updates = [
            NodeGpuState(pk=pk, gpus=by_host[h])
            for pk, h in rows.filter(host__in=chunk).values_list("pk", "host")
        ]
        NodeGpuState.objects.bulk_update(updates, ["gpus"])
    for chunk in _chunks(gone, STATE_CHUNK):
        rows.filter(host__in=chunk).delete()


def _chunks(items: list[str], size: int) -> Iterator[list[str]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


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
