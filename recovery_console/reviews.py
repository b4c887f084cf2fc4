"""Reviews of advice and the workflow that moves a cluster to action mode (DESIGN.md §4).

Reviewers label advice: agree, or disagree and name the action they would have taken. The
*agreement* of a cluster is measured over the advice labelled in the policy's window
(``approval_window_days``, by the time of the latest label):

- an advice counts once however many people labelled it;
- it counts as *agreed* only when every current label on it agrees (one dissent makes it a
  disagreement: action mode acts without a person, so doubt counts against it);
- a label counts only for the advice's generation it was given on: when sharper evidence
  revises the advice, it needs labelling again.

An operator asks for action mode; the request records the agreement measured then. A second
person with the approver role approves it, and only while the agreement measured at that moment
meets the policy (``approval_min_agreement`` over at least ``approval_min_labelled`` advices).
Going back to monitor mode is immediate. Every step, refusals included, is audited with the
person as ``user:<username>``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import Count, F, Max, Q, QuerySet
from django.utils import timezone

from remediation.models import Advice, AdviceAction
from remediation.policy import parse_policy

from . import audit, events, services
from .models import Cluster, ClusterMode, ModeChangeRequest, ModeRequestStatus, Review
from .roles import APPROVER, OPERATOR, REVIEWER, has_role


class ApprovalRefused(Exception):
    """The workflow refused a step; ``reason`` says why in words a person understands."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class RoleMissing(ApprovalRefused, PermissionDenied):
    """The person lacks the role the step needs (views and the API answer 403)."""


def actor_of(user: Any) -> str:
    return f"user:{user.username}"


def _require(user: Any, role: str, doing: str) -> None:
    if not has_role(user, role):
        raise RoleMissing(f"{doing} needs the {role} role")


# --- labelling -------------------------------------------------------------------------------


def label_advice(
    user: Any, advice: Advice, *, agrees: bool, preferred_action: str = "", comment: str = ""
) -> Review:
    """Record (or change) ``user``'s label on ``advice``. Agreeing means preferring the advised
    action, so ``preferred_action`` may be left empty then."""
    _require(user, REVIEWER, "labelling advice")
    preferred = preferred_action or (advice.action if agrees else "")
    if preferred not in AdviceAction.values:
        raise ValueError(
            f"{preferred or '(none)'} is not an action: use one of {', '.join(AdviceAction.values)}"
        )
    if agrees and preferred != advice.action:
        raise ValueError(
            f"agreeing with {advice.action} but preferring {preferred} is a contradiction"
        )
    with transaction.atomic():
        advice = Advice.objects.select_related("cluster", "workload", "attempt").get(pk=advice.pk)
        review = Review.objects.select_for_update().filter(advice=advice, reviewer=user).first()
        label = {
            "agrees": agrees,
            "preferred_action": preferred,
            "comment": comment,
            "generation": advice.generation,
        }
        if review is None:
            review = _create_review(user, advice, label)
        else:
            _relabel(user, review, advice, label)
        events.send_cluster_changed(advice.cluster_id, "reviews")
    return review


def _create_review(user: Any, advice: Advice, label: dict[str, Any]) -> Review:
    now = timezone.now()
    review = Review.objects.create(
        advice=advice, reviewer=user, created_at=now, updated_at=now, **label
    )
    _audit_review(user, "review.created", review, advice, {"advice_action": advice.action, **label})
    return review


def _relabel(user: Any, review: Review, advice: Advice, label: dict[str, Any]) -> None:
    changed = {
        k: {"from": getattr(review, k), "to": v}
        for k, v in label.items()
        if getattr(review, k) != v
    }
    if not changed:
        return
    for name, value in label.items():
        setattr(review, name, value)
    review.updated_at = timezone.now()
    review.save()
    _audit_review(user, "review.updated", review, advice, changed)


def _audit_review(
    user: Any, verb: str, review: Review, advice: Advice, payload: dict[str, Any]
) -> None:
    audit.record(
        actor_of(user),
        verb,
        review,
        cluster=advice.cluster,
        workload=advice.workload,
        attempt=advice.attempt,
        payload={"advice": advice.pk, **payload},
    )


def awaiting_review(cluster: Cluster, reviewer: Any = None) -> QuerySet[Advice]:
    """Advice without a label on its current generation (by ``reviewer`` when given, else by
    anyone), newest first: the review queue."""
    labelled = Review.objects.filter(generation=F("advice__generation"))
    if reviewer is not None:
        labelled = labelled.filter(reviewer=reviewer)
    return (
        Advice.objects.filter(cluster=cluster)
        .exclude(pk__in=labelled.values("advice_id"))
        .select_related("workload", "attempt", "anomaly")
        .order_by("-decided_at", "-pk")
    )


# --- measuring agreement ---------------------------------------------------------------------


