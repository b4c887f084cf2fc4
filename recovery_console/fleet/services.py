"""Everything that writes clusters, workloads, attempts and nodes. Each function changes rows and
records the audit entry in one transaction."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import Q

from recovery_console.fleet import audit, events
from recovery_console.fleet.core.outbound import redacted
from recovery_console.fleet.core.scheduler import ClusterSnapshot, JobRecord, NodeRecord

from .models import Attempt, Cluster, ClusterMode, Node, Workload, WorkloadState

# What an attempt's audit entries compare and record: a change to any of these is audited.
ATTEMPT_FIELDS = (
    "time_to_resume_s",
    "name",
    "partition",
    "state",
    "nodes",
    "excluded_nodes",
    "submitted_at",
    "started_at",
    "ended_at",
    "exit_code",
    "signal",
    "reason",
    "comment",
)


@transaction.atomic
def create_cluster(actor: str, name: str, **settings: Any) -> Cluster:
    """Register a cluster. It always starts in monitor mode: action mode needs approval."""
    cluster = Cluster(name=name, mode=ClusterMode.MONITOR, **settings)
    cluster.save()
    audit.record(actor, "cluster.created", cluster, cluster=cluster, payload=_settings_of(cluster))
    return cluster


@transaction.atomic
def update_cluster_settings(actor: str, cluster: Cluster, **changes: Any) -> Cluster:
    """Change a cluster's policy, allowlist or connections (validated; mode is not changed here)."""
    # Not mode: switching to action mode goes through its own approval.
    allowed = {"policy", "partitions_allowlist", "telemetry", "scheduler"}
    unknown = set(changes) - allowed
    if unknown:
        raise ValueError(f"not a cluster setting: {', '.join(sorted(unknown))}")
    # Locked and re-read, so the audited before and after are not taken from a stale copy.
    cluster = Cluster.objects.select_for_update().get(pk=cluster.pk)
    before = _settings_of(cluster)
    for field, value in changes.items():
        setattr(cluster, field, value)
    cluster.save()
    after = _settings_of(cluster)
    changed = {k: {"from": before[k], "to": after[k]} for k in after if before[k] != after[k]}
    audit.record(actor, "cluster.settings_changed", cluster, cluster=cluster, payload=changed)
    return cluster


def _settings_of(cluster: Cluster) -> dict[str, Any]:
    return {
        "mode": cluster.mode,
        "policy": cluster.policy,
        "partitions_allowlist": cluster.partitions_allowlist,
        # Secrets are references; one stored inline before that rule stays out of the trail.
        "telemetry": redacted(cluster.telemetry),
        "scheduler": redacted(cluster.scheduler),
    }


@dataclass(frozen=True)
class SnapshotResult:
    """What recording one scheduler snapshot changed."""

    new_attempts: int = 0
    changed_attempts: int = 0
    changed_nodes: int = 0


def workload_key(job: JobRecord) -> str:
    """Attempts belong to the workload named by the comment's ``workload`` tag (JSON), or else
    by the job name, which is how sites resubmit the same run."""
    try:
        tag = json.loads(job.comment).get("workload") if job.comment else None
    except (ValueError, AttributeError):
        tag = None
    return str(tag) if tag else job.name or f"job-{job.job_id}"


