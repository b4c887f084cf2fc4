"""Clusters, the workloads that run on them, their attempts and nodes, and the audit trail.

Only ``services.py`` (and ``audit.py`` for the trail) write these rows; everything else reads.
"""

from __future__ import annotations

from typing import Any, ClassVar

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import EmailValidator, URLValidator
from django.db import models

from detection.telemetry import TERMINAL_JOB_STATES, JobState, NodeState
from remediation.policy import InvalidPolicy, parse_policy

LOG_SOURCE_TYPES = ("simulated", "files", "loki", "victorialogs")
METRICS_SOURCE_TYPES = ("simulated", "prometheus", "none")
SCHEDULER_BACKENDS = ("simulated", "slurm")


class ClusterMode(models.TextChoices):
    MONITOR = "monitor", "Monitor (advice is published, not acted on)"
    ACTION = "action", "Action (the controller carries advice out)"


class Cluster(models.Model):
    """A Slurm cluster (or the simulated one) whose training jobs we watch.

    ``policy`` is the recovery policy document (see ``remediation.policy``); ``telemetry``
    names where logs and GPU metrics come from; ``scheduler`` says how to reach the scheduler.
    All three are validated on save, so a bad document never reaches the loop.
    """

    name = models.SlugField(max_length=64, unique=True)
    mode = models.CharField(max_length=16, choices=ClusterMode.choices, default=ClusterMode.MONITOR)
    partitions_allowlist = models.JSONField(
        default=list, blank=True, help_text="Partitions action mode may touch; empty means all."
    )
    policy = models.JSONField(default=dict, blank=True)
    telemetry = models.JSONField(default=dict, blank=True)
    scheduler = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering: ClassVar = ["name"]

    def __str__(self) -> str:
        return self.name

    def save(self, *args: Any, **kwargs: Any) -> None:
        self.full_clean()
        super().save(*args, **kwargs)

    def clean(self) -> None:
        errors: dict[str, list[str]] = {}
        if self.mode not in ClusterMode.values:
            errors["mode"] = [f"unknown mode {self.mode!r}: use monitor or action"]
        try:
            parse_policy(self.policy)
        except InvalidPolicy as exc:
            errors["policy"] = exc.problems
        if not _is_list_of_names(self.partitions_allowlist):
            errors["partitions_allowlist"] = ["must be a list of partition names"]
        errors.update(_connection_problems(self.telemetry, self.scheduler))
        if errors:
            raise ValidationError(errors)

    @property
    def backend(self) -> str:
        return str(self.scheduler.get("backend", "simulated"))


def _is_list_of_names(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) and v.strip() for v in value)


def _connection_problems(telemetry: object, scheduler: object) -> dict[str, list[str]]:
    errors: dict[str, list[str]] = {}
    if not isinstance(telemetry, dict):
        errors["telemetry"] = ["must be a JSON object"]
    else:
        logs = telemetry.get("logs", {}).get("type", "simulated")
        metrics = telemetry.get("metrics", {}).get("type", "simulated")
        problems = []
        if logs not in LOG_SOURCE_TYPES:
            problems.append(f"logs.type {logs!r} is not one of {', '.join(LOG_SOURCE_TYPES)}")
        if metrics not in METRICS_SOURCE_TYPES:
            problems.append(
                f"metrics.type {metrics!r} is not one of {', '.join(METRICS_SOURCE_TYPES)}"
            )
        if problems:
            errors["telemetry"] = problems
    if not isinstance(scheduler, dict):
        errors["scheduler"] = ["must be a JSON object"]
    elif scheduler.get("backend", "simulated") not in SCHEDULER_BACKENDS:
        errors["scheduler"] = [f"backend must be one of {', '.join(SCHEDULER_BACKENDS)}"]
    return errors


class WorkloadState(models.TextChoices):
    PENDING = "pending"
    RUNNING = "running"
    INTERRUPTED = "interrupted", "Interrupted (last attempt failed)"
    COMPLETED = "completed"
    STOPPED = "stopped"


