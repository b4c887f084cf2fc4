"""Workloads: the filtered list, and one workload's page with its timeline."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.core.paginator import Paginator
from django.db.models import Count, QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404
from django.utils import timezone

from detection.core.constants import DEFAULT_GPUS_PER_NODE
from detection.models import Anomaly, AnomalyState, AttemptMonitor
from detection.services import job_output_tail
from fleet.models import ENDED_ATTEMPT_STATES, Attempt, Node, Workload
from recovery_console.console import charts
from recovery_console.console.forms import WorkloadFilterForm
from remediation.models import Milestone

from .common import narrow_cluster_choices, page, viewer_required, visible, visible_clusters

PER_PAGE = 50
# The timeline shows the latest attempts; a workload restarted hundreds of times still draws
# in a few milliseconds.
TIMELINE_ATTEMPTS = 60
TABLE_ATTEMPTS = 100
# Every way an attempt ends but success, a requeue included: each interrupts the run.
FAILED_STATES = frozenset(ENDED_ATTEMPT_STATES - {"COMPLETED"})


@viewer_required
def workload_list(request: HttpRequest) -> HttpResponse:
    form = WorkloadFilterForm(request.GET or None)
    narrow_cluster_choices(form, request)
    workloads = visible(_filtered(form), request.user)
    listing = Paginator(workloads, PER_PAGE).get_page(request.GET.get("page"))
    # Iterating the page caches its objects, so the counts set here reach the template.
    _annotate_counts(list(listing))
    clusters = visible_clusters(request)
    context = {
        "form": form,
        "listing": listing,
        "clusters": clusters,
        "query": _query_without_page(request),
        "section": "workloads",
    }
    template = "console/_workload_list.html" if _partial(request) else "console/workloads.html"
    return page(request, template, context)


def _partial(request: HttpRequest) -> bool:
    return request.GET.get("partial") == "1"


def _filtered(form: WorkloadFilterForm) -> QuerySet[Workload]:
    # The pk breaks ties, so paging never shows a workload twice nor skips one. An array's
    # tasks are listed under the array (its page), not one by one here.
    # The clusters are fetched apart: joined, MariaDB reads the few clusters first and sorts
    # every workload rather than walking the index on (updated_at, id) for one page.
    workloads = (
        Workload.objects.prefetch_related("cluster")
        .filter(array__isnull=True)
        .order_by("-updated_at", "-pk")
    )
    if form.is_bound and form.is_valid():
        data = form.cleaned_data
        if data["cluster"]:
            workloads = workloads.filter(cluster=data["cluster"])
        if data["state"]:
            workloads = workloads.filter(state=data["state"])
        if data["q"]:
            workloads = workloads.filter(key__icontains=data["q"])
    return workloads


def _annotate_counts(workloads: list[Workload]) -> None:
    """Attempts and open anomalies of one page of workloads (an array's: all its tasks'), and
    each array's tasks, in grouped queries (a join over every workload would multiply attempts
    by anomalies)."""
    ids = [w.pk for w in workloads]
    open_anomalies = Anomaly.objects.filter(state=AnomalyState.OPEN)
    attempts = _count_by_workload(Attempt.objects.filter(workload_id__in=ids))
    anomalies = _count_by_workload(open_anomalies.filter(workload_id__in=ids))
    arrays = [w.pk for w in workloads if w.is_array]
    if arrays:
        tasks = Attempt.objects.filter(workload__array_id__in=arrays)
        attempts |= _count_by_workload(tasks, "workload__array_id")
        in_tasks = open_anomalies.filter(workload__array_id__in=arrays)
        anomalies |= _count_by_workload(in_tasks, "workload__array_id")
        task_counts = _count_by_workload(Workload.objects.filter(array_id__in=arrays), "array_id")
    for workload in workloads:
        workload.attempt_count = attempts.get(workload.pk, 0)  # type: ignore[attr-defined]
        workload.open_anomalies = anomalies.get(workload.pk, 0)  # type: ignore[attr-defined]
        if workload.is_array:
            workload.task_count = task_counts.get(workload.pk, 0)  # type: ignore[attr-defined]


def _count_by_workload(queryset: QuerySet[Any], by: str = "workload_id") -> dict[int, int]:
    rows = queryset.values(by).annotate(n=Count("id")).order_by()
    return {row[by]: row["n"] for row in rows}


def _query_without_page(request: HttpRequest) -> str:
    query = request.GET.copy()
    query.pop("page", None)
    query.pop("partial", None)
    return query.urlencode()


@viewer_required
def workload_detail(request: HttpRequest, pk: int) -> HttpResponse:
    workload = _workload(request, pk)
    context = {
        **_workload_context(workload),
        **_timeline_context(workload),
        "section": "workloads",
    }
    return page(request, "console/workload.html", context)


@viewer_required
def workload_attempts(request: HttpRequest, pk: int) -> HttpResponse:
    workload = _workload(request, pk)
    return page(request, "console/_workload_attempts.html", _workload_context(workload))


@viewer_required
def workload_timeline(request: HttpRequest, pk: int) -> HttpResponse:
    workload = _workload(request, pk)
    return page(request, "console/_workload_timeline.html", _timeline_context(workload))


def _workload(request: HttpRequest, pk: int) -> Workload:
    # Another cluster's workload is not found, as in the REST API.
    workloads = visible(Workload.objects.select_related("cluster", "array"), request.user)
    return get_object_or_404(workloads, pk=pk)


def _workload_context(workload: Workload) -> dict[str, object]:
    if workload.is_array:
        return _array_context(workload)
    attempts = list(
        workload.attempts.select_related("monitor").order_by("-first_seen_at", "-attempt_index")[
            :TABLE_ATTEMPTS
        ]
    )
    latest = attempts[0] if attempts else None
    # Only the latest attempt's output: the one running, or the last to end.
    # Read up to the attempt's end: a remote source's window must cover what it wrote last.
    output = (
        job_output_tail(workload.cluster, latest.job_id, until=latest.ended_at) if latest else None
    )
    anomalies = (
        Anomaly.objects.filter(workload=workload)
        .select_related("attempt", "advice")
        .order_by("-detected_at")[:TABLE_ATTEMPTS]
    )
    return {
        "workload": workload,
        "attempts": attempts,
        "output": output.lines if output else [],
        "output_problem": output.problem if output else "",
        "anomalies": anomalies,
    }


def _array_context(array: Workload) -> dict[str, object]:
    """An array's page lists its tasks, each a run with its own attempts and anomalies."""
    tasks = list(array.tasks.select_related("cluster").order_by("pk")[:TABLE_ATTEMPTS])
    _annotate_counts(tasks)
    anomalies = (
        Anomaly.objects.filter(workload__array=array)
        .select_related("attempt", "advice", "workload")
        .order_by("-detected_at")[:TABLE_ATTEMPTS]
    )
    return {"workload": array, "tasks": tasks, "anomalies": anomalies}


