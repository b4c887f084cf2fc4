"""Remediation services: turn anomalies into advice, track node health, and take the
controllers' reports (claims, reconciliation, milestones, heartbeats). Each write records its
audit entry in the same transaction; claims are conditional updates, so two controllers never
both carry out one advice.

The services are split by what they do: ``advice`` (the advice lifecycle), ``reconciliation``
(what the controllers report), ``isolation`` (node health bookkeeping) and ``policy`` (a
cluster's policy as remediation reads it). The names the rest of the loop uses are here."""

from .advice import advise_cluster, withdraw_enforced_advice
from .isolation import pending_resumes, record_resume, release_node
from .policy import ClusterUnknown, excerpt_settings, policy_problems
from .reconciliation import (
    AdviceAlreadyClaimed,
    AdviceWithdrawn,
    StaleGeneration,
    active_advice,
    authenticate_controller,
    issue_controller_token,
    reconcile,
    record_milestone,
)

__all__ = [
    "AdviceAlreadyClaimed",
    "AdviceWithdrawn",
    "ClusterUnknown",
    "StaleGeneration",
    "active_advice",
    "advise_cluster",
    "authenticate_controller",
    "excerpt_settings",
    "issue_controller_token",
    "pending_resumes",
    "policy_problems",
    "reconcile",
    "record_milestone",
    "record_resume",
    "release_node",
    "withdraw_enforced_advice",
]