class Workload(models.Model):
    """One logical training run. Its attempts are grouped by ``key``: the ``workload`` tag in
    the job's Slurm comment when there is one, else the job name."""

    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="workloads")
    key = models.CharField(max_length=200)
    state = models.CharField(
        max_length=16, choices=WorkloadState.choices, default=WorkloadState.PENDING
    )
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(fields=["cluster", "key"], name="workload_unique_key")
        ]
        ordering: ClassVar = ["-updated_at"]

    def __str__(self) -> str:
        return self.key


JOB_STATE_CHOICES = [(s.value, s.value) for s in JobState] + [("REQUEUED", "REQUEUED")]
ENDED_ATTEMPT_STATES = {s.value for s in TERMINAL_JOB_STATES} | {"REQUEUED"}


class AttemptIsHistory(Exception):
    """An ended attempt is history: it is never rewritten."""


class Attempt(models.Model):
    """One run of a workload: a Slurm job, or one requeue of it (``attempt_index`` is Slurm's
    restart count). Once it has ended it is never rewritten; a restart adds a new attempt."""

    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="attempts")
    workload = models.ForeignKey(Workload, on_delete=models.PROTECT, related_name="attempts")
    job_id = models.CharField(max_length=64)
    attempt_index = models.PositiveIntegerField()
    name = models.CharField(max_length=200, blank=True)
    partition = models.CharField(max_length=64, blank=True)
    state = models.CharField(max_length=16, choices=JOB_STATE_CHOICES)
    nodes = models.JSONField(default=list, blank=True)
    excluded_nodes = models.JSONField(default=list, blank=True)
    submitted_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    exit_code = models.IntegerField(null=True, blank=True)
    signal = models.IntegerField(null=True, blank=True)
    reason = models.CharField(max_length=255, blank=True)
    comment = models.TextField(blank=True)
    first_seen_at = models.DateTimeField()
    # Seconds from the failure of the workload's previous attempt to this one running.
    time_to_resume_s = models.FloatField(null=True, blank=True)

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(
                fields=["cluster", "job_id", "attempt_index"], name="attempt_unique_key"
            )
        ]
        indexes: ClassVar = [models.Index(fields=["cluster", "ended_at"])]
        ordering: ClassVar = ["-first_seen_at"]

    def __str__(self) -> str:
        return f"job {self.job_id} attempt {self.attempt_index}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self.pk is not None:
            stored = Attempt.objects.filter(pk=self.pk).values_list("state", flat=True).first()
            if stored in ENDED_ATTEMPT_STATES:
                raise AttemptIsHistory(f"{self} has ended ({stored}); it cannot be rewritten")
        super().save(*args, **kwargs)

    @property
    def has_ended(self) -> bool:
        return self.state in ENDED_ATTEMPT_STATES


NODE_STATE_CHOICES = [(s.value, s.value) for s in NodeState]


class Node(models.Model):
    """A compute node as the scheduler last reported it."""

    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="nodes")
    name = models.CharField(max_length=128)
    state = models.CharField(max_length=16, choices=NODE_STATE_CHOICES)
    reason = models.CharField(max_length=255, blank=True)
    gpus = models.PositiveIntegerField(default=0)
    partitions = models.JSONField(default=list, blank=True)
    updated_at = models.DateTimeField()

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(fields=["cluster", "name"], name="node_unique_name")
        ]
        ordering: ClassVar = ["cluster", "name"]

    def __str__(self) -> str:
        return self.name


class AppendOnlyError(Exception):
    """Audit entries are never updated or deleted."""


class AuditQuerySet(models.QuerySet["AuditEntry"]):
    def update(self, **kwargs: Any) -> int:
        raise AppendOnlyError("audit entries cannot be updated")

    def delete(self) -> tuple[int, dict[str, int]]:
        raise AppendOnlyError("audit entries cannot be deleted")


