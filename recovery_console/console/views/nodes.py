"""A cluster's nodes: the scheduler's view beside our health record; releasing a node."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import datetime

from django.contrib import messages
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from fleet.models import Attempt, Cluster, Node
from recovery_console.console.forms import ReasonForm
from recovery_console.console.reviews import actor_of
from remediation.models import NodeHealth, NodeHealthState
from remediation.services import release_node

from .common import cluster_or_404, operator_required, page, viewer_required

PER_PAGE = 200
HEALTH_FILTERS = ("healthy", "suspect", "drained")


@dataclass(frozen=True)
class NodeRow:
    """One node: what the scheduler last said and what our health record holds."""

    name: str
    # None when only our record knows the node: the scheduler no longer reports it.
    node: Node | None
    health: NodeHealth | None
    excluded_by: int  # running attempts that exclude it

    @property
    def health_state(self) -> str:
        return self.health.state if self.health else NodeHealthState.HEALTHY

    @property
    def strikes(self) -> int:
        return len(self.health.strikes) if self.health else 0

    @property
    def would_isolate(self) -> int:
        """How often advice not acted on (monitor mode) would have excluded or drained it."""
        marks = self.health.would_isolate if self.health else []
        return sum(1 for mark in marks if mark.get("exclude") or mark.get("drain"))

    @property
    def last_strike_at(self) -> datetime | None:
        if not self.health or not self.health.strikes:
            return None
        return max(datetime.fromisoformat(s["at"]) for s in self.health.strikes if s.get("at"))

    @property
    def releasable(self) -> bool:
        return self.health is not None and self.health.state != NodeHealthState.HEALTHY


@viewer_required
def node_list(request: HttpRequest, name: str) -> HttpResponse:
    cluster = cluster_or_404(name)
    context = {**_nodes_context(request, cluster), "section": "overview"}
    return page(request, "console/nodes.html", context)


@viewer_required
def node_table(request: HttpRequest, name: str) -> HttpResponse:
    cluster = cluster_or_404(name)
    return page(request, "console/_nodes.html", _nodes_context(request, cluster))


def _nodes_context(request: HttpRequest, cluster: Cluster) -> dict[str, object]:
    wanted = request.GET.get("health", "")
    rows = _rows(cluster)
    # Counted before filtering, so every filter shows its total.
    counts = Counter(r.health_state for r in rows)
    if wanted in HEALTH_FILTERS:
        rows = [r for r in rows if r.health_state == wanted]
    listing = Paginator(rows, PER_PAGE).get_page(request.GET.get("page"))
    return {
        "cluster": cluster,
        "listing": listing,
        "counts": counts,
        "health": wanted,
        "health_filters": HEALTH_FILTERS,
        "release_form": ReasonForm(),
    }


def _rows(cluster: Cluster) -> list[NodeRow]:
    nodes = {n.name: n for n in Node.objects.filter(cluster=cluster)}
    health = {h.name: h for h in NodeHealth.objects.filter(cluster=cluster)}
    # Only attempts still running: an ended one excludes nothing any more.
    excluded = Counter(
        name
        for names in Attempt.objects.filter(cluster=cluster, ended_at__isnull=True).values_list(
            "excluded_nodes", flat=True
        )
        for name in names or ()
    )
    # Trouble first: drained, then suspect, then by name.
    order: dict[str, int] = {NodeHealthState.DRAINED: 0, NodeHealthState.SUSPECT: 1}
    rows = [
        NodeRow(name, nodes.get(name), health.get(name), excluded[name])
        for name in set(nodes) | set(health)
    ]
    return sorted(rows, key=lambda r: (order.get(r.health_state, 2), r.name))


@require_POST
@operator_required
def release(request: HttpRequest, name: str, node: str) -> HttpResponse:
    cluster = cluster_or_404(name)
    form = ReasonForm(request.POST)
    if not form.is_valid():
        messages.error(request, f"{node} was not released: a reason is needed.")
        return redirect("nodes", name=cluster.name)
    try:
        release_node(actor_of(request.user), cluster, node, form.cleaned_data["reason"])
    except NodeHealth.DoesNotExist as exc:
        raise Http404(f"no health record for {node}") from exc
    except ValueError as exc:
        messages.error(request, f"{node} was not released: {exc}")
    else:
        messages.success(request, f"{node} released: it may run jobs again.")
    return redirect("nodes", name=cluster.name)
