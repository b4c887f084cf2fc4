"""Remediation's rows: advice and its lifecycle, node health across attempts and workloads, the
controllers' tokens and heartbeats, and the milestones they report. Written only by
``remediation.services``."""

from __future__ import annotations

import hashlib
from typing import ClassVar

from django.db import models

from detection.models import Anomaly
from fleet.core.taxonomy import ACTION_CHOICES, Action
from fleet.models import Attempt, Cluster, Workload


class DesiredState(models.TextChoices):
    RUNNING_EXCLUDING = "running_excluding", "Running, excluding nodes"
    RUNNING = "running", "Running"
    CANCELLED = "cancelled", "Cancelled"
    UNCHANGED = "unchanged", "Unchanged"


# Controllers converge on the desired state; they never interpret the policy's action names.
DESIRED_STATE_OF_ACTION = {
    Action.RESTART_EXCLUDING_NODE: DesiredState.RUNNING_EXCLUDING,
    Action.RESTART: DesiredState.RUNNING,
    Action.STOP: DesiredState.CANCELLED,
    Action.NONE: DesiredState.UNCHANGED,
}


class AdviceState(models.TextChoices):
    PROPOSED = "proposed", "Proposed (monitor mode: published, not acted on)"
    DISPATCHED = "dispatched", "Dispatched to the controller"
    CLAIMED = "claimed", "Claimed by a controller"
    EXECUTED = "executed", "Executed"
    FAILED = "failed", "Failed"
    # Monitor-mode advice whose attempt ended or was replaced: nothing left to act on.
    EXPIRED = "expired", "Expired"
    # Dispatched or claimed advice the cluster's return to monitor mode (or a partition leaving
    # the allowlist) took back: a controller stops at the step in hand.
    WITHDRAWN = "withdrawn", "Withdrawn (no longer to be enforced)"


ACTIVE_ADVICE_STATES = (AdviceState.PROPOSED, AdviceState.DISPATCHED, AdviceState.CLAIMED)


class Advice(models.Model):
    """What the policy recommends for one interruption, and how far it has got.

    ``generation`` rises each time the recommendation changes (sharper evidence arrived before
    it was carried out); controllers reconcile against a generation, so a stale report changes
    nothing. ``enforce`` is false in monitor mode and outside the partition allowlist: a
    controller must not act on such advice."""

    # PROTECT throughout: advice is history, so what it was about cannot be deleted under it.
    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="advice")
    workload = models.ForeignKey(Workload, on_delete=models.PROTECT, related_name="advice")
    attempt = models.ForeignKey(Attempt, on_delete=models.PROTECT, related_name="advice")
    # One advice per anomaly: sharper evidence revises it (a new generation), never adds a second.
    anomaly = models.OneToOneField(Anomaly, on_delete=models.PROTECT, related_name="advice")
    generation = models.PositiveIntegerField(default=1)
    action = models.CharField(max_length=32, choices=ACTION_CHOICES)
    desired_state = models.CharField(max_length=32, choices=DesiredState.choices)
    exclude_nodes = models.JSONField(default=list, blank=True)
    drain_nodes = models.JSONField(default=list, blank=True)
    reasons = models.JSONField(default=list, blank=True)
    explanation = models.TextField(blank=True)
    category = models.CharField(max_length=32)
    attribution = models.CharField(max_length=32)
    # The rule table's key that chose the action (a category, a signature, node_local, limits):
    # reviewers' labels measure how far each rule can be trusted.
    rule = models.CharField(max_length=64, blank=True)
    confidence_label = models.CharField(max_length=16)
    enforce = models.BooleanField(default=False)
    state = models.CharField(max_length=16, choices=AdviceState.choices)
    decided_at = models.DateTimeField()
    updated_at = models.DateTimeField()
    # Set by a conditional update, so of two controllers only one ever holds the claim.
    claimed_by = models.CharField(max_length=100, blank=True)
    claimed_at = models.DateTimeField(null=True, blank=True)
    executed_at = models.DateTimeField(null=True, blank=True)
    observed_generation = models.PositiveIntegerField(null=True, blank=True)
    disposition = models.CharField(max_length=16, blank=True)
    disposition_reason = models.TextField(blank=True)

    class Meta:
        ordering: ClassVar = ["-decided_at"]
        indexes: ClassVar = [models.Index(fields=["cluster", "state"])]
        verbose_name_plural = "advice"

    def __str__(self) -> str:
        return f"{self.action} for {self.attempt} (generation {self.generation})"


