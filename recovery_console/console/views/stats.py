"""The figures the overview shows per cluster, with a fixed number of queries per cluster."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from django.db.models import Count, Q

from detection.models import Anomaly, AnomalyState, TelemetryGap
from fleet.models import Cluster, Workload, WorkloadState
from recovery_console.console import approval, reviews
from recovery_console.console.models import ModeChangeRequest
from remediation.models import Advice, AdviceState, NodeHealth, NodeHealthState

from .common import percent, percentiles

# Latency figures are measured over the most recent rows, so a page costs the same on a
# cluster with years of history.
LATENCY_SAMPLE = 500


@dataclass(frozen=True)
class Latency:
    """Median and 95th percentile in seconds over ``count`` recent events."""

    p50: float | None
    p95: float | None
    count: int


@dataclass(frozen=True)
class ClusterSummary:
    """One cluster at a glance (the overview's card)."""

    cluster: Cluster
    running: int
    interrupted: int
    workloads: int
    open_anomalies: int
    awaiting_review: int
    detection: Latency
    action: Latency
    agreement: reviews.Agreement
    pending_request: ModeChangeRequest | None
    suspect_nodes: int
    drained_nodes: int
    # Sources unreachable, silent or late now: hang and slowdown verdicts wait on them.
    telemetry_gaps: list[TelemetryGap]

    @property
    def agreement_text(self) -> str:
        return percent(self.agreement.rate) if self.agreement.rate is not None else "—"

    @property
    def min_agreement_text(self) -> str:
        return percent(self.agreement.min_agreement)


def latency(pairs: Sequence[tuple[datetime, datetime]]) -> Latency:
    """Latency of (later, earlier) pairs; a negative gap (clock skew) counts as zero."""
    values = [max(0.0, (later - earlier).total_seconds()) for later, earlier in pairs]
    p50, p95 = percentiles(values)
    return Latency(p50, p95, len(values))


def detection_latency(cluster: Cluster) -> Latency:
    """Evidence timestamp to anomaly stored, over the cluster's latest anomalies."""
    rows = (
        Anomaly.objects.filter(cluster=cluster)
        .order_by("-detected_at")
        .values_list("detected_at", "first_evidence_at")[:LATENCY_SAMPLE]
    )
    return latency(list(rows))


def action_latency(cluster: Cluster) -> Latency:
    """Anomaly detected to advice executed by a controller, over the latest executed advice."""
    rows = (
        Advice.objects.filter(cluster=cluster, state=AdviceState.EXECUTED)
        .exclude(executed_at=None)
        .order_by("-executed_at")
        .values_list("executed_at", "anomaly__detected_at")[:LATENCY_SAMPLE]
    )
    return latency([(executed, detected) for executed, detected in rows if executed])


def summaries(clusters: Sequence[Cluster]) -> list[ClusterSummary]:
    # Three grouped queries for every cluster at once; the rest are a fixed few per cluster.
    ids = [c.pk for c in clusters]
    workloads = _counts(
        Workload.objects.filter(cluster_id__in=ids, is_array=False),  # runs, not their arrays
        running=Count("id", filter=Q(state=WorkloadState.RUNNING)),
        interrupted=Count("id", filter=Q(state=WorkloadState.INTERRUPTED)),
        total=Count("id"),
    )
    anomalies = _counts(
        Anomaly.objects.filter(cluster_id__in=ids, state=AnomalyState.OPEN), open=Count("id")
    )
    nodes = _counts(
        NodeHealth.objects.filter(cluster_id__in=ids),
        suspect=Count("id", filter=Q(state=NodeHealthState.SUSPECT)),
        drained=Count("id", filter=Q(state=NodeHealthState.DRAINED)),
    )
    return [_summary(c, workloads, anomalies, nodes) for c in clusters]


def summary(cluster: Cluster) -> ClusterSummary:
    return summaries([cluster])[0]


def _summary(
    cluster: Cluster,
    workloads: dict[int, dict[str, int]],
    anomalies: dict[int, dict[str, int]],
    nodes: dict[int, dict[str, int]],
) -> ClusterSummary:
    counts = workloads.get(cluster.pk, {})
    return ClusterSummary(
        cluster=cluster,
        running=counts.get("running", 0),
        interrupted=counts.get("interrupted", 0),
        workloads=counts.get("total", 0),
        open_anomalies=anomalies.get(cluster.pk, {}).get("open", 0),
        # Labelled by nobody on the current generation: not one reviewer's own queue.
        awaiting_review=reviews.awaiting_review(cluster).count(),
        detection=detection_latency(cluster),
        action=action_latency(cluster),
        agreement=reviews.agreement(cluster),
        pending_request=approval.pending_request(cluster),
        suspect_nodes=nodes.get(cluster.pk, {}).get("suspect", 0),
        drained_nodes=nodes.get(cluster.pk, {}).get("drained", 0),
        telemetry_gaps=list(cluster.telemetry_gaps.filter(ended_at__isnull=True)),
    )


def _counts(queryset: object, **aggregates: object) -> dict[int, dict[str, int]]:
    rows = queryset.values("cluster_id").annotate(**aggregates).order_by()  # type: ignore[attr-defined]
    # A cluster without rows is missing here; ``_summary`` reads it as zeros.
    return {row.pop("cluster_id"): row for row in rows}