class AuditEntry(models.Model):
    """One row of the append-only audit trail: who or what did which verb to which object.

    ``sequence`` numbers the rows without gaps and ``entry_hash`` covers the row's content and
    the previous row's hash, so an altered, removed or reordered row breaks the chain
    (``manage.py verify_audit``). Append with ``recovery_console.audit.record`` only.
    """

    sequence = models.PositiveBigIntegerField(unique=True)
    at = models.DateTimeField(db_index=True)
    actor = models.CharField(max_length=150)
    cluster = models.ForeignKey(
        Cluster, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    workload = models.ForeignKey(
        Workload, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    attempt = models.ForeignKey(
        Attempt, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    verb = models.CharField(max_length=64, db_index=True)
    object_type = models.CharField(max_length=64)
    object_id = models.CharField(max_length=64)
    payload = models.JSONField(default=dict)
    previous_hash = models.CharField(max_length=64)
    entry_hash = models.CharField(max_length=64, unique=True)

    objects = AuditQuerySet.as_manager()

    class Meta:
        ordering: ClassVar = ["sequence"]
        verbose_name_plural = "audit entries"
        # The trail is filtered by object, actor and cluster on 100,000s of rows.
        indexes: ClassVar = [
            models.Index(fields=["object_type", "object_id"]),
            models.Index(fields=["actor", "sequence"]),
            models.Index(fields=["cluster", "sequence"]),
        ]

    def __str__(self) -> str:
        return f"#{self.sequence} {self.actor} {self.verb} {self.object_type}:{self.object_id}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self.pk is not None or kwargs.get("force_update"):
            raise AppendOnlyError("audit entries cannot be updated")
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> tuple[int, dict[str, int]]:
        raise AppendOnlyError("audit entries cannot be deleted")


class AuditChainHead(models.Model):
    """A single row holding the chain's last sequence and hash. Appends lock it, so concurrent
    writers queue up and the chain never forks."""

    last_sequence = models.PositiveBigIntegerField(default=0)
    last_hash = models.CharField(max_length=64, default="0" * 64)

    def __str__(self) -> str:
        return f"audit head #{self.last_sequence}"


# --- reviews, the mode-approval workflow and notifications ----------------------------------


def _advice_actions() -> list[tuple[str, str]]:
    # Imported late: remediation's models import this module.
    from remediation.models import AdviceAction

    return list(AdviceAction.choices)


class Review(models.Model):
    """A reviewer's label on one advice: whether they agree, and what they would have done.

    One per (advice, reviewer); labelling again updates it. ``generation`` is the advice's
    generation the reviewer saw: when sharper evidence revises the advice, the old label no
    longer counts towards the agreement rate and the advice is back in the review queue."""

    advice = models.ForeignKey(
        "remediation.Advice", on_delete=models.PROTECT, related_name="reviews"
    )
    reviewer = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="reviews"
    )
    agrees = models.BooleanField()
    preferred_action = models.CharField(max_length=32, choices=_advice_actions)
    comment = models.TextField(blank=True)
    generation = models.PositiveIntegerField(default=1)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(fields=["advice", "reviewer"], name="review_one_per_reviewer")
        ]
        ordering: ClassVar = ["-updated_at"]

    def __str__(self) -> str:
        verdict = "agrees" if self.agrees else f"prefers {self.preferred_action}"
        return f"{self.reviewer} on advice {self.advice_id}: {verdict}"


class ModeRequestStatus(models.TextChoices):
    PENDING = "pending"
    APPROVED = "approved"
    REJECTED = "rejected"


class ModeChangeRequest(models.Model):
    """A request to switch a cluster to action mode, with the agreement measured when it was
    made. A second person with the approver role decides it; approval measures again."""

    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="mode_requests")
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="mode_requests"
    )
    requested_at = models.DateTimeField()
    note = models.TextField(blank=True)
    agreement_rate = models.FloatField(null=True, blank=True)
    labelled = models.PositiveIntegerField(default=0)
    status = models.CharField(
        max_length=16, choices=ModeRequestStatus.choices, default=ModeRequestStatus.PENDING
    )
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="mode_decisions",
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    decision_note = models.TextField(blank=True)

    class Meta:
        ordering: ClassVar = ["-requested_at"]
        indexes: ClassVar = [models.Index(fields=["cluster", "status"])]
        permissions: ClassVar = [
            ("approve_modechangerequest", "Can approve or reject a request for action mode"),
            ("return_to_monitor", "Can return a cluster to monitor mode"),
        ]

    def __str__(self) -> str:
        return f"action mode for {self.cluster_id}: {self.status}"


