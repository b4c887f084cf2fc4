"""Websocket consumers: one per stream, each forwarding its group's events to the page.

A socket is only for a logged-in user with the viewer role on the group's cluster (a
workload's group: its cluster's): anyone else is closed in ``connect``, unknown ids too.
Events carry ids only; the page re-fetches its partial, so what a user sees is still decided by
the views."""

import json
from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer

from fleet.events import cluster_group, workload_group
from fleet.models import Workload

from .roles import VIEWER, has_role

# Close code for a refused socket (the 4000-4999 range is for applications).
REFUSED = 4403


def _cluster_itself(pk: int) -> int | None:
    return pk


def _cluster_of_workload(pk: int) -> int | None:
    return Workload.objects.filter(pk=pk).values_list("cluster_id", flat=True).first()


@database_sync_to_async  # type: ignore[untyped-decorator]  # channels is untyped
def _may_view(user: Any, cluster_of: Any, pk: int) -> bool:
    cluster_id = cluster_of(pk)
    return cluster_id is not None and has_role(user, VIEWER, cluster_id)


class GroupConsumer(AsyncWebsocketConsumer):  # type: ignore[misc]  # channels is untyped
    """Joins one group named from the URL and forwards each event to the browser as JSON."""

    group_of: Any = None  # a function of the id in the URL
    cluster_of: Any = None  # the id in the URL -> the id of the cluster it belongs to
    group: str | None = None

    async def connect(self) -> None:
        user = self.scope.get("user")
        pk = int(self.scope["url_route"]["kwargs"]["pk"])
        if (
            user is None
            or not user.is_authenticated
            or not await _may_view(user, type(self).cluster_of, pk)
        ):
            await self.close(code=REFUSED)
            return
        self.group = type(self).group_of(pk)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()

    async def disconnect(self, code: int) -> None:
        if self.group is not None:
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def forward(self, event: dict[str, Any]) -> None:
        await self.send(text_data=json.dumps(event))

    # One handler per event type (channels maps "a.b" to the method a_b).
    workloads_changed = forward
    anomaly_changed = forward
    cluster_changed = forward
    advice_changed = forward


class ClusterConsumer(GroupConsumer):
    group_of = staticmethod(cluster_group)
    cluster_of = staticmethod(_cluster_itself)


class WorkloadConsumer(GroupConsumer):
    group_of = staticmethod(workload_group)
    cluster_of = staticmethod(_cluster_of_workload)
