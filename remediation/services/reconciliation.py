"""What the controllers report: their tokens, the advice they should look at, their claims and
settlements of an advice (scoped to the generation they acted on: a conditional update, so a
second controller is refused) and the steps they took. Each report re-reads the cluster, and
advice it may no longer enforce is withdrawn and the report refused."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import Exists, OuterRef, Q, QuerySet
from django.utils import timezone

from fleet import audit
from fleet import services as fleet
from fleet.core.taxonomy import Action
from fleet.models import Cluster, ClusterMode

from ..models import (
    ACTIVE_ADVICE_STATES,
    Advice,
    AdviceState,
    ControllerToken,
    DesiredState,
    Milestone,
    token_digest,
)
from .common import ACTOR, _audit, _withdraw
from .isolation import _mark_drained, _mark_excluded


class AdviceAlreadyClaimed(Exception):
    """Another controller claimed this advice first."""


class AdviceWithdrawn(Exception):
    """The advice may no longer be enforced (its cluster is in monitor mode, or its partition
    left the action allowlist): a controller stops at the step in hand."""


class StaleGeneration(Exception):
    """A report about a generation of the advice that is no longer current."""


def _enforcement_refusal(advice: Advice) -> str:
    """Why this advice may no longer be acted on, read afresh from its cluster ("" if it may).
    Dispatched or claimed advice that no longer may is withdrawn here, and stays so."""
    if advice.state == AdviceState.WITHDRAWN:
        return advice.disposition_reason or "withdrawn"
    if advice.state not in (AdviceState.DISPATCHED, AdviceState.CLAIMED):
        return ""  # proposed is refused by ``enforce``; settled advice only takes replays
    cluster = Cluster.objects.get(pk=advice.cluster_id)
    allowlist = cluster.partitions_allowlist
    if cluster.mode != ClusterMode.ACTION:
        reason = f"{cluster.name} is in monitor mode"
    elif allowlist and advice.attempt.partition not in allowlist:
        reason = f"partition {advice.attempt.partition!r} is outside the action allowlist"
    else:
        return ""
    _withdraw(advice, reason, ACTOR)
    return reason


def _withdrawn(advice: Advice, reason: str) -> AdviceWithdrawn:
    return AdviceWithdrawn(f"advice {advice.pk} was withdrawn ({reason}): stop at the step in hand")


# --- controllers -----------------------------------------------------------------------------


@dataclass(frozen=True)
class IssuedToken:
    token: ControllerToken
    secret: str  # shown once


@transaction.atomic
def issue_controller_token(actor: str, cluster: Cluster, name: str) -> IssuedToken:
    secret = "rcc_" + secrets.token_urlsafe(32)
    token = ControllerToken.objects.create(
        cluster=cluster, name=name, digest=token_digest(secret), created_at=timezone.now()
    )
    audit.record(actor, "controller_token.issued", token, cluster=cluster, payload={"name": name})
    return IssuedToken(token, secret)


def authenticate_controller(secret: str) -> ControllerToken | None:
    return (
        ControllerToken.objects.select_related("cluster")
        .filter(digest=token_digest(secret), revoked_at__isnull=True)
        .first()
    )


def active_advice(cluster: Cluster) -> QuerySet[Advice]:
    """What a controller should look at, oldest first: proposed (monitor mode, never to be
    acted on), dispatched and claimed advice; and withdrawn advice whose requeue-hold was never
    released, so the watchdog still releases that job (it fails open)."""
    holds = (Milestone.Step.REQUEUE_HOLD, Milestone.Step.HOLD)
    hold = Milestone.objects.filter(advice=OuterRef("pk"), action__in=holds)
    release = Milestone.objects.filter(advice=OuterRef("pk"), action=Milestone.Step.RELEASE)
    left_held = Q(state=AdviceState.WITHDRAWN) & Exists(hold) & ~Exists(release)
    return (
        Advice.objects.filter(cluster=cluster)
        .filter(Q(state__in=ACTIVE_ADVICE_STATES) | left_held)
        .exclude(action=Action.NONE)
        .select_related("attempt")
        .order_by("pk")
    )


@dataclass(frozen=True)
class Reconciled:
    advice: Advice
    changed: bool


def reconcile(
    controller: ControllerToken,
    advice_id: int,
    observed_generation: int,
    disposition: str,
    reason: str,
) -> Reconciled:
    """A controller's report on one advice, scoped to the generation it acted on. ``pending``
    claims it (a conditional update: a second controller is refused), ``converged`` marks it
    executed, ``abandoned`` failed. Replays and stale generations change nothing. Each report
    re-reads the cluster: advice it may no longer enforce is withdrawn and the report refused
    (``AdviceWithdrawn``), committed first so the withdrawal stands."""
    with transaction.atomic():
        # No join in a locking read: it would lock the joined rows too (the cluster's among them).
        advice = Advice.objects.select_for_update().get(pk=advice_id, cluster=controller.cluster)
        refusal = _enforcement_refusal(advice)
        if not refusal:
            return _reconcile(controller, advice, observed_generation, disposition, reason)
    raise _withdrawn(advice, refusal)


def _reconcile(
    controller: ControllerToken,
    advice: Advice,
    observed_generation: int,
    disposition: str,
    reason: str,
) -> Reconciled:
    if observed_generation != advice.generation:
        raise StaleGeneration(f"advice {advice.pk} is at generation {advice.generation}")
    if not advice.enforce:
        raise PermissionError("this advice is published in monitor mode and must not be acted on")
    if advice.claimed_by and advice.claimed_by != controller.actor:
        raise AdviceAlreadyClaimed(advice.pk)
    if disposition == "pending":
        return Reconciled(advice, _claim(controller, advice))
    return Reconciled(advice, _settle(controller, advice, disposition, reason))


def _claim(controller: ControllerToken, advice: Advice) -> bool:
    now = timezone.now()
    claimed = Advice.objects.filter(pk=advice.pk, state=AdviceState.DISPATCHED).update(
        state=AdviceState.CLAIMED,
        claimed_by=controller.actor,
        claimed_at=now,
        observed_generation=advice.generation,
        disposition="pending",
        updated_at=now,
    )
    if claimed != 1:
        if advice.claimed_by == controller.actor:
            return False  # a replay of our own claim
        raise AdviceAlreadyClaimed(advice.pk)  # another controller got there first
    advice.refresh_from_db()
    _audit(advice, "advice.claimed", {"generation": advice.generation}, controller.actor)
    return True


def _settle(controller: ControllerToken, advice: Advice, disposition: str, reason: str) -> bool:
    target = {"converged": AdviceState.EXECUTED, "abandoned": AdviceState.FAILED}[disposition]
    if advice.state == target:
        return False
    if advice.state != AdviceState.CLAIMED:
        _claim(controller, advice)
        advice.refresh_from_db()
    now = timezone.now()
    advice.state, advice.disposition, advice.disposition_reason = target, disposition, reason
    advice.observed_generation, advice.updated_at = advice.generation, now
    if target == AdviceState.EXECUTED:
        advice.executed_at = now
    advice.save()
    _audit(
        advice,
        f"advice.{target}",
        {"generation": advice.generation, "reason": reason},
        controller.actor,
    )
    if target == AdviceState.EXECUTED and advice.desired_state == DesiredState.CANCELLED:
        fleet.stop_workload(controller.actor, advice.workload_id, stop_reason(advice), now)
    return True


def stop_reason(advice: Advice) -> str:
    """What a workload stopped on this advice shows: the decision's reason, which says what
    to fix."""
    return advice.reasons[0] if advice.reasons else f"advice {advice.pk}: stop"


def record_milestone(
    controller: ControllerToken,
    advice_id: int,
    key: str,
    step: str,
    at: datetime,
    detail: dict[str, Any],
) -> tuple[Milestone, bool]:
    """Record a step a controller took; a replay with the same key records nothing. A step
    reported on advice no longer to be enforced is still recorded (Slurm did it), then refused
    (``AdviceWithdrawn``), so the controller takes no further step."""
    with transaction.atomic():
        advice = Advice.objects.select_for_update().get(pk=advice_id, cluster=controller.cluster)
        refusal = _enforcement_refusal(advice)
        milestone, created = Milestone.objects.get_or_create(
            cluster=controller.cluster,
            idempotency_key=key,
            defaults={
                "advice": advice,
                "action": step,
                "at": at,
                "recorded_at": timezone.now(),
                "controller": controller.actor,
                "detail": detail,
            },
        )
        if created:
            payload = {"at": at.isoformat(), **detail} | ({"withdrawn": True} if refusal else {})
            _audit(advice, f"controller.{step}", payload, controller.actor)
            if step in (Milestone.Step.REQUEUE_HOLD, Milestone.Step.CANCEL):
                # What the attempt prints from now on is the teardown this step caused.
                fleet.note_ended_by_us(advice.attempt_id, at)
            if step == Milestone.Step.DRAIN_NODE:
                _mark_drained(advice, detail, at)
            elif step == Milestone.Step.UPDATE_EXCLUSIONS:
                _mark_excluded(advice, detail.get("nodes") or advice.exclude_nodes, at)
    if refusal:
        raise _withdrawn(advice, refusal)
    return milestone, created
