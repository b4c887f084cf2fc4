"""One detection cycle (of one shard) from end to end, under the shard's scan lease."""

from __future__ import annotations

from datetime import datetime

from detection.sources.config import ClusterSources
from fleet.core.bulk import cyclic_gc_paused
from fleet.models import Cluster

from ..anomalies import resolve_settled
from ..services import cluster_sources, detection_settings_of, scan_lease
from .checks import _check_ended_attempts, _check_running_attempts, _owned_running
from .common import NODE_LOG_SOURCES, ScanSummary, Shard
from .metrics import _read_metrics
from .reading import _adopt_pending_lines, _read_log_source


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
    with scan_lease(settings, part.number) as acquired, cyclic_gc_paused():
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
        owned = _owned_running(cluster, part)
        nodes = {node for of_attempt in (owned or {}).values() for node in of_attempt}
        scrape, metrics = _read_metrics(cluster, sources, now, summary, part, nodes)
        # Node logs carry no job's progress: their silence says nothing of a hang.
        progress = [r for r in readings if r.name not in NODE_LOG_SOURCES]
        _check_running_attempts(
            cluster, now, config, scrape, progress, metrics, summary, part, owned
        )
        if part.leads:
            _check_ended_attempts(cluster, now, summary)
            summary.resolved_anomalies = resolve_settled(cluster.pk, now)
    return summary
