"""The workflow that moves a cluster to action mode, and back (DESIGN.md §4).

An operator asks for action mode; the request records the agreement measured then
(``reviews.agreement``). A second person with the approver role approves it, and only while the
agreement measured at that moment meets the policy (``approval_min_agreement`` over at least
``approval_min_labelled`` advices). Going back to monitor mode is immediate. Every step,
refusals included, is audited with the person as ``user:<username>``.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils import timezone

from fleet import audit, events
from fleet.models import Cluster, ClusterMode
from remediation import services as remediation

from .models import ModeChangeRequest, ModeRequestStatus
from .reviews import Agreement, ApprovalRefused, RoleMissing, _require, actor_of, agreement
from .roles import APPROVER, OPERATOR, has_role


def request_action_mode(user: Any, cluster: Cluster, note: str = "") -> ModeChangeRequest:
    """Ask for ``cluster`` to move to action mode, recording the agreement measured now."""
    _require(user, OPERATOR, "requesting action mode", cluster)
    with transaction.atomic():
        cluster = _locked(cluster)
        if cluster.mode == ClusterMode.ACTION:
            raise ApprovalRefused(f"{cluster.name} is already in action mode")
        # Under the cluster's lock: two operators asking at once cannot both create a request.
        pending = _pending(cluster)
        if pending is not None:
            raise ApprovalRefused(
                f"a request for action mode on {cluster.name} is already pending"
                f" (#{pending.pk}, asked by {pending.requested_by.username})"
            )
        measured = agreement(cluster)
        request = ModeChangeRequest.objects.create(
            cluster=cluster,
            requested_by=user,
            requested_at=timezone.now(),
            note=note,
            agreement_rate=measured.rate,
            labelled=measured.labelled,
        )
        _audit_request(user, "mode_request.created", request, {"note": note, **_figures(measured)})
        events.send_cluster_changed(cluster.pk, "mode")
    return request


def approve_mode_request(user: Any, request: ModeChangeRequest) -> ModeChangeRequest:
    """Approve a pending request: only a person with the approver role who did not ask for it,
    and only while the agreement measured now meets the policy. The cluster then acts."""
    with transaction.atomic():
        cluster = _locked(request.cluster)
        # Read again under the lock: the caller's copy may have been decided meanwhile.
        request = ModeChangeRequest.objects.select_for_update().get(pk=request.pk)
        measured = agreement(cluster)
        refusal = _approval_refusal(user, request, cluster, measured)
        if refusal is None:
            _decide(user, request, ModeRequestStatus.APPROVED, "")
            _audit_request(user, "mode_request.approved", request, _figures(measured))
            _set_action_mode(user, cluster, request, measured)
            events.send_cluster_changed(cluster.pk, "mode")
            return request
    # Outside the block: its locks are released before the refusal is audited and raised.
    raise _refused(user, request, refusal, measured)


def second_person_refusal(user: Any, request: Any, approving: str) -> ApprovalRefused | None:
    """Why ``user`` may not approve a pending two-person request (a mode or a settings
    change), or None: it must still be pending, and the approver someone other than who asked."""
    if request.status != ModeRequestStatus.PENDING:
        return ApprovalRefused(f"this request was already {request.status}")
    if not has_role(user, APPROVER, request.cluster_id):
        return RoleMissing(f"approving {approving} needs the approver role")
    # Four eyes: holding the approver role is not enough when you are the one who asked.
    if request.requested_by_id == user.pk:
        return ApprovalRefused(
            "you asked for this change yourself: a second person with the approver role"
            " must approve it"
        )
    return None


def _approval_refusal(
    user: Any, request: ModeChangeRequest, cluster: Cluster, measured: Agreement
) -> ApprovalRefused | None:
    refused = second_person_refusal(user, request, "action mode")
    if refused is not None:
        return refused
    if cluster.mode == ClusterMode.ACTION:
        return ApprovalRefused(f"{cluster.name} is already in action mode")
    # Enforced now, not when asked: the agreement may have dropped since the request.
    if not measured.met:
        return ApprovalRefused(
            f"the agreement is below the policy's threshold: {measured.shortfall}"
        )
    return None


def _refused(
    user: Any, request: ModeChangeRequest, refusal: ApprovalRefused, measured: Agreement
) -> ApprovalRefused:
    # Recorded after the rollback, in its own transaction: a refused step is still a step.
    with transaction.atomic():
        _audit_request(
            user,
            "mode_request.approval_refused",
            request,
            {"reason": refusal.reason, **_figures(measured)},
        )
    return refusal


def reject_mode_request(user: Any, request: ModeChangeRequest, reason: str) -> ModeChangeRequest:
    """Turn a pending request down (an approver), or withdraw it (the person who asked)."""
    # The requester may always withdraw; turning down someone else's request needs the role.
    if request.requested_by_id != user.pk:
        _require(user, APPROVER, "rejecting a request for action mode", request.cluster_id)
    if not reason.strip():
        raise ApprovalRefused("say why the request is rejected")
    with transaction.atomic():
        cluster = _locked(request.cluster)
        request = ModeChangeRequest.objects.select_for_update().get(pk=request.pk)
        if request.status != ModeRequestStatus.PENDING:
            raise ApprovalRefused(f"this request was already {request.status}")
        _decide(user, request, ModeRequestStatus.REJECTED, reason)
        _audit_request(user, "mode_request.rejected", request, {"reason": reason})
        events.send_cluster_changed(cluster.pk, "mode")
    return request


def back_to_monitor(user: Any, cluster: Cluster, reason: str) -> Cluster:
    """Return ``cluster`` to monitor mode at once (any operator); a cluster already in monitor
    mode is left as it is."""
    _require(user, OPERATOR, "returning to monitor mode", cluster)
    # Already there: nothing to audit or announce, a repeated click is not a mode change.
    if Cluster.objects.get(pk=cluster.pk).mode == ClusterMode.MONITOR:
        return cluster
    with transaction.atomic():
        cluster = return_to_monitor_mode(actor_of(user), cluster, reason)
        events.send_cluster_changed(cluster.pk, "mode")
    return cluster


@transaction.atomic
def return_to_monitor_mode(actor: str, cluster: Cluster, reason: str) -> Cluster:
    """Going back to monitor mode is immediate for any operator; it is still audited. Advice
    already dispatched or claimed is withdrawn with it: nothing keeps acting in monitor mode."""
    cluster = Cluster.objects.select_for_update().get(pk=cluster.pk)
    previous = cluster.mode
    cluster.mode = ClusterMode.MONITOR
    cluster.save(update_fields=["mode", "updated_at"])
    withdrawn = remediation.withdraw_enforced_advice(
        actor, cluster, f"returned to monitor mode by {actor}" + (f": {reason}" if reason else "")
    )
    audit.record(
        actor,
        "cluster.mode_changed",
        cluster,
        cluster=cluster,
        payload={"from": previous, "to": cluster.mode, "reason": reason, "withdrawn": withdrawn},
    )
    return cluster


def pending_request(cluster: Cluster) -> ModeChangeRequest | None:
    """The cluster's pending request for action mode, if any."""
    return _pending(cluster)


