"""Everything that writes clusters, workloads, attempts and nodes. Each function changes rows and
records the audit entry in one transaction."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import Q

from fleet import audit, events
from fleet.core.outbound import redacted

from .models import Attempt, Cluster, ClusterMode, Workload, WorkloadState
from .snapshots import Rejection, SnapshotResult, record_snapshot, workload_key

# Recording a snapshot has its own module; callers find it here with the other services.
__all__ = [
    "REGISTRATION_FIELDS",
    "Rejection",
    "SnapshotResult",
    "create_cluster",
    "registration_changes",
    "note_ended_by_us",
    "note_failure",
    "record_snapshot",
    "stop_workload",
    "update_cluster_settings",
    "workload_key",
]


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


# What a registration sets besides the name; the mode is never among them.
REGISTRATION_FIELDS = ("scheduler", "telemetry", "partitions_allowlist", "policy")


def registration_changes(cluster: Cluster, settings: dict[str, Any]) -> dict[str, Any]:
    """The settings that differ from the cluster's, so registering twice changes nothing and
    audits nothing the second time."""
    unknown = set(settings) - set(REGISTRATION_FIELDS)
    if unknown:
        raise ValueError(f"not a cluster setting: {', '.join(sorted(unknown))}")
    return {name: value for name, value in settings.items() if getattr(cluster, name) != value}


def _settings_of(cluster: Cluster) -> dict[str, Any]:
    return {
        "mode": cluster.mode,
        "policy": cluster.policy,
        "partitions_allowlist": cluster.partitions_allowlist,
        # Secrets are references; one stored inline before that rule stays out of the trail.
        "telemetry": redacted(cluster.telemetry),
        "scheduler": redacted(cluster.scheduler),
    }


def note_ended_by_us(attempt_id: int, at: datetime) -> None:
    """Our controller requeued or cancelled the attempt at ``at`` (the earliest time wins)."""
    Attempt.objects.filter(pk=attempt_id).filter(
        Q(ended_by_us_at__isnull=True) | Q(ended_by_us_at__gt=at)
    ).update(ended_by_us_at=at)


def note_failure(attempt: Attempt, at: datetime) -> None:
    """Keep the earliest evidence of an attempt's failure (detection calls this for each
    anomaly). A conditional update, so it never rewrites what the scheduler reported and the
    earliest report wins whatever the order."""
    Attempt.objects.filter(pk=attempt.pk).filter(
        Q(failed_at__isnull=True) | Q(failed_at__gt=at)
    ).update(failed_at=at)


@transaction.atomic
def stop_workload(actor: str, workload_id: int, reason: str, at: datetime) -> bool:
    """The workload was stopped on advice: it shows "Stopped: <reason>" whatever its last
    attempt's state, until a new attempt (a resubmission) is seen. Once: a replay is a no-op."""
    workload = Workload.objects.select_for_update().get(pk=workload_id)
    if workload.stopped_at is not None:
        return False
    workload.state, workload.stopped_at, workload.updated_at = WorkloadState.STOPPED, at, at
    workload.stopped_reason = reason.strip()[
        : Workload._meta.get_field("stopped_reason").max_length
    ]
    workload.save(update_fields=["state", "stopped_at", "stopped_reason", "updated_at"])
    audit.record(
        actor,
        "workload.stopped",
        workload,
        cluster=workload.cluster,
        workload=workload,
        payload={"reason": workload.stopped_reason, "at": at.isoformat()},
    )
    events.send_workloads_changed(workload.cluster_id, [workload.pk])
    return True
