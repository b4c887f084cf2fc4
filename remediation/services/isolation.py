"""Isolation bookkeeping on node health: the drains and exclusions the controllers report (the
circuit breaker counts them), a person's release of a node, and the resume in Slurm that the
controller carries out for that release and reports back."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from fleet import audit
from fleet.models import Cluster

from ..models import Advice, ControllerToken, NodeHealth, NodeHealthState


def _mark_drained(advice: Advice, detail: dict[str, Any], at: datetime) -> None:
    health, _ = NodeHealth.objects.select_for_update().get_or_create(
        cluster=advice.cluster, name=str(detail.get("node", ""))
    )
    health.state, health.drained_at = NodeHealthState.DRAINED, at
    health.drain_reason = f"advice {advice.pk}: " + "; ".join(advice.reasons)[:500]
    # Empty when a person's drain was there already: then it is theirs to undo, not ours.
    health.slurm_reason = str(detail.get("reason", ""))[:255]
    health.resume_requested_at, health.resume_outcome = None, ""
    health.save()


def _mark_excluded(advice: Advice, nodes: list[str], at: datetime) -> None:
    """The nodes this advice took out of its job (the anomaly's own: those excluded before
    were counted when they were taken out), for the circuit breaker."""
    fresh = set(nodes) & set(advice.anomaly.implicated_hosts)
    for node in sorted(fresh):
        health, _ = NodeHealth.objects.select_for_update().get_or_create(
            cluster=advice.cluster, name=str(node)
        )
        health.excluded_at = at
        health.save(update_fields=["excluded_at"])


@transaction.atomic
def release_node(
    actor: str, cluster: Cluster, name: str, reason: str, *, now: datetime | None = None
) -> NodeHealth:
    """A person returns a drained or suspect node to service; the reason is required. A node
    our drain took out of Slurm is resumed there by the controller (``pending_resumes``), and
    workloads that excluded it before may use it again."""
    if not reason.strip():
        raise ValueError("releasing a node needs a reason")
    health = NodeHealth.objects.select_for_update().get(cluster=cluster, name=name)
    previous, now = health.state, now or timezone.now()
    health.state, health.released_at, health.released_by = NodeHealthState.HEALTHY, now, actor
    health.release_reason, health.strikes, health.would_isolate = reason, [], []
    resume = previous == NodeHealthState.DRAINED and bool(health.slurm_reason)
    if resume:
        health.resume_requested_at, health.resume_outcome = now, ""
    health.save()
    audit.record(
        actor,
        "node.released",
        health,
        cluster=cluster,
        payload={"from": previous, "reason": reason, "resume_in_slurm": resume},
    )
    return health


def pending_resumes(cluster: Cluster) -> QuerySet[NodeHealth]:
    """Released nodes our drain took out of Slurm, for the controller to resume there."""
    return NodeHealth.objects.filter(cluster=cluster, resume_requested_at__isnull=False).order_by(
        "name"
    )


RESUME_OUTCOMES = {
    "resumed": "node.resumed",
    # Nothing to do or not ours to do: said so in the trail, and Slurm is left as it is.
    "in_service": "node.resume_skipped",
    "not_ours": "node.resume_skipped",
    "unknown_node": "node.resume_skipped",
}


def record_resume(
    controller: ControllerToken, name: str, requested_at: datetime, outcome: str, detail: str
) -> bool:
    """The controller's report on a release it was asked to carry into Slurm, audited. Only
    the request it read is settled: a replay, or a report on an older request, changes
    nothing (False)."""
    with transaction.atomic():
        health = (
            NodeHealth.objects.select_for_update()
            .filter(cluster=controller.cluster, name=name, resume_requested_at=requested_at)
            .first()
        )
        if health is None:
            return False
        health.resume_requested_at, health.resume_outcome = None, outcome
        if outcome == "resumed":
            health.slurm_reason = ""
        health.save()
        payload = {"outcome": outcome, "detail": detail[:500], "requested_at": str(requested_at)}
        audit.record(
            controller.actor,
            RESUME_OUTCOMES[outcome],
            health,
            cluster=controller.cluster,
            payload=payload,
        )
    return True
