"""Nodes as the scheduler reports them, with their health."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from fleet.models import Node
from remediation.models import NodeHealth

from .common import cluster_name_field


# No cluster or name: it is nested in the node, which has both.
class NodeHealthSerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    class Meta:
        model = NodeHealth
        fields = (
            "state",
            "strikes",
            "excluded_at",
            "drained_at",
            "drain_reason",
            "released_at",
            "released_by",
            "release_reason",
        )


class NodeListSerializer(serializers.ListSerializer):  # type: ignore[type-arg]
    """Loads the health of a whole page of nodes in one query."""

    def to_representation(self, data: Any) -> list[Any]:
        nodes = list(data.all() if hasattr(data, "all") else data)
        # Shared with each child's ``get_health`` through the context: no query per node.
        cast(dict[str, Any], self._context)["health"] = _health_of(nodes)
        return super().to_representation(nodes)


def _health_of(nodes: Iterable[Node]) -> dict[tuple[int, str], NodeHealth]:
    nodes = list(nodes)
    rows = NodeHealth.objects.filter(
        cluster_id__in={n.cluster_id for n in nodes}, name__in={n.name for n in nodes}
    )
    # The two IN lists may pair a name with the wrong cluster: the exact key sorts that out.
    return {(h.cluster_id, h.name): h for h in rows}


class NodeSerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    """A node as the scheduler reports it, with its health across attempts (null when it never
    had a strike)."""

    cluster = cluster_name_field()
    health = serializers.SerializerMethodField()

    class Meta:
        model = Node
        list_serializer_class = NodeListSerializer
        fields = (
            "id",
            "cluster",
            "name",
            "state",
            "reason",
            "gpus",
            "partitions",
            "updated_at",
            "health",
        )

    @extend_schema_field(NodeHealthSerializer(allow_null=True))
    def get_health(self, node: Node) -> dict[str, Any] | None:
        known = self.context.get("health")
        if known is None:
            # A single node (retrieve, or the release verb) has no list serializer to preload it.
            known = _health_of([node])
        health = known.get((node.cluster_id, node.name))
        return NodeHealthSerializer(health).data if health is not None else None
