"""Celery tasks of the console app: thin wrappers that call one service each."""

from typing import Any

from celery import shared_task

from detection.telemetry import snapshot_from_json

from . import services
from .models import Cluster


@shared_task(acks_late=True)
def record_snapshot(cluster_id: int, snapshot: dict[str, Any], actor: str) -> str:
    """Record a scheduler snapshot (JSON, as ``snapshot_to_json`` writes it)."""
    cluster = Cluster.objects.get(pk=cluster_id)
    result = services.record_snapshot(actor, cluster, snapshot_from_json(snapshot))
    return (
        f"{cluster.name}: {result.new_attempts} new attempts, "
        f"{result.changed_attempts} changed, {result.changed_nodes} nodes changed"
    )