@dataclass(frozen=True)
class Agreement:
    """How often reviewers agreed with a cluster's advice in the policy's window, and whether
    that is enough to approve action mode."""

    agreed: int
    labelled: int
    rate: float | None
    window_days: int
    min_agreement: float
    min_labelled: int
    met: bool

    @property
    def shortfall(self) -> str:
        """Why the threshold is not met, in words; empty when it is."""
        if self.met:
            return ""
        if self.labelled < self.min_labelled:
            return (
                f"only {self.labelled} advices were labelled in the last {self.window_days} days;"
                f" at least {self.min_labelled} are needed"
            )
        return (
            f"reviewers agreed with {self.agreed} of {self.labelled} advices"
            f" ({_percent(self.rate)}) in the last {self.window_days} days;"
            f" at least {_percent(self.min_agreement)} is needed"
        )


def _percent(rate: float | None) -> str:
    return "n/a" if rate is None else f"{rate * 100:.1f}%".replace(".0%", "%")


def agreement(cluster: Cluster, now: datetime | None = None) -> Agreement:
    """The agreement measured over the policy's window, ending at ``now``."""
    policy = parse_policy(cluster.policy)
    now = now or timezone.now()
    verdicts = _verdicts(cluster, now - timedelta(days=policy.approval_window_days), now)
    labelled = len(verdicts)
    agreed = sum(1 for _, agrees in verdicts if agrees)
    # A small tolerance: 45 of 50 is 90% even where the division rounds below it.
    met = labelled >= policy.approval_min_labelled and (
        agreed >= policy.approval_min_agreement * labelled - 1e-9
    )
    return Agreement(
        agreed=agreed,
        labelled=labelled,
        rate=agreed / labelled if labelled else None,
        window_days=policy.approval_window_days,
        min_agreement=policy.approval_min_agreement,
        min_labelled=policy.approval_min_labelled,
        met=met,
    )


def agreement_by_day(
    cluster: Cluster, days: int = 28, now: datetime | None = None
) -> list[tuple[date, int, int]]:
    """(day, agreed, labelled) for each of the last ``days`` UTC days, oldest first; each
    advice counts on the day of its latest label, as in ``agreement``."""
    now = now or timezone.now()
    today = timezone.localdate(now, timezone=UTC)
    first = today - timedelta(days=days - 1)
    start = datetime.combine(first, datetime.min.time(), tzinfo=UTC)
    counts = {first + timedelta(days=i): [0, 0] for i in range(days)}
    for at, agrees in _verdicts(cluster, start, now):
        day = counts[timezone.localdate(at, timezone=UTC)]
        day[0] += int(agrees)
        day[1] += 1
    return [(day, agreed, labelled) for day, (agreed, labelled) in counts.items()]


def _verdicts(cluster: Cluster, since: datetime, until: datetime) -> list[tuple[datetime, bool]]:
    """(latest label time, agreed) per advice labelled in [since, until]."""
    rows = (
        Review.objects.filter(advice__cluster=cluster, generation=F("advice__generation"))
        .values("advice_id")
        .annotate(last=Max("updated_at"), dissent=Count("id", filter=Q(agrees=False)))
        .filter(last__gte=since, last__lte=until)
        .order_by()
    )
    return [(row["last"], row["dissent"] == 0) for row in rows]


# --- the mode-approval workflow --------------------------------------------------------------


def request_action_mode(user: Any, cluster: Cluster, note: str = "") -> ModeChangeRequest:
    """Ask for ``cluster`` to move to action mode, recording the agreement measured now."""
    _require(user, OPERATOR, "requesting action mode")
    with transaction.atomic():
        cluster = _locked(cluster)
        if cluster.mode == ClusterMode.ACTION:
            raise ApprovalRefused(f"{cluster.name} is already in action mode")
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
        request = ModeChangeRequest.objects.select_for_update().get(pk=request.pk)
        measured = agreement(cluster)
        refusal = _approval_refusal(user, request, cluster, measured)
        if refusal is None:
            _decide(user, request, ModeRequestStatus.APPROVED, "")
            _audit_request(user, "mode_request.approved", request, _figures(measured))
            _set_action_mode(user, cluster, request, measured)
            events.send_cluster_changed(cluster.pk, "mode")
            return request
    raise _refused(user, request, refusal, measured)


def _approval_refusal(
    user: Any, request: ModeChangeRequest, cluster: Cluster, measured: Agreement
) -> ApprovalRefused | None:
    if request.status != ModeRequestStatus.PENDING:
        return ApprovalRefused(f"this request was already {request.status}")
    if not has_role(user, APPROVER):
        return RoleMissing("approving action mode needs the approver role")
    if request.requested_by_id == user.pk:
        return ApprovalRefused(
            "you asked for this change yourself: a second person with the approver role"
            " must approve it"
        )
    if cluster.mode == ClusterMode.ACTION:
        return ApprovalRefused(f"{cluster.name} is already in action mode")
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
    if request.requested_by_id != user.pk:
        _require(user, APPROVER, "rejecting a request for action mode")
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
    _require(user, OPERATOR, "returning to monitor mode")
    if Cluster.objects.get(pk=cluster.pk).mode == ClusterMode.MONITOR:
        return cluster
    with transaction.atomic():
        cluster = services.return_to_monitor_mode(actor_of(user), cluster, reason)
        events.send_cluster_changed(cluster.pk, "mode")
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
