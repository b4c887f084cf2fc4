"""Small live-update events, sent to the console's websocket groups after the commit.

Pages re-fetch the partial an event names, so permission checks stay in the views.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Literal, TypedDict

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

logger = logging.getLogger(__name__)


class WorkloadsChanged(TypedDict):
    type: Literal["workloads.changed"]
    cluster: int
    workloads: list[int]


def cluster_group(cluster_id: int) -> str:
    return f"cluster.{cluster_id}"


def workload_group(workload_id: int) -> str:
    return f"workload.{workload_id}"


def send_workloads_changed(cluster_id: int, workload_ids: list[int]) -> None:
    """Tell open pages of this cluster and of each workload that attempts changed."""
    event: WorkloadsChanged = {
        "type": "workloads.changed",
        "cluster": cluster_id,
        "workloads": workload_ids,
    }
    groups = [cluster_group(cluster_id)] + [workload_group(pk) for pk in workload_ids]
    # After the commit: a rolled-back write announces nothing, and no page re-fetches too early.
    transaction.on_commit(lambda: _send(groups, event))


def _send(groups: list[str], event: WorkloadsChanged | AnomalyChanged | ClusterChanged) -> None:
    layer = get_channel_layer()
    # No channel layer configured: nothing can be listening, so there is nothing to send.
    if layer is None:
        return
    # Ids only: pages re-fetch through the views, so nothing a viewer may not see is broadcast.
    try:
        # One trip into the event loop for all groups: one per group costs a thread each.
        async_to_sync(_send_to_groups)(layer, groups, event)
    except Exception:
        # The change is committed: a channel layer that is down costs open pages a live
        # update (they catch up on their next load), never the writer its answer.
        logger.exception("could not broadcast %s to %s", event["type"], ", ".join(groups))


async def _send_to_groups(layer: Any, groups: list[str], event: Mapping[str, Any]) -> None:
    for group in groups:
        await layer.group_send(group, dict(event))


class AnomalyChanged(TypedDict):
    type: Literal["anomaly.changed"]
    cluster: int
    workload: int
    anomaly: int


def send_anomaly(cluster_id: int, workload_id: int, anomaly_id: int) -> None:
    """An anomaly was detected or sharpened: its cluster and workload pages show it."""
    event: AnomalyChanged = {
        "type": "anomaly.changed",
        "cluster": cluster_id,
        "workload": workload_id,
        "anomaly": anomaly_id,
    }
    groups = [cluster_group(cluster_id), workload_group(workload_id)]
    transaction.on_commit(lambda: _send(groups, event))


ClusterPart = Literal[
    "reviews", "mode", "settings", "nodes", "notifications", "telemetry", "reporters"
]


class ClusterChanged(TypedDict):
    type: Literal["cluster.changed"]
    cluster: int
    what: ClusterPart


def send_cluster_changed(cluster_id: int, what: ClusterPart) -> None:
    """Something about the cluster itself changed (its mode, a mode request, a review, its
    settings or nodes): pages of the cluster re-fetch the partial ``what`` names."""
    event: ClusterChanged = {"type": "cluster.changed", "cluster": cluster_id, "what": what}
    transaction.on_commit(lambda: _send([cluster_group(cluster_id)], event))
