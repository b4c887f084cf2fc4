"""Detection's Celery tasks: the dispatcher that beat runs every second, and one cluster scan."""

from celery import shared_task
from django.db import OperationalError
from django.utils import timezone

from recovery_console.models import Cluster

from . import services


@shared_task
def dispatch_scans() -> str:
    """Enqueue a scan of every cluster whose poll interval has elapsed."""
    due = services.claim_due_scans(timezone.now())
    for cluster_id in due:
        scan_cluster.delay(cluster_id)
    return f"{len(due)} scans enqueued"


@shared_task(
    autoretry_for=(OperationalError,), retry_backoff=True, retry_jitter=True, max_retries=5
)
def scan_cluster(cluster_id: int) -> str:
    cluster = Cluster.objects.get(pk=cluster_id)
    return f"{cluster.name}: {services.scan_cluster(cluster, timezone.now())}"