def _locked(cluster: Cluster) -> Cluster:
    return Cluster.objects.select_for_update().get(pk=cluster.pk)


def _pending(cluster: Cluster) -> ModeChangeRequest | None:
    return (
        ModeChangeRequest.objects.filter(cluster=cluster, status=ModeRequestStatus.PENDING)
        .select_related("requested_by")
        .first()
    )


def _decide(user: Any, request: ModeChangeRequest, status: str, note: str) -> None:
    request.status = status
    request.decided_by = user
    request.decided_at = timezone.now()
    request.decision_note = note
    request.save(update_fields=["status", "decided_by", "decided_at", "decision_note"])


def _set_action_mode(
    user: Any, cluster: Cluster, request: ModeChangeRequest, measured: Agreement
) -> None:
    previous = cluster.mode
    cluster.mode = ClusterMode.ACTION
    cluster.save(update_fields=["mode", "updated_at"])
    audit.record(
        actor_of(user),
        "cluster.mode_changed",
        cluster,
        cluster=cluster,
        payload={
            "from": previous,
            "to": cluster.mode,
            "request": request.pk,
            # Both people are in the trail: who asked here, who approved as the entry's actor.
            "requested_by": actor_of(request.requested_by),
            **_figures(measured),
        },
    )


def _audit_request(
    user: Any, verb: str, request: ModeChangeRequest, payload: dict[str, Any]
) -> None:
    audit.record(actor_of(user), verb, request, cluster=request.cluster, payload=payload)


def _figures(measured: Agreement) -> dict[str, Any]:
    return {
        "agreed": measured.agreed,
        "labelled": measured.labelled,
        "agreement_rate": measured.rate,
        "min_agreement": measured.min_agreement,
        "min_labelled": measured.min_labelled,
        "window_days": measured.window_days,
        "met": measured.met,
    }
