"""What the advice and reconciliation services share: the system's actor, an advice's step in
the audit trail (with the events that tell the pages, after the commit), and the withdrawal of
an advice."""

from __future__ import annotations

from typing import Any

from django.utils import timezone

from fleet import audit, events

from ..models import Advice, AdviceState

ACTOR = "system:remediation"


def _audit(advice: Advice, verb: str, payload: dict[str, Any], actor: str = ACTOR) -> None:
    """Record an advice's step in the trail and tell the pages showing it, after the commit."""
    audit.record(
        actor,
        verb,
        advice,
        cluster=advice.cluster,
        workload=advice.workload,
        attempt=advice.attempt,
        payload=payload,
    )
    events.send_cluster_changed(advice.cluster_id, "reviews")
    events.send_workloads_changed(advice.cluster_id, [advice.workload_id])


def _withdraw(advice: Advice, reason: str, actor: str) -> None:
    previous = advice.state
    advice.state, advice.enforce, advice.updated_at = AdviceState.WITHDRAWN, False, timezone.now()
    advice.disposition, advice.disposition_reason = "withdrawn", reason
    advice.save(
        update_fields=["state", "enforce", "updated_at", "disposition", "disposition_reason"]
    )
    payload = {"from": previous, "generation": advice.generation, "reason": reason}
    _audit(advice, "advice.withdrawn", payload | {"claimed_by": advice.claimed_by}, actor)
