"""Registering a cluster and changing its registration (admins), and checking that a
cluster works (operators): thin views over ``console.registration`` and
``remediation.checkup``."""

from __future__ import annotations

from datetime import UTC, datetime

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from fleet.models import Cluster
from recovery_console.console import registration
from recovery_console.console.forms import ClusterRegistrationForm
from recovery_console.console.reviews import ApprovalRefused
from recovery_console.console.roles import ADMIN, OPERATOR, role_required
from remediation.checkup import check_cluster
from remediation.core.checkup import worst

from .common import cluster_or_404, page

admin_required = role_required(ADMIN)
operator_required = role_required(OPERATOR)


@admin_required
def cluster_new(request: HttpRequest) -> HttpResponse:
    form = ClusterRegistrationForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        name = form.cleaned_data["name"]
        try:
            registration.create(request.user, name, form.documents())
        except registration.ClusterExists as exc:
            form.add_error("name", str(exc))
        except ValidationError as exc:
            form.add_service_errors(exc)
        else:
            messages.success(request, f"Registered {name} in monitor mode.")
            return redirect("cluster", name=name)
    return _form_page(request, form, None)


@admin_required
def cluster_registration(request: HttpRequest, name: str) -> HttpResponse:
    cluster = cluster_or_404(name)
    form = ClusterRegistrationForm(request.POST or None, cluster=cluster)
    if request.method == "POST" and form.is_valid():
        try:
            outcome = registration.change(request.user, cluster, form.documents())
        except ValidationError as exc:
            form.add_service_errors(exc)
        except ApprovalRefused as exc:
            messages.error(request, f"Not saved: {exc.reason}")
        else:
            messages.success(request, _said(outcome))
            return redirect("cluster-registration", name=cluster.name)
    return _form_page(request, form, cluster)


def _said(outcome: registration.Outcome) -> str:
    if outcome.pending is not None:
        why = "; ".join(outcome.pending.why)
        return f"Waiting for approval (#{outcome.pending.pk}): {why}."
    if not outcome.changed:
        return "Nothing changed."
    return f"Saved: {', '.join(outcome.changed).replace('_', ' ')}."


def _form_page(
    request: HttpRequest, form: ClusterRegistrationForm, cluster: Cluster | None
) -> HttpResponse:
    context = {"form": form, "cluster": cluster, "section": "overview"}
    status = 400 if form.errors else 200
    return page(request, "console/registration.html", context, status=status)


@require_POST
@operator_required
def cluster_check(request: HttpRequest, name: str) -> HttpResponse:
    """Read every source and the scheduler once, now; nothing is written."""
    cluster = cluster_or_404(name)
    findings = check_cluster(cluster, datetime.now(UTC))
    context = {
        "cluster": cluster,
        "findings": findings,
        "overall": worst(findings),
        "section": "overview",
    }
    return page(request, "console/check.html", context)
