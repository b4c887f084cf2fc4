"""Where a cluster's notifications go."""

from __future__ import annotations

from typing import Any, ClassVar

from rest_framework import mixins

from recovery_console.console.api import filtersets as f
from recovery_console.console.api import serializers as s
from recovery_console.console.models import NotificationChannel
from recovery_console.console.notifications import channels
from recovery_console.console.roles import ADMIN

from .common import ReadOnlyViewSet, model_refusals_as_400


class NotificationChannelViewSet(
    mixins.CreateModelMixin, mixins.UpdateModelMixin, mixins.DestroyModelMixin, ReadOnlyViewSet
):
    """Where a cluster's notifications go (webhooks and email); managed by admins."""

    queryset = NotificationChannel.objects.select_related("cluster")
    serializer_class = s.NotificationChannelSerializer
    filterset_class = f.NotificationChannelFilterSet
    verb_roles: ClassVar = {
        "create": ADMIN,
        "update": ADMIN,
        "partial_update": ADMIN,
        "destroy": ADMIN,
    }

    def perform_create(self, serializer: Any) -> None:
        # The service saves and audits; setting ``instance`` lets the response show what it stored.
        with model_refusals_as_400():
            serializer.instance = channels.add_channel(
                self.request.user, **serializer.validated_data
            )

    def perform_update(self, serializer: Any) -> None:
        with model_refusals_as_400():
            serializer.instance = channels.change_channel(
                self.request.user, serializer.instance, **serializer.validated_data
            )

    def perform_destroy(self, instance: NotificationChannel) -> None:
        channels.remove_channel(self.request.user, instance)