@transaction.atomic
def record_snapshot(actor: str, cluster: Cluster, snapshot: ClusterSnapshot) -> SnapshotResult:
    """Bring nodes, workloads and attempts up to date with what the scheduler reported.

    Attempts are history: a new restart count adds an attempt (closing the previous one as
    REQUEUED if we never saw it end), and an attempt that has ended is left alone.
    """
    changed_nodes = _record_nodes(actor, cluster, snapshot.nodes, snapshot.taken_at)
    open_attempts = {
        (a.job_id, a.attempt_index): a
        for a in Attempt.objects.filter(cluster=cluster, ended_at__isnull=True)
        .exclude(state__in=["REQUEUED"])
        .select_related("workload")
    }
    new = changed = 0
    touched: set[int] = set()
    for job in snapshot.jobs:
        attempt = open_attempts.get((job.job_id, job.restart_count))
        if attempt is not None:
            if _update_attempt(actor, attempt, job, snapshot.taken_at):
                changed += 1
                touched.add(attempt.workload_id)
            continue
        if _attempt_exists(cluster, job):
            continue  # ended attempts are history, and a stale report cannot reopen them
        _close_earlier_attempts(actor, open_attempts, job, snapshot.taken_at)
        touched.add(_create_attempt(actor, cluster, job, snapshot.taken_at).workload_id)
        new += 1
    # One event per snapshot, sent after the commit, rather than one per attempt.
    if touched or changed_nodes:
        events.send_workloads_changed(cluster.pk, sorted(touched))
    return SnapshotResult(new, changed, changed_nodes)


def _attempt_exists(cluster: Cluster, job: JobRecord) -> bool:
    return Attempt.objects.filter(
        cluster=cluster, job_id=job.job_id, attempt_index__gte=job.restart_count
    ).exists()


def _create_attempt(actor: str, cluster: Cluster, job: JobRecord, seen_at: datetime) -> Attempt:
    workload, _ = Workload.objects.get_or_create(
        cluster=cluster,
        key=workload_key(job),
        defaults={"created_at": seen_at, "updated_at": seen_at},
    )
    attempt = Attempt(cluster=cluster, workload=workload, job_id=job.job_id, first_seen_at=seen_at)
    attempt.attempt_index = job.restart_count
    _copy_job(attempt, job, seen_at)
    attempt.save()
    audit.record(
        actor,
        "attempt.observed",
        attempt,
        cluster=cluster,
        workload=workload,
        attempt=attempt,
        payload=_attempt_payload(attempt),
    )
    _refresh_workload_state(workload, attempt, seen_at)
    return attempt


def _update_attempt(actor: str, attempt: Attempt, job: JobRecord, seen_at: datetime) -> bool:
    before = _attempt_payload(attempt)
    _copy_job(attempt, job, seen_at)
    after = _attempt_payload(attempt)
    if before == after:
        return False
    attempt.save()
    changes = {k: {"from": before[k], "to": after[k]} for k in after if before[k] != after[k]}
    verb = "attempt.ended" if attempt.ended_at else "attempt.changed"
    audit.record(
        actor,
        verb,
        attempt,
        cluster=attempt.cluster,
        workload=attempt.workload,
        attempt=attempt,
        payload=changes,
    )
    _refresh_workload_state(attempt.workload, attempt, seen_at)
    return True


def _close_earlier_attempts(
    actor: str, open_attempts: dict[tuple[str, int], Attempt], job: JobRecord, seen_at: datetime
) -> None:
    """A higher restart count means the job was requeued: its earlier attempts are over."""
    for (job_id, index), attempt in list(open_attempts.items()):
        if job_id == job.job_id and index < job.restart_count:
            # The console's own state: Slurm never reports it; the higher restart count implies it.
            attempt.state = "REQUEUED"
            attempt.ended_at = seen_at
            attempt.save()
            audit.record(
                actor,
                "attempt.ended",
                attempt,
                cluster=attempt.cluster,
                workload=attempt.workload,
                attempt=attempt,
                payload={"state": "REQUEUED", "requeued_as": job.restart_count},
            )
            del open_attempts[(job_id, index)]


def _copy_job(attempt: Attempt, job: JobRecord, seen_at: datetime) -> None:
    starts_running = attempt.state != "RUNNING" and job.state == "RUNNING"
    # Cut to the columns' sizes: one long name or reason must not fail a whole snapshot.
    attempt.name = job.name[:200]
    attempt.partition = job.partition
    attempt.state = job.state.value
    attempt.nodes = list(job.nodes)
    attempt.excluded_nodes = list(job.excluded_nodes)
    attempt.submitted_at = job.submit_time
    attempt.started_at = job.start_time
    attempt.exit_code = job.exit_code
    attempt.signal = job.signal
    attempt.reason = job.reason[:255]
    attempt.comment = job.comment
    if job.is_terminal:
        # No end time reported: when we saw it ended is the best bound we have.
        attempt.ended_at = job.end_time or seen_at
    # Once, when the attempt starts running: not a query per running attempt per snapshot.
    if starts_running and attempt.time_to_resume_s is None and job.start_time:
        attempt.time_to_resume_s = _time_to_resume(attempt, job.start_time)


