"""Nodes, and returning one to service."""

from __future__ import annotations

from typing import ClassVar

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from fleet.models import Node
from recovery_console.console import reviews
from recovery_console.console.api import filtersets as f
from recovery_console.console.api import serializers as s
from recovery_console.console.roles import OPERATOR
from remediation import services as remediation
from remediation.models import NodeHealth

from .common import REFUSED, ReadOnlyViewSet


class NodeViewSet(ReadOnlyViewSet):
    """Nodes as the scheduler reports them, with their strikes and drain state."""

    queryset = Node.objects.select_related("cluster")
    serializer_class = s.NodeSerializer
    filterset_class = f.NodeFilterSet
    verb_roles: ClassVar = {"release": OPERATOR}

    @extend_schema(
        request=s.ReasonSerializer,
        responses={200: s.NodeSerializer, 403: REFUSED[403], 404: OpenApiResponse()},
    )
    @action(detail=True, methods=["post"])
    def release(self, request: Request, pk: str) -> Response:
        """Return a drained or suspect node to service (operator), with a reason."""
        payload = s.ReasonSerializer(data=request.data)
        payload.is_valid(raise_exception=True)
        node = self.get_object()
        # A node that never had a strike has nothing to release: 404, as the web page answers.
        get_object_or_404(NodeHealth, cluster=node.cluster, name=node.name)
        remediation.release_node(
            reviews.actor_of(request.user),
            node.cluster,
            node.name,
            payload.validated_data["reason"],
        )
        # Serialized after the release, so the health shown is the new one.
        return Response(s.NodeSerializer(node).data)
