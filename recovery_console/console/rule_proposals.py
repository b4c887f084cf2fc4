"""Rule-table edits that reviewers' corrections propose (``remediation.core.proposals``), read
from the labels of the cluster's approval window, and asking for one: a settings change that
always waits for a second person with the approver role, like any change of the gate."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, cast

from django.db.models import F
from django.utils import timezone

from fleet import audit
from fleet.models import Cluster
from remediation.core.policy import parse_policy
from remediation.core.proposals import LabelledAdvice, RuleProposal, propose

from .models import PolicyChangeRequest, Review
from .policy_approval import change_cluster_settings
from .reviews import ApprovalRefused, _require, actor_of
from .roles import OPERATOR

WHY = "it is a rule edit proposed from reviewers' corrections"


def labelled_advice(cluster: Cluster, now: datetime | None = None) -> list[LabelledAdvice]:
    """Each advice labelled in the policy's approval window, with its labels' actions."""
    policy = parse_policy(cluster.policy)
    now = now or timezone.now()
    since = now - timedelta(days=policy.approval_window_days)
    rows = (
        Review.objects.filter(
            advice__cluster=cluster,
            generation=F("advice__generation"),
            updated_at__gte=since,
            updated_at__lte=now,
        )
        .values_list(
            "advice_id",
            "advice__anomaly__signature",
            "advice__category",
            "advice__action",
            "agrees",
            "preferred_action",
        )
        .order_by("advice_id")
    )
    grouped: dict[int, tuple[str, str, list[str]]] = {}
    for advice_id, signature, category, action, agrees, preferred in rows:
        key = signature or category
        grouped.setdefault(advice_id, (key, action, []))[2].append(action if agrees else preferred)
    return [
        LabelledAdvice(advice_id, key, action, tuple(preferred))
        for advice_id, (key, action, preferred) in grouped.items()
    ]


def rule_proposals(cluster: Cluster, now: datetime | None = None) -> list[RuleProposal]:
    """The edits the labels support, leaving out rules the policy already has."""
    rules = parse_policy(cluster.policy).limits.rules
    return [p for p in propose(labelled_advice(cluster, now)) if rules.get(p.key) != p.action]


def ask_for_rule_edit(user: Any, cluster: Cluster, key: str, note: str = "") -> PolicyChangeRequest:
    """Ask for the rule a proposal names (operator): the policy with ``rules[key]`` set, as a
    pending change a second person approves. Refused when the labels no longer propose it."""
    _require(user, OPERATOR, "asking for a rule edit", cluster)
    proposal = next((p for p in rule_proposals(cluster) if p.key == key), None)
    if proposal is None:
        raise ApprovalRefused(f"the reviewers' labels propose no rule for {key!r} now")
    policy = dict(cluster.policy)
    policy["rules"] = {**dict(policy.get("rules") or {}), key: proposal.action}
    # ``also_why`` makes it a request whatever the mode: a rule edit always takes four eyes.
    asked = cast(
        PolicyChangeRequest,
        change_cluster_settings(
            user, cluster, {"policy": policy}, note or proposal.summary, also_why=(WHY,)
        ),
    )
    audit.record(
        actor_of(user),
        "rule_proposal.asked",
        asked,
        cluster=cluster,
        payload={
            "key": key,
            "action": proposal.action,
            "chose": proposal.chose,
            "labels": proposal.labels,
            "advice": list(proposal.advice_ids),
            "agreement_now": proposal.agreement_now,
            "agreement_with_rule": proposal.agreement_with_rule,
        },
    )
    return asked