def _time_to_resume(attempt: Attempt, started: datetime) -> float | None:
    """From the failure of the workload's previous attempt (its first evidence of failure, or
    its end) to this attempt running; None for a first attempt or after a clean end."""
    if attempt.workload_id is None:
        return None
    previous = (
        Attempt.objects.filter(workload_id=attempt.workload_id, ended_at__isnull=False)
        .exclude(pk=attempt.pk)
        .exclude(state="COMPLETED")
        .order_by("-ended_at")
        .first()
    )
    # An attempt that ended after this one started is not the failure it recovers from.
    if previous is None or previous.ended_at is None or previous.ended_at > started:
        return None
    # Detection's first evidence often precedes the scheduler's end by minutes (a hang).
    failed_at = min(filter(None, (previous.failed_at, previous.ended_at)))
    return max(0.0, (started - failed_at).total_seconds())


def note_failure(attempt: Attempt, at: datetime) -> None:
    """Keep the earliest evidence of an attempt's failure (detection calls this for each
    anomaly). A conditional update, so it never rewrites what the scheduler reported and the
    earliest report wins whatever the order."""
    Attempt.objects.filter(pk=attempt.pk).filter(
        Q(failed_at__isnull=True) | Q(failed_at__gt=at)
    ).update(failed_at=at)


def _attempt_payload(attempt: Attempt) -> dict[str, Any]:
    payload: dict[str, Any] = json.loads(
        json.dumps({f: getattr(attempt, f) for f in ATTEMPT_FIELDS}, default=_isoformat)
    )
    return payload


def _isoformat(value: object) -> str:
    return value.isoformat() if isinstance(value, datetime) else str(value)


# Any other state (failed, timed out, node fail, preempted, requeued) is an interruption.
_WORKLOAD_STATE_OF_JOB = {
    "PENDING": WorkloadState.PENDING,
    "RUNNING": WorkloadState.RUNNING,
    "COMPLETING": WorkloadState.RUNNING,
    "COMPLETED": WorkloadState.COMPLETED,
    "CANCELLED": WorkloadState.STOPPED,
}


def _refresh_workload_state(workload: Workload, latest: Attempt, seen_at: datetime) -> None:
    newest = workload.attempts.order_by("-first_seen_at", "-attempt_index").first()
    if newest is not None and newest.pk != latest.pk:
        return  # an older attempt changed; the newest one decides the workload's state
    state = _WORKLOAD_STATE_OF_JOB.get(latest.state, WorkloadState.INTERRUPTED)
    Workload.objects.filter(pk=workload.pk).update(state=state, updated_at=seen_at)


def _record_nodes(
    actor: str, cluster: Cluster, reported: Iterable[NodeRecord], seen_at: datetime
) -> int:
    known = {n.name: n for n in Node.objects.filter(cluster=cluster)}
    changed = 0
    for record in reported:
        node = known.get(record.name) or Node(cluster=cluster, name=record.name)
        before = (node.state, node.reason, node.gpus, node.partitions)
        after = (record.state.value, record.reason[:255], record.gpus, list(record.partitions))
        # Unchanged nodes are skipped: a snapshot every few seconds must not flood the trail.
        if node.pk is not None and before == after:
            continue
        node.state, node.reason, node.gpus, node.partitions = after
        node.updated_at = seen_at
        node.save()
        audit.record(
            actor,
            # A new node has no state yet: that tells a first sighting from a change.
            "node.state_changed" if before[0] else "node.observed",
            node,
            cluster=cluster,
            payload={"state": node.state, "reason": node.reason, "previous_state": before[0]},
        )
        changed += 1
    return changed
