"""Celery tasks that tie the loop together: thin wrappers that call one service each.

Beat runs ``dispatch_cycles`` every second; it enqueues one ``run_cycle`` per cluster whose poll
interval has elapsed. A cycle scans the cluster's telemetry, then advises on what it found.

Each task has an explicit name: the beat schedule and queued messages refer to tasks by name,
so moving a module must not orphan them.
"""

from typing import Any

from celery import shared_task
from django.db import OperationalError
from django.utils import timezone

from detection import scan
from detection import services as detection
from recovery_console.fleet import services
from recovery_console.fleet.core.scheduler import snapshot_from_json
from recovery_console.fleet.models import Cluster
from remediation import services as remediation

from .notifications import delivery as notifications


@shared_task(name="recovery_console.dispatch_cycles")
def dispatch_cycles() -> str:
    due = detection.claim_due_scans(timezone.now())
    for cluster_id in due:
        run_cycle.delay(cluster_id)
    return f"{len(due)} cycles enqueued"


@shared_task(
    name="recovery_console.run_cycle",
    # A lost or locked database connection is worth retrying; a bug is not.
    autoretry_for=(OperationalError,),
    retry_backoff=True,
    retry_jitter=True,
    max_retries=5,
)
def run_cycle(cluster_id: int) -> str:
    """One turn of the loop for one cluster: detect, then advise."""
    cluster = Cluster.objects.get(pk=cluster_id)
    scanned = scan.scan_cluster(cluster, timezone.now())
    advised = remediation.advise_cluster(cluster, timezone.now())
    return f"{cluster.name}: {scanned}; {advised} advice"


# Acknowledged once done: a worker lost mid-task leaves the snapshot queued, not dropped.
@shared_task(name="recovery_console.record_snapshot", acks_late=True)
def record_snapshot(cluster_id: int, snapshot: dict[str, Any], actor: str) -> str:
    """Record a scheduler snapshot (JSON, as ``snapshot_to_json`` writes it)."""
    cluster = Cluster.objects.get(pk=cluster_id)
    result = services.record_snapshot(actor, cluster, snapshot_from_json(snapshot))
    return (
        f"{cluster.name}: {result.new_attempts} new attempts, "
        f"{result.changed_attempts} changed, {result.changed_nodes} nodes changed"
    )


@shared_task(name="recovery_console.notify")
def notify(entry_id: int) -> str:
    """Fan one audit entry out to its cluster's notification channels."""
    return f"{notifications.fan_out(entry_id)} notifications enqueued"


@shared_task(
    name="recovery_console.deliver_notification",
    autoretry_for=(notifications.DeliveryFailed,),
    retry_backoff=True,
    retry_backoff_max=notifications.BACKOFF_MAX_SECONDS,
    retry_jitter=True,
    max_retries=notifications.MAX_ATTEMPTS - 1,
    # A crash after sending may deliver twice: the message id lets a receiver drop the copy.
    acks_late=True,
)
def deliver_notification(channel_id: int, entry_id: int, event: str) -> str:
    """Send one notification; a failure worth retrying is retried with backoff."""
    return notifications.deliver(channel_id, entry_id, event)
