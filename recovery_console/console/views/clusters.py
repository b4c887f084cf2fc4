"""The overview (every cluster at a glance) and one cluster's page."""

from __future__ import annotations

from django.db.models import Count
from django.http import HttpRequest, HttpResponse
from django.utils import timezone

from detection.models import Anomaly
from fleet.models import Attempt, Cluster, Node, WorkloadState
from recovery_console.console import reviews
from recovery_console.console.views import stats
from remediation import reporters

from .common import cluster_or_404, page, viewer_required, visible_clusters

RECENT = 20
ATTENTION = 25


@viewer_required
def overview(request: HttpRequest) -> HttpResponse:
    clusters = visible_clusters(request)
    return page(
        request,
        "console/overview.html",
        {"summaries": stats.summaries(clusters), "section": "overview"},
    )


@viewer_required
def cluster_card(request: HttpRequest, name: str) -> HttpResponse:
    # One card alone, for the overview's live updates.
    summary = stats.summary(cluster_or_404(name))
    return page(request, "console/_cluster_card.html", {"s": summary})


@viewer_required
def cluster_detail(request: HttpRequest, name: str) -> HttpResponse:
    cluster = cluster_or_404(name)
    context = {
        "s": stats.summary(cluster),
        **_cluster_context(cluster),
        "precision": reviews.precision(cluster),
        **_reporters_context(cluster),
        "section": "overview",
    }
    return page(request, "console/cluster.html", context)


@viewer_required
def cluster_reporters(request: HttpRequest, name: str) -> HttpResponse:
    # The controller and watchdog panel alone, for live updates.
    return page(request, "console/_reporters.html", _reporters_context(cluster_or_404(name)))


def _reporters_context(cluster: Cluster) -> dict[str, object]:
    return {"cluster": cluster, "reporters": reporters.health([cluster], timezone.now())}


@viewer_required
def cluster_workloads(request: HttpRequest, name: str) -> HttpResponse:
    cluster = cluster_or_404(name)
    return page(request, "console/_cluster_workloads.html", _cluster_context(cluster))


def _cluster_context(cluster: Cluster) -> dict[str, object]:
    # Needing attention: interrupted, or waiting for the scheduler to start them.
    attention = list(
        cluster.workloads.filter(state__in=[WorkloadState.INTERRUPTED, WorkloadState.PENDING])
        .filter(is_array=False)  # an array's tasks are listed themselves
        .order_by("-updated_at")[:ATTENTION]
    )
    # Counted apart for the few shown: joined to the attempts, every workload in those states
    # would be grouped and sorted before the first 25 came back.
    counts = dict(
        Attempt.objects.filter(workload__in=attention)
        .values_list("workload_id")
        .annotate(n=Count("id"))
        .order_by()
    )
    for workload in attention:
        workload.attempt_count = counts.get(workload.pk, 0)  # type: ignore[attr-defined]
    failures = (
        Attempt.objects.filter(cluster=cluster, ended_at__isnull=False)
        .exclude(state__in=["COMPLETED", "REQUEUED"])
        .select_related("workload")
        .order_by("-ended_at")[:RECENT]
    )
    # Counts per state only: the nodes themselves are on the nodes page.
    nodes = Node.objects.filter(cluster=cluster).values("state").annotate(count=Count("id"))
    anomalies = Anomaly.objects.filter(cluster=cluster).select_related("attempt", "workload")
    return {
        "cluster": cluster,
        "attention": attention,
        "failures": failures,
        "nodes": nodes.order_by("state"),
        "anomalies": anomalies.order_by("-detected_at")[:RECENT],
    }
