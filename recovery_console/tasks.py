"""Celery tasks of the loop: thin wrappers that call one service each.

Beat runs ``dispatch_cycles`` every second; it enqueues one ``run_cycle`` per cluster whose poll
interval has elapsed. A cycle scans the cluster's telemetry, then advises on what it found.
"""

from typing import Any

from celery import shared_task
from django.db import OperationalError
from django.utils import timezone

from detection import services as detection
from detection.telemetry import snapshot_from_json
from remediation import services as remediation

from . import notifications, services
from .models import Cluster


@shared_task
def dispatch_cycles() -> str:
    due = detection.claim_due_scans(timezone.now())
    for cluster_id in due:
        run_cycle.delay(cluster_id)
    return f"{len(due)} cycles enqueued"


@shared_task(
    autoretry_for=(OperationalError,), retry_backoff=True, retry_jitter=True, max_retries=5
)
def run_cycle(cluster_id: int) -> str:
    """One turn of the loop for one cluster: detect, then advise."""
    cluster = Cluster.objects.get(pk=cluster_id)
    scan = detection.scan_cluster(cluster, timezone.now())
    advised = remediation.advise_cluster(cluster, timezone.now())
    return f"{cluster.name}: {scan}; {advised} advice"


@shared_task(acks_late=True)
def record_snapshot(cluster_id: int, snapshot: dict[str, Any], actor: str) -> str:
    """Record a scheduler snapshot (JSON, as ``snapshot_to_json`` writes it)."""
    cluster = Cluster.objects.get(pk=cluster_id)
    result = services.record_snapshot(actor, cluster, snapshot_from_json(snapshot))
    return (
        f"{cluster.name}: {result.new_attempts} new attempts, "
        f"{result.changed_attempts} changed, {result.changed_nodes} nodes changed"
    )


@shared_task
def notify(entry_id: int) -> str:
    """Fan one audit entry out to its cluster's notification channels."""
    return f"{notifications.fan_out(entry_id)} notifications enqueued"


@shared_task(
    autoretry_for=(notifications.DeliveryFailed,),
    retry_backoff=True,
    retry_backoff_max=notifications.BACKOFF_MAX_SECONDS,
    retry_jitter=True,
    max_retries=notifications.MAX_ATTEMPTS - 1,
    acks_late=True,
)
def deliver_notification(channel_id: int, entry_id: int, event: str) -> str:
    """Send one notification; a failure worth retrying is retried with backoff."""
    return notifications.deliver(channel_id, entry_id, event)
