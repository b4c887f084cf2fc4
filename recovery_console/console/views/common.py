"""What every console view shares: rendering with the user's roles, lookups and small maths."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render

from fleet.models import Cluster
from recovery_console.console.roles import (
    ADMIN,
    APPROVER,
    OPERATOR,
    REVIEWER,
    VIEWER,
    role_required,
    roles_anywhere,
    roles_of,
    visible,
)

# Built once, at import: a role name that does not exist fails then, not on a request.
viewer_required = role_required(VIEWER)
operator_required = role_required(OPERATOR)
reviewer_required = role_required(REVIEWER)
approver_required = role_required(APPROVER)

__all__ = [
    "ADMIN",
    "approver_required",
    "cluster_or_404",
    "operator_required",
    "narrow_cluster_choices",
    "page",
    "percent",
    "percentiles",
    "reviewer_required",
    "viewer_required",
    "visible",
    "visible_clusters",
]


def page(
    request: HttpRequest, template: str, context: dict[str, Any], status: int = 200
) -> HttpResponse:
    """Render a page or partial; templates show or hide controls by ``roles``: those held on
    the page's cluster, or on any cluster for a page that spans them."""
    # Templates only hide what a role may not do; the views and services still refuse it.
    held = _roles_on_page(request, context)
    return render(request, template, {"roles": held, **context}, status=status)


def _roles_on_page(request: HttpRequest, context: dict[str, Any]) -> frozenset[str]:
    for key in ("cluster", "workload", "anomaly"):
        row = context.get(key)
        if row is not None:
            return roles_of(request.user, row)
    return roles_anywhere(request.user)


def cluster_or_404(name: str) -> Cluster:
    return get_object_or_404(Cluster, name=name)


def narrow_cluster_choices(form: Any, request: HttpRequest) -> None:
    """A filter form offers only the clusters the person sees (another one's name is invalid)."""
    form.fields["cluster"].queryset = visible(Cluster.objects.all(), request.user, field="pk")


def visible_clusters(request: HttpRequest, role: str = VIEWER) -> list[Cluster]:
    """The clusters where the person holds ``role``, by name."""
    return list(visible(Cluster.objects.all(), request.user, role, "pk"))


def wants_json(request: HttpRequest) -> bool:
    """The review queue's keyboard script asks for JSON; a plain form post gets a redirect."""
    return "application/json" in request.headers.get("Accept", "")


def percent(rate: float | None) -> str:
    """89.6% stays 89.6%: near a threshold, rounding to whole percent would mislead."""
    if rate is None:
        return "n/a"
    return f"{rate * 100:.1f}".removesuffix(".0") + "%"


def percentiles(values: Iterable[float], points: Sequence[float] = (50, 95)) -> list[float | None]:
    """Nearest-rank percentiles (None when there is no value)."""
    ordered = sorted(values)
    if not ordered:
        return [None for _ in points]
    # Nearest rank: always a measured value, never one interpolated between two.
    return [ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)] for p in points]
