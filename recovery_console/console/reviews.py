"""Reviews of advice, and the agreement they measure (DESIGN.md §4).

Reviewers label advice: agree, or disagree and name the action they would have taken. The
*agreement* of a cluster is measured over the advice labelled in the policy's window
(``approval_window_days``, by the time of the latest label):

- an advice counts once however many people labelled it;
- it counts as *agreed* only when every current label on it agrees (one dissent makes it a
  disagreement: action mode acts without a person, so doubt counts against it);
- a label counts only for the advice's generation it was given on: when sharper evidence
  revises the advice, it needs labelling again.

The agreement is what the mode-approval workflow (``approval``) weighs. Every label is audited
with the person as ``user:<username>``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import Count, F, Max, Q, QuerySet
from django.utils import timezone

from fleet import audit, events
from fleet.core.taxonomy import Action
from fleet.models import Cluster
from remediation.core.policy import parse_policy
from remediation.models import Advice

from .models import Review
from .roles import REVIEWER, has_role


class ApprovalRefused(Exception):
    """The workflow refused a step; ``reason`` says why in words a person understands."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class RoleMissing(ApprovalRefused, PermissionDenied):
    """The person lacks the role the step needs (views and the API answer 403)."""


# How people appear in the audit trail; controllers appear with their own prefix.
def actor_of(user: Any) -> str:
    return f"user:{user.username}"


def _require(user: Any, role: str, doing: str, cluster: Any) -> None:
    """Refuse unless ``user`` holds ``role`` on ``cluster`` (site-wide or by membership)."""
    if not has_role(user, role, cluster):
        raise RoleMissing(f"{doing} needs the {role} role")


# --- labelling -------------------------------------------------------------------------------


def label_advice(
    user: Any, advice: Advice, *, agrees: bool, preferred_action: str = "", comment: str = ""
) -> Review:
    """Record (or change) ``user``'s label on ``advice``. Agreeing means preferring the advised
    action, so ``preferred_action`` may be left empty then."""
    _require(user, REVIEWER, "labelling advice", advice.cluster_id)
    preferred = preferred_action or (advice.action if agrees else "")
    if preferred not in set(Action):
        raise ValueError(
            f"{preferred or '(none)'} is not an action: use one of {', '.join(Action)}"
        )
    if agrees and preferred != advice.action:
        raise ValueError(
            f"agreeing with {advice.action} but preferring {preferred} is a contradiction"
        )
    with transaction.atomic():
        # Read again in the transaction: the label must carry the generation current now.
        advice = Advice.objects.select_related("cluster", "workload", "attempt").get(pk=advice.pk)
        # Locks an existing label against a concurrent relabel; two first labels at once are
        # stopped by the unique constraint instead.
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
    # The same label again: no write, no audit entry, and ``updated_at`` keeps its time.
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
    # Labels on an older generation do not count: revised advice is back in the queue.
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
    # UTC days: everyone sees the same buckets, whatever their own time zone.
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


# --- precision per category, action and rule ---------------------------------------------------

PRECISION_DIMENSIONS = ("category", "action", "rule")


@dataclass(frozen=True)
class PrecisionRow:
    """Of the advice labelled with this category, action or rule, how much reviewers agreed
    with: the share an operator can expect to be right if it were carried out unseen."""

    dimension: str  # category | action | rule
    value: str
    agreed: int
    labelled: int

    @property
    def precision(self) -> float | None:
        return self.agreed / self.labelled if self.labelled else None

    @property
    def precision_text(self) -> str:
        return _percent(self.precision)


def precision(cluster: Cluster, now: datetime | None = None) -> list[PrecisionRow]:
    """Per category, per action and per rule, over the policy's approval window, counted as
    ``agreement`` counts (one advice once, agreed only without dissent)."""
    policy = parse_policy(cluster.policy)
    now = now or timezone.now()
    since = now - timedelta(days=policy.approval_window_days)
    rows = (
        Review.objects.filter(advice__cluster=cluster, generation=F("advice__generation"))
        .values("advice_id", "advice__category", "advice__action", "advice__rule")
        .annotate(last=Max("updated_at"), dissent=Count("id", filter=Q(agrees=False)))
        .filter(last__gte=since, last__lte=now)
        .order_by()
    )
    counts: dict[tuple[str, str], list[int]] = {}
    for row in rows:
        values = {
            "category": row["advice__category"],
            "action": row["advice__action"],
            "rule": row["advice__rule"],
        }
        for dimension in PRECISION_DIMENSIONS:
            key = (dimension, values[dimension] or "(none)")
            tally = counts.setdefault(key, [0, 0])
            tally[0] += int(row["dissent"] == 0)
            tally[1] += 1
    return [
        PrecisionRow(dimension, value, agreed, labelled)
        for (dimension, value), (agreed, labelled) in sorted(
            counts.items(), key=lambda item: (PRECISION_DIMENSIONS.index(item[0][0]), item[0][1])
        )
    ]