class NodeHealthState(models.TextChoices):
    HEALTHY = "healthy"
    SUSPECT = "suspect", "Suspect (has strikes)"
    DRAINED = "drained", "Drained (stays excluded until released)"


class NodeHealth(models.Model):
    """One node's record across attempts and workloads: its strikes (each an interruption the
    evidence pinned on it), and whether it is drained. A drained node stays excluded until a
    person releases it, with a reason."""

    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="node_health")
    name = models.CharField(max_length=128)
    state = models.CharField(
        max_length=16, choices=NodeHealthState.choices, default=NodeHealthState.HEALTHY
    )
    # [{at, anomaly, workload, category}]: the policy counts only those inside its strike window.
    strikes = models.JSONField(default=list, blank=True)
    # What monitor mode (or a partition outside the action allowlist) would have done to the
    # node: [{at, anomaly, workload, category, exclude, drain}]. Never strikes, never counts
    # against the circuit breaker in action mode.
    would_isolate = models.JSONField(default=list, blank=True)
    # When the controller really excluded or drained it (its milestones): what the breaker counts.
    excluded_at = models.DateTimeField(null=True, blank=True)
    drained_at = models.DateTimeField(null=True, blank=True)
    drain_reason = models.TextField(blank=True)
    released_at = models.DateTimeField(null=True, blank=True)
    released_by = models.CharField(max_length=150, blank=True)
    release_reason = models.TextField(blank=True)
    # The reason our drain gave Slurm, exactly ("" when we did not drain it there: a person's
    # drain was in place). A release resumes the node in Slurm only while that is its reason.
    slurm_reason = models.CharField(max_length=255, blank=True)
    # Set by a release, cleared when the controller reports what it did (resume_outcome).
    resume_requested_at = models.DateTimeField(null=True, blank=True)
    resume_outcome = models.CharField(max_length=32, blank=True)

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(fields=["cluster", "name"], name="node_health_unique")
        ]
        ordering: ClassVar = ["cluster", "name"]
        verbose_name_plural = "node health"

    def __str__(self) -> str:
        return f"{self.name}: {self.state}"


# A plain SHA-256 is enough: tokens are long random strings, not passwords open to guessing.
def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class ControllerToken(models.Model):
    """A Slurm Advisor Controller's credential, scoped to one cluster. Only its SHA-256 is
    stored; the token itself is shown once, when issued."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="controller_tokens")
    name = models.CharField(max_length=100)
    digest = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField()
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_heartbeat_at = models.DateTimeField(null=True, blank=True)
    # The last heartbeat's body: role (controller | watchdog), version, transport, last error.
    heartbeat = models.JSONField(default=dict, blank=True)
    # When Slurm's state it last reported was taken (the watchdog reports only as a standby).
    last_snapshot_at = models.DateTimeField(null=True, blank=True)
    # Set once when its heartbeats stop (audited and notified), cleared by the next heartbeat.
    silent_since = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(fields=["cluster", "name"], name="controller_token_unique")
        ]

    def __str__(self) -> str:
        return f"controller {self.name} of {self.cluster}"

    @property
    def actor(self) -> str:
        return f"controller:{self.cluster.name}/{self.name}"

    @property
    def is_authenticated(self) -> bool:  # DRF treats the token as the request's user
        return True


class Milestone(models.Model):
    """A step a controller carried out for an advice (requeue_hold, hold, update_exclusions,
    release, cancel, drain_node), keyed by the controller's idempotency key so a replay records
    nothing."""

    class Step(models.TextChoices):
        REQUEUE_HOLD = "requeue_hold"
        # A job Slurm requeued itself, held so its exclusions land before it can start.
        HOLD = "hold"
        UPDATE_EXCLUSIONS = "update_exclusions"
        RELEASE = "release"
        CANCEL = "cancel"
        DRAIN_NODE = "drain_node"

    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="+")
    advice = models.ForeignKey(Advice, on_delete=models.PROTECT, related_name="milestones")
    # Unique per cluster, not per advice: the controller's key already names advice and generation.
    idempotency_key = models.CharField(max_length=200)
    action = models.CharField(max_length=32, choices=Step.choices)
    # When the controller did it, which a delayed report may deliver long after (recorded_at).
    at = models.DateTimeField()
    recorded_at = models.DateTimeField()
    controller = models.CharField(max_length=150)
    detail = models.JSONField(default=dict, blank=True)

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(
                fields=["cluster", "idempotency_key"], name="milestone_idempotency"
            )
        ]
        ordering: ClassVar = ["at"]

    def __str__(self) -> str:
        return f"{self.action} for advice {self.advice_id}"