def _timeline_context(workload: Workload) -> dict[str, object]:
    # An array's timeline draws its tasks' attempts.
    own = (
        Attempt.objects.filter(workload__array=workload) if workload.is_array else workload.attempts
    )
    attempts = list(own.order_by("-first_seen_at", "-attempt_index")[:TIMELINE_ATTEMPTS])
    spans = _spans(workload, attempts)
    markers = _markers({a.pk: _label(a) for a in attempts})
    figure = charts.workload_timeline(charts.Timeline(spans, markers, timezone.now()))
    return {
        "workload": workload,
        "losses": charts.losses(spans, FAILED_STATES),
        "figure": charts.figure_json(figure),
        "shown_attempts": len(attempts),
    }


def _label(attempt: Attempt) -> str:
    return f"job {attempt.job_id}#{attempt.attempt_index}"


def _spans(workload: Workload, attempts: list[Attempt]) -> list[charts.AttemptSpan]:
    monitors: dict[int, dict[str, Any]] = {
        m["attempt_id"]: dict(m)
        for m in AttemptMonitor.objects.filter(attempt__in=attempts).values(
            "attempt_id",
            "throughput",
            "last_step",
            "last_progress_at",
            "checkpoint_step",
            "checkpoint_at",
        )
    }
    names = {n for a in attempts for n in a.nodes}
    gpus = dict(
        Node.objects.filter(cluster_id=workload.cluster_id, name__in=names).values_list(
            "name", "gpus"
        )
    )
    # An attempt with no time at all cannot be placed on the time axis.
    return [_span(a, monitors.get(a.pk, {}), gpus) for a in attempts if _start(a)]


def _start(attempt: Attempt) -> datetime | None:
    return attempt.started_at or attempt.submitted_at or attempt.first_seen_at


def _span(attempt: Attempt, monitor: dict[str, Any], gpus: dict[str, int]) -> charts.AttemptSpan:
    throughput = monitor.get("throughput") or {}
    samples = tuple(
        (datetime.fromisoformat(t), float(v))
        for t, v in zip(throughput.get("times", ()), throughput.get("values", ()), strict=False)
    )
    start = _start(attempt)
    assert start is not None  # noqa: S101 - _spans keeps only attempts with a start
    return charts.AttemptSpan(
        label=_label(attempt),
        state=attempt.state,
        nodes=tuple(attempt.nodes),
        start=start,
        end=attempt.ended_at,
        # A node the scheduler never described, or with no GPU count, counts as a default one.
        gpus=sum(gpus.get(n) or DEFAULT_GPUS_PER_NODE for n in attempt.nodes),
        time_to_resume_s=attempt.time_to_resume_s,
        last_step=monitor.get("last_step"),
        last_progress_at=monitor.get("last_progress_at"),
        throughput=samples,
        failed_at=attempt.failed_at,
        checkpoint_step=monitor.get("checkpoint_step"),
        checkpoint_at=monitor.get("checkpoint_at"),
    )


def _markers(labels: dict[int, str]) -> list[charts.Marker]:
    anomalies = Anomaly.objects.filter(attempt_id__in=labels).select_related("advice")
    markers: list[charts.Marker] = []
    for anomaly in anomalies:
        label = labels[anomaly.attempt_id]
        text = f"{anomaly.kind}: {anomaly.category}<br>{anomaly.summary[:160]}"
        markers.append(charts.Marker("anomaly", anomaly.detected_at, label, text))
        # The reverse one-to-one raises when there is no advice; getattr's default catches it.
        advice = getattr(anomaly, "advice", None)
        if advice is not None:
            text = f"advice: {advice.get_action_display()} ({advice.state})"
            markers.append(charts.Marker("advice", advice.decided_at, label, text))
    milestones = Milestone.objects.filter(advice__attempt_id__in=labels).select_related("advice")
    for milestone in milestones:
        text = f"{milestone.action} by {milestone.controller}"
        markers.append(
            charts.Marker("milestone", milestone.at, labels[milestone.advice.attempt_id], text)
        )
    return markers
