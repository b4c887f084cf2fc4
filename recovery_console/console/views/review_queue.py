"""The review queue: advice waiting for the reviewer's label, worked through with the keyboard,
and the agreement rate per cluster over time."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect
from django.views.decorators.http import require_POST

from fleet.core.taxonomy import ACTION_CHOICES
from fleet.models import Cluster
from recovery_console.console import charts, reviews
from recovery_console.console.forms import LabelForm
from recovery_console.console.models import Review
from recovery_console.console.roles import REVIEWER, VIEWER
from remediation.models import Advice

from .common import (
    page,
    reviewer_required,
    viewer_required,
    visible,
    visible_clusters,
    wants_json,
)

QUEUE_LENGTH = 30
RECENT_LABELS = 10
AGREEMENT_DAYS = 28


@reviewer_required
def review_queue(request: HttpRequest) -> HttpResponse:
    context = {**_queue_context(request), "section": "reviews"}
    chosen = request.GET.get("cluster")
    # Only the full page draws the chart: it costs two measurements per cluster.
    shown = [c for c in visible_clusters(request, REVIEWER) if not chosen or c.name == chosen]
    context["figure"] = agreement_figure(shown)
    context["precision_by_cluster"] = [(c, reviews.precision(c)) for c in shown]
    return page(request, "console/reviews.html", context)


@reviewer_required
def review_queue_items(request: HttpRequest) -> HttpResponse:
    return page(request, "console/_review_queue.html", _queue_context(request))


def _queue_context(request: HttpRequest) -> dict[str, object]:
    # Only the clusters this person reviews: another cluster's advice is not theirs to see.
    clusters = visible_clusters(request, REVIEWER)
    chosen = request.GET.get("cluster", "")
    shown = [c for c in clusters if not chosen or c.name == chosen]
    # This reviewer's queue: advice someone else labelled still waits for their label.
    waiting = {
        c.pk: reviews.awaiting_review(c, reviewer=request.user).select_related("cluster")
        for c in shown
    }
    # Each cluster's newest QUEUE_LENGTH suffice: no older one can make the merged, cut list.
    items = sorted(
        (advice for queue in waiting.values() for advice in queue[:QUEUE_LENGTH]),
        key=lambda a: (a.decided_at, a.pk),
        reverse=True,
    )[:QUEUE_LENGTH]
    recent = Review.objects.filter(reviewer_id=request.user.pk).select_related(
        "advice__workload", "advice__cluster"
    )[:RECENT_LABELS]
    return {
        "clusters": clusters,
        "chosen": chosen,
        "items": items,
        "waiting": sum(q.count() for q in waiting.values()),
        "actions": ACTION_CHOICES,
        "recent": recent,
        "live_paths": " ".join(f"/ws/clusters/{c.pk}/" for c in shown),
    }


def agreement_figure(clusters: list[Cluster]) -> str:
    series = [
        charts.AgreementSeries(
            cluster=c.name,
            days=reviews.agreement_by_day(c, days=AGREEMENT_DAYS),
            min_agreement=reviews.agreement(c).min_agreement,
        )
        for c in clusters
    ]
    return charts.figure_json(charts.agreement_chart(series, window=AGREEMENT_DAYS))


@viewer_required
def agreement_chart(request: HttpRequest) -> HttpResponse:
    """The chart alone (re-fetched when a label changes the rate)."""
    clusters = visible_clusters(request)
    chosen = request.GET.get("cluster")
    if chosen:
        clusters = [c for c in clusters if c.name == chosen]
    return page(request, "console/_agreement_chart.html", {"figure": agreement_figure(clusters)})


@require_POST
@reviewer_required
def label(request: HttpRequest, pk: int) -> HttpResponse:
    # Advice of a cluster this person cannot see is not found; one they only view is refused
    # by the service (it needs the reviewer role on the advice's cluster).
    advice = get_object_or_404(visible(Advice.objects.all(), request.user, VIEWER), pk=pk)
    form = LabelForm(request.POST)
    error = ""
    if form.is_valid():
        try:
            reviews.label_advice(
                request.user,
                advice,
                agrees=form.agrees,
                preferred_action=form.cleaned_data["preferred_action"],
                comment=form.cleaned_data["comment"],
            )
        # Shown to the person (or to the keyboard script as JSON), never a server error.
        except (ValueError, reviews.ApprovalRefused) as exc:
            error = str(exc)
    else:
        error = "; ".join(str(m) for messages_ in form.errors.values() for m in messages_)
    return _labelled(request, advice, error)


def _labelled(request: HttpRequest, advice: Advice, error: str) -> HttpResponse:
    if wants_json(request):
        status = 400 if error else 200
        return JsonResponse({"advice": advice.pk, "ok": not error, "error": error}, status=status)
    if error:
        messages.error(request, f"Advice {advice.pk} was not labelled: {error}")
    else:
        messages.success(request, f"Labelled advice {advice.pk}.")
    # Post/redirect/get: reloading the queue does not label again.
    return redirect("review-queue")
