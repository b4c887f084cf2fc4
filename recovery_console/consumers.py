"""Websocket consumers: one per stream, each forwarding its group's events to the page."""

import json
from typing import Any

from channels.generic.websocket import AsyncWebsocketConsumer

from .events import cluster_group, workload_group


class GroupConsumer(AsyncWebsocketConsumer):  # type: ignore[misc]  # channels is untyped
    """Joins one group named from the URL and forwards each event to the browser as JSON."""

    group_of: Any = None  # a function of the id in the URL

    async def connect(self) -> None:
        self.group = type(self).group_of(int(self.scope["url_route"]["kwargs"]["pk"]))
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()

    async def disconnect(self, code: int) -> None:
        await self.channel_layer.group_discard(self.group, self.channel_name)

    async def workloads_changed(self, event: dict[str, Any]) -> None:
        await self.send(text_data=json.dumps(event))

    async def anomaly_changed(self, event: dict[str, Any]) -> None:
        await self.send(text_data=json.dumps(event))


class ClusterConsumer(GroupConsumer):
    group_of = staticmethod(cluster_group)


class WorkloadConsumer(GroupConsumer):
    group_of = staticmethod(workload_group)
