"""The fleet: clusters, the workloads that run on them, their attempts and nodes, and the audit
trail. The floor everything else stands on; it imports nothing from the floors above.

Only ``services.py`` (and ``audit.py`` for the trail) write these rows; everything else reads.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from django.core.exceptions import ValidationError
from django.db import models

from .core.outbound import secret_key_problems
from .core.registration import name_problem, partitions_problems, scheduler_problems
from .core.scheduler import TERMINAL_JOB_STATES, JobState, NodeState
from .outbound import allowed_hosts, secret_store

# A cluster's settings documents belong to the floors above (the policy to remediation, the
# telemetry to detection). Each registers its check here from its AppConfig.ready(), so a bad
# document is still refused on save without this floor importing theirs.
ClusterCheck = Callable[["Cluster"], dict[str, list[str]]]
CLUSTER_CHECKS: list[ClusterCheck] = []


def register_cluster_check(check: ClusterCheck) -> None:
    if check not in CLUSTER_CHECKS:
        CLUSTER_CHECKS.append(check)


class ClusterMode(models.TextChoices):
    MONITOR = "monitor", "Monitor (advice is published, not acted on)"
    ACTION = "action", "Action (the controller carries advice out)"


class Cluster(models.Model):
    """A Slurm cluster (or the simulated one) whose training jobs we watch.

    ``policy`` is the recovery policy document (see ``remediation.core.policy``); ``telemetry``
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
        """Every problem of the registration, each naming its field (``core.registration``
        for the name, allowlist and scheduler; the floors above check telemetry and policy)."""
        errors: dict[str, list[str]] = {}
        if self.pk is None and (problem := name_problem(self.name)):
            errors["name"] = [problem]
        if self.mode not in ClusterMode.values:
            errors["mode"] = [f"unknown mode {self.mode!r}: use monitor or action"]
        if problems := partitions_problems(self.partitions_allowlist):
            errors["partitions_allowlist"] = problems
        if not isinstance(self.telemetry, dict):
            errors["telemetry"] = ["must be a JSON object"]
        if problems := self._scheduler_problems():
            errors["scheduler"] = problems
        for check in CLUSTER_CHECKS:
            for name, problems in check(self).items():
                errors.setdefault(name, []).extend(problems)
        if errors:
            raise ValidationError(errors)

    def _scheduler_problems(self) -> list[str]:
        store = secret_store()
        problems = scheduler_problems(self.scheduler, store, allowed_hosts())
        if isinstance(self.scheduler, dict):
            # Secrets anywhere else in the document (the ssh section checks its own).
            rest = {k: v for k, v in self.scheduler.items() if k != "ssh"}
            problems = secret_key_problems(rest, "scheduler", store) + problems
        return problems

    @property
    def backend(self) -> str:
        return str(self.scheduler.get("backend", "simulated"))


class WorkloadState(models.TextChoices):
    PENDING = "pending"
    RUNNING = "running"
    INTERRUPTED = "interrupted", "Interrupted (last attempt failed)"
    COMPLETED = "completed"
    STOPPED = "stopped"


class Workload(models.Model):
    """One logical training run. Its attempts are grouped by ``key``: the ``workload`` tag in
    the job's Slurm comment when there is one, else the job name.

    Each task of a Slurm job array is its own run (``"sweep[3]"``), with its own budgets and
    history; the tasks hang off one row that stands for the array (``"sweep[]"``,
    ``is_array``), which has no attempts of its own and takes its state from its tasks."""

    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="workloads")
    key = models.CharField(max_length=200)
    is_array = models.BooleanField(default=False)
    array = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="tasks"
    )
    state = models.CharField(
        max_length=16, choices=WorkloadState.choices, default=WorkloadState.PENDING
    )
    # Set when the workload was stopped on advice (``services.stop_workload``): its attempts
    # up to then no longer decide its state; a later resubmission (a new attempt) does.
    stopped_at = models.DateTimeField(null=True, blank=True)
    stopped_reason = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(fields=["cluster", "key"], name="workload_unique_key")
        ]
        # Lists are newest first, site-wide and per cluster: a page is read off an index
        # rather than sorting 10,000s of workloads.
        indexes: ClassVar = [
            models.Index(fields=["updated_at", "id"]),
            models.Index(fields=["cluster", "updated_at"]),
        ]
        ordering: ClassVar = ["-updated_at"]

    def __str__(self) -> str:
        return self.key

    @property
    def state_text(self) -> str:
        """The state as people read it: a stop on advice says why."""
        if self.state == WorkloadState.STOPPED and self.stopped_reason:
            return f"Stopped: {self.stopped_reason}"
        return str(self.get_state_display())


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
    # The earliest evidence of this attempt's failure, noted by detection (``note_failure``):
    # an observation about the attempt, not a rewrite of what the scheduler reported.
    failed_at = models.DateTimeField(null=True, blank=True)
    # When our controller requeued or cancelled the attempt while it still ran: what it prints
    # after that is the teardown we caused, never a new failure (``note_ended_by_us``).
    ended_by_us_at = models.DateTimeField(null=True, blank=True)
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
    (``manage.py verify_audit``). Append with ``fleet.audit.record`` only.
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
        # The trail is filtered by object, actor, cluster and time on 1,000,000s of rows.
        indexes: ClassVar = [
            models.Index(fields=["object_type", "object_id"]),
            models.Index(fields=["actor", "sequence"]),
            models.Index(fields=["cluster", "sequence"]),
            # The trail newest first with a time filter: read in the index alone.
            models.Index(fields=["sequence", "at"]),
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
