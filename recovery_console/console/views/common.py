"""What every console view shares: rendering with the user's roles, lookups and small maths."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render

from recovery_console.console.roles import (
    ADMIN,
    APPROVER,
    OPERATOR,
    REVIEWER,
    VIEWER,
    role_required,
    roles_of,
)
from recovery_console.fleet.models import Cluster

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
    "page",
    "percent",
    "percentiles",
    "reviewer_required",
    "viewer_required",
]


def page(
    request: HttpRequest, template: str, context: dict[str, Any], status: int = 200
) -> HttpResponse:
    """Render a page or partial; templates show or hide controls by ``roles``."""
    # Templates only hide what a role may not do; the views and services still refuse it.
    return render(request, template, {"roles": roles_of(request.user), **context}, status=status)


def cluster_or_404(name: str) -> Cluster:
    return get_object_or_404(Cluster, name=name)


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