class NotificationEvent(models.TextChoices):
    STOP = "stop", "Stop advised"
    DRAIN = "drain", "Node drained"
    MODE_CHANGE = "mode_change", "Cluster mode changed"
    REVIEW_NEEDED = "review_needed", "Advice waiting for review"


class NotificationKind(models.TextChoices):
    WEBHOOK = "webhook", "Webhook (JSON, Slack-compatible)"
    EMAIL = "email"


def _all_notification_events() -> list[str]:
    return list(NotificationEvent.values)


class NotificationChannel(models.Model):
    """Where a cluster's notifications go: a webhook URL or a comma-separated list of email
    addresses, and which events (``NotificationEvent`` values) it wants."""

    cluster = models.ForeignKey(
        Cluster, on_delete=models.CASCADE, related_name="notification_channels"
    )
    kind = models.CharField(max_length=16, choices=NotificationKind.choices)
    target = models.CharField(max_length=1000)
    events = models.JSONField(default=_all_notification_events, blank=True)
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering: ClassVar = ["cluster", "id"]

    def __str__(self) -> str:
        return f"{self.kind} {self.target} for {self.cluster_id}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        self.full_clean(exclude=["cluster"])
        super().save(*args, **kwargs)

    def clean(self) -> None:
        errors: dict[str, list[str]] = {}
        if not isinstance(self.events, list) or not set(self.events) <= set(
            NotificationEvent.values
        ):
            errors["events"] = [f"must be a list of {', '.join(NotificationEvent.values)}"]
        if self.kind == NotificationKind.WEBHOOK:
            try:
                URLValidator(schemes=["http", "https"])(self.target)
            except ValidationError:
                errors["target"] = ["a webhook needs an http:// or https:// URL"]
        elif self.kind == NotificationKind.EMAIL:
            bad = [a for a in self.recipients if not _is_email(a)]
            if bad or not self.recipients:
                errors["target"] = [f"not an email address: {', '.join(bad) or '(none)'}"]
        if errors:
            raise ValidationError(errors)

    @property
    def recipients(self) -> list[str]:
        return [a.strip() for a in self.target.split(",") if a.strip()]


def _is_email(address: str) -> bool:
    try:
        EmailValidator()(address)
    except ValidationError:
        return False
    return True


def _notify_on_audit_entry(sender: type[AuditEntry], instance: AuditEntry, **kwargs: Any) -> None:
    # Imported late: notifications imports this module. Notifications hang off the audit trail
    # so that the loop's services need not know about them.
    from .notifications import on_audit_entry

    on_audit_entry(instance, bool(kwargs.get("created")))


models.signals.post_save.connect(
    _notify_on_audit_entry, sender=AuditEntry, dispatch_uid="recovery_console.notifications"
)


def _after_migrate(sender: Any, **kwargs: Any) -> None:
    # After every migrate, and every flush of a test database, the rows that migrations seed
    # exist again: the roles' groups, and the audit chain's head (concurrent first writers
    # creating it at once can deadlock).
    if getattr(sender, "label", None) == "recovery_console":
        from .roles import sync_role_groups

        sync_role_groups()
        AuditChainHead.objects.get_or_create(pk=1)


models.signals.post_migrate.connect(_after_migrate, dispatch_uid="recovery_console.roles")
