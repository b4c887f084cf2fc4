"""A cluster's mode: ask for action mode with the measured agreement, approve or reject the
request (a second person with the approver role), and go back to monitor mode at once."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect
from django.views.decorators.http import require_POST

from fleet.models import Cluster
from recovery_console.console import approval, policy_approval, reviews
from recovery_console.console.forms import ReasonForm, RequestModeForm
from recovery_console.console.models import ModeChangeRequest, PolicyChangeRequest

from .common import (
    approver_required,
    cluster_or_404,
    operator_required,
    page,
    percent,
    viewer_required,
)
from .review_queue import agreement_figure

HISTORY = 10


@viewer_required
def mode_page(request: HttpRequest, name: str) -> HttpResponse:
    cluster = cluster_or_404(name)
    context = {
        **_mode_context(request, cluster),
        # Only the full page draws the chart; the partial live updates re-fetch leaves it out.
        "figure": agreement_figure([cluster]),
        "section": "overview",
    }
    return page(request, "console/mode.html", context)


@viewer_required
def mode_status(request: HttpRequest, name: str) -> HttpResponse:
    cluster = cluster_or_404(name)
    return page(request, "console/_mode.html", _mode_context(request, cluster))


def _mode_context(request: HttpRequest, cluster: Cluster) -> dict[str, object]:
    pending = approval.pending_request(cluster)
    policy_pending = policy_approval.pending_policy_request(cluster)
    measured = reviews.agreement(cluster)
    history = ModeChangeRequest.objects.filter(cluster=cluster).select_related(
        "requested_by", "decided_by"
    )[:HISTORY]
    return {
        "cluster": cluster,
        "agreement": measured,
        "rate_text": percent(measured.rate),
        "min_text": percent(measured.min_agreement),
        "pending": pending,
        # The rate when asked beside the rate now: the approver sees whether it moved.
        "pending_rate_text": percent(pending.agreement_rate) if pending else "",
        # The requester may withdraw without the approver role, and is told someone else approves.
        "own_request": pending is not None and pending.requested_by_id == request.user.pk,
        "history": [(r, percent(r.agreement_rate)) for r in history],
        # A settings change waiting for a second person (the gate, or the policy in action mode).
        "policy_pending": policy_pending,
        "own_policy_request": policy_pending is not None
        and policy_pending.requested_by_id == request.user.pk,
        "request_form": RequestModeForm(),
        "reason_form": ReasonForm(),
    }


@require_POST
@operator_required
def request_action(request: HttpRequest, name: str) -> HttpResponse:
    cluster = cluster_or_404(name)
    form = RequestModeForm(request.POST)
    # The note is optional: one that does not fit is dropped rather than refusing the request.
    note = form.cleaned_data["note"] if form.is_valid() else ""
    try:
        made = approval.request_action_mode(request.user, cluster, note)
    except reviews.ApprovalRefused as exc:
        messages.error(request, f"Not requested: {exc.reason}")
    else:
        messages.success(
            request,
            f"Requested action mode for {cluster.name} (#{made.pk}); "
            "a second person with the approver role must approve it.",
        )
    return redirect("mode", name=cluster.name)


def _request_of(cluster: Cluster, pk: int) -> ModeChangeRequest:
    # Matched on the cluster too: a request's id under another cluster's URL is a 404.
    return get_object_or_404(
        ModeChangeRequest.objects.select_related("cluster", "requested_by"), pk=pk, cluster=cluster
    )


@require_POST
@approver_required
def approve(request: HttpRequest, name: str, pk: int) -> HttpResponse:
    cluster = cluster_or_404(name)
    try:
        approval.approve_mode_request(request.user, _request_of(cluster, pk))
    except reviews.ApprovalRefused as exc:
        messages.error(request, f"Not approved: {exc.reason}")
    else:
        messages.success(request, f"Approved: {cluster.name} is now in action mode.")
    return redirect("mode", name=cluster.name)


@require_POST
@viewer_required  # an approver rejects; the person who asked may withdraw (checked by approval)
def reject(request: HttpRequest, name: str, pk: int) -> HttpResponse:
    cluster = cluster_or_404(name)
    form = ReasonForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Not rejected: say why.")
        return redirect("mode", name=cluster.name)
    try:
        approval.reject_mode_request(
            request.user, _request_of(cluster, pk), form.cleaned_data["reason"]
        )
    except reviews.ApprovalRefused as exc:
        messages.error(request, f"Not rejected: {exc.reason}")
    else:
        messages.success(request, f"Request #{pk} rejected.")
    return redirect("mode", name=cluster.name)


@require_POST
@operator_required
def back_to_monitor(request: HttpRequest, name: str) -> HttpResponse:
    cluster = cluster_or_404(name)
    form = ReasonForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Still in action mode: say why you return to monitor mode.")
        return redirect("mode", name=cluster.name)
    approval.back_to_monitor(request.user, cluster, form.cleaned_data["reason"])
    messages.success(request, f"{cluster.name} is back in monitor mode.")
    return redirect("mode", name=cluster.name)


def _policy_request_of(cluster: Cluster, pk: int) -> PolicyChangeRequest:
    return get_object_or_404(
        PolicyChangeRequest.objects.select_related("cluster", "requested_by"),
        pk=pk,
        cluster=cluster,
    )


@require_POST
@approver_required
def approve_policy(request: HttpRequest, name: str, pk: int) -> HttpResponse:
    cluster = cluster_or_404(name)
    try:
        policy_approval.approve_policy_request(request.user, _policy_request_of(cluster, pk))
    except reviews.ApprovalRefused as exc:
        messages.error(request, f"Not approved: {exc.reason}")
    else:
        messages.success(request, f"Approved: the settings change #{pk} is applied.")
    return redirect("mode", name=cluster.name)


@require_POST
@viewer_required  # an approver rejects; the person who asked may withdraw (checked by the service)
def reject_policy(request: HttpRequest, name: str, pk: int) -> HttpResponse:
    cluster = cluster_or_404(name)
    form = ReasonForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Not rejected: say why.")
        return redirect("mode", name=cluster.name)
    try:
        policy_approval.reject_policy_request(
            request.user, _policy_request_of(cluster, pk), form.cleaned_data["reason"]
        )
    except reviews.ApprovalRefused as exc:
        messages.error(request, f"Not rejected: {exc.reason}")
    else:
        messages.success(request, f"Settings change #{pk} rejected.")
    return redirect("mode", name=cluster.name)
