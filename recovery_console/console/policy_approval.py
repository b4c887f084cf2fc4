"""Changing a cluster's settings, with the same four eyes as the mode where it matters.

A change that touches the approval gate (``approval_min_agreement``, ``approval_min_labelled``,
``approval_window_days``), or any change of the policy or the partition allowlist while the
cluster is in action mode, becomes a pending ``PolicyChangeRequest``: it applies only when a
second person with the approver role approves it (never the one who asked). Anything else
applies at once. Every step, refusals included, is audited as ``user:<username>``.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from fleet import audit, events
from fleet import services as fleet
from fleet.models import Cluster, ClusterMode
from remediation.core.policy import InvalidPolicy, parse_policy

from .approval import second_person_refusal
from .models import ModeRequestStatus, PolicyChangeRequest
from .reviews import ApprovalRefused, _require, actor_of
from .roles import ADMIN, APPROVER, OPERATOR

GATE = ("approval_min_agreement", "approval_min_labelled", "approval_window_days")
# What decides what the cluster does to jobs: in action mode, changing it needs a second person.
ACTING_SETTINGS = ("policy", "partitions_allowlist")
# Where the console connects and which secrets it reads: an admin's, like registering a cluster.
CONNECTIONS = ("scheduler", "telemetry")


def approval_needed(cluster: Cluster, changes: dict[str, Any]) -> list[str]:
    """Why these changes need a second person's approval, in words (empty: they do not)."""
    why = []
    if "policy" in changes and _gate(changes["policy"]) != _gate(cluster.policy):
        why.append("it changes the approval gate for action mode")
    acting = [k for k in ACTING_SETTINGS if k in changes and changes[k] != getattr(cluster, k)]
    if cluster.mode == ClusterMode.ACTION and acting:
        why.append(f"{cluster.name} is in action mode and it changes the {' and '.join(acting)}")
    return why


def _gate(document: object) -> tuple[Any, ...] | None:
    try:
        policy = parse_policy(document)
    except InvalidPolicy:
        return None  # refused by validation before any request is made
    return tuple(getattr(policy, name) for name in GATE)


def change_cluster_settings(
    user: Any,
    cluster: Cluster,
    changes: dict[str, Any],
    note: str = "",
    also_why: tuple[str, ...] = (),
) -> Cluster | PolicyChangeRequest:
    """Apply ``changes`` (operator), or, where ``approval_needed`` (or the caller's
    ``also_why``) says so, ask for them: the pending request is returned and nothing changes
    yet. Invalid settings raise ``ValidationError`` either way, before any request exists."""
    _require(user, OPERATOR, "changing cluster settings", cluster)
    if any(name in changes for name in CONNECTIONS):
        # Site-wide only: admin is never a membership.
        _require(user, ADMIN, "changing a cluster's scheduler or telemetry", None)
    with transaction.atomic():
        cluster = Cluster.objects.select_for_update().get(pk=cluster.pk)
        why = [*approval_needed(cluster, changes), *also_why]
        if not why:
            return fleet.update_cluster_settings(actor_of(user), cluster, **changes)
        _validate(cluster, changes)
        pending = pending_policy_request(cluster)
        if pending is not None:
            raise ApprovalRefused(
                f"a settings change on {cluster.name} is already waiting for approval"
                f" (#{pending.pk}, asked by {pending.requested_by.username})"
            )
        request = PolicyChangeRequest.objects.create(
            cluster=cluster,
            requested_by=user,
            requested_at=timezone.now(),
            changes=changes,
            base={name: getattr(cluster, name) for name in changes},
            why=why,
            note=note,
        )
        _audit(user, "policy_request.created", request, {"changes": changes, "why": why})
        events.send_cluster_changed(cluster.pk, "mode")
    return request


def _validate(cluster: Cluster, changes: dict[str, Any]) -> None:
    """The model's own validation on an unsaved copy, so a request never holds a bad document."""
    candidate = Cluster.objects.get(pk=cluster.pk)
    for name, value in changes.items():
        setattr(candidate, name, value)
    candidate.full_clean()


def approve_policy_request(user: Any, request: PolicyChangeRequest) -> PolicyChangeRequest:
    """Approve and apply a pending change: a person with the approver role who did not ask for
    it, while the settings it changes are still as they were when it was asked."""
    with transaction.atomic():
        cluster = Cluster.objects.select_for_update().get(pk=request.cluster_id)
        request = PolicyChangeRequest.objects.select_for_update().get(pk=request.pk)
        refusal = _approval_refusal(user, request, cluster)
        if refusal is None:
            try:
                fleet.update_cluster_settings(actor_of(user), cluster, **request.changes)
            except ValidationError as exc:
                problems = "; ".join(exc.messages)
                refusal = ApprovalRefused(f"the change is no longer valid: {problems}")
        if refusal is None:
            _decide(user, request, ModeRequestStatus.APPROVED, "")
            payload = {"requested_by": actor_of(request.requested_by), "changes": request.changes}
            _audit(user, "policy_request.approved", request, payload)
            events.send_cluster_changed(cluster.pk, "mode")
            return request
    # A refusal rolls everything back, then is audited in its own transaction.
    with transaction.atomic():
        _audit(user, "policy_request.approval_refused", request, {"reason": refusal.reason})
    raise refusal


def _approval_refusal(
    user: Any, request: PolicyChangeRequest, cluster: Cluster
) -> ApprovalRefused | None:
    refused = second_person_refusal(user, request, "a settings change")
    if refused is not None:
        return refused
    moved = sorted(k for k, v in request.base.items() if getattr(cluster, k) != v)
    if moved:
        # Approving would silently undo what changed meanwhile: the change is asked for again.
        return ApprovalRefused(f"the {', '.join(moved)} changed since this request: ask again")
    return None


def reject_policy_request(
    user: Any, request: PolicyChangeRequest, reason: str
) -> PolicyChangeRequest:
    """Turn a pending change down (an approver), or withdraw it (the person who asked)."""
    if request.requested_by_id != user.pk:
        _require(user, APPROVER, "rejecting a settings change", request.cluster_id)
    if not reason.strip():
        raise ApprovalRefused("say why the request is rejected")
    with transaction.atomic():
        request = PolicyChangeRequest.objects.select_for_update().get(pk=request.pk)
        if request.status != ModeRequestStatus.PENDING:
            raise ApprovalRefused(f"this request was already {request.status}")
        _decide(user, request, ModeRequestStatus.REJECTED, reason)
        _audit(user, "policy_request.rejected", request, {"reason": reason})
        events.send_cluster_changed(request.cluster_id, "mode")
    return request


def pending_policy_request(cluster: Cluster) -> PolicyChangeRequest | None:
    return (
        PolicyChangeRequest.objects.filter(cluster=cluster, status=ModeRequestStatus.PENDING)
        .select_related("requested_by")
        .first()
    )


def _decide(user: Any, request: PolicyChangeRequest, status: str, note: str) -> None:
    request.status, request.decided_by, request.decided_at = status, user, timezone.now()
    request.decision_note = note
    request.save(update_fields=["status", "decided_by", "decided_at", "decision_note"])


def _audit(user: Any, verb: str, request: PolicyChangeRequest, payload: dict[str, Any]) -> None:
    audit.record(actor_of(user), verb, request, cluster=request.cluster, payload=payload)
