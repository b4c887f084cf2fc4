"""Console pages. Each page renders partials that live updates re-fetch; no view writes."""

from django.db.models import Count, Q
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render

from detection.models import Anomaly

from .models import Attempt, Cluster, Node, Workload, WorkloadState
from .simulation import tail_job_output

RECENT_FAILURES = 20


def overview(request: HttpRequest) -> HttpResponse:
    clusters = Cluster.objects.annotate(
        running=Count("workloads", filter=Q(workloads__state=WorkloadState.RUNNING)),
        interrupted=Count("workloads", filter=Q(workloads__state=WorkloadState.INTERRUPTED)),
        total=Count("workloads"),
    )
    return render(request, "console/overview.html", {"clusters": clusters})


def cluster_detail(request: HttpRequest, name: str) -> HttpResponse:
    cluster = get_object_or_404(Cluster, name=name)
    return render(request, "console/cluster.html", _cluster_context(cluster))


def cluster_workloads(request: HttpRequest, name: str) -> HttpResponse:
    cluster = get_object_or_404(Cluster, name=name)
    return render(request, "console/_cluster_workloads.html", _cluster_context(cluster))


def _cluster_context(cluster: Cluster) -> dict[str, object]:
    workloads = cluster.workloads.annotate(attempt_count=Count("attempts")).order_by("key")
    failures = (
        Attempt.objects.filter(cluster=cluster, ended_at__isnull=False)
        .exclude(state__in=["COMPLETED", "REQUEUED"])
        .select_related("workload")
        .order_by("-ended_at")[:RECENT_FAILURES]
    )
    nodes = Node.objects.filter(cluster=cluster).values("state").annotate(count=Count("id"))
    anomalies = Anomaly.objects.filter(cluster=cluster).select_related("attempt", "workload")
    return {
        "cluster": cluster,
        "workloads": workloads,
        "failures": failures,
        "nodes": nodes,
        "anomalies": anomalies.order_by("-detected_at")[:RECENT_FAILURES],
    }


def workload_detail(request: HttpRequest, pk: int) -> HttpResponse:
    workload = get_object_or_404(Workload.objects.select_related("cluster"), pk=pk)
    return render(request, "console/workload.html", _workload_context(workload))


def workload_attempts(request: HttpRequest, pk: int) -> HttpResponse:
    workload = get_object_or_404(Workload.objects.select_related("cluster"), pk=pk)
    return render(request, "console/_workload_attempts.html", _workload_context(workload))


def _workload_context(workload: Workload) -> dict[str, object]:
    attempts = list(workload.attempts.order_by("-first_seen_at", "-attempt_index"))
    latest = attempts[0] if attempts else None
    output = tail_job_output(workload.cluster, latest.job_id) if latest else []
    anomalies = Anomaly.objects.filter(workload=workload).select_related("attempt")
    anomalies = anomalies.order_by("-detected_at")
    return {"workload": workload, "attempts": attempts, "output": output, "anomalies": anomalies}
