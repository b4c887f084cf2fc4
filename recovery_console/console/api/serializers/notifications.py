"""Notification channels."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from fleet.models import Cluster
from recovery_console.console.models import NotificationChannel, NotificationEvent


class NotificationChannelSerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    """A channel; a webhook's URL is write-only past its host (its path is often its secret).
    The model checks the target (and the outbound allowlist) on save."""

    # Writable, unlike everywhere else: admins create channels by cluster name.
    cluster = serializers.SlugRelatedField(slug_field="name", queryset=Cluster.objects.all())
    target = serializers.CharField(max_length=1000)
    events = serializers.ListField(
        child=serializers.ChoiceField(choices=NotificationEvent.choices), required=False
    )

    class Meta:
        model = NotificationChannel
        fields = ("id", "cluster", "kind", "target", "events", "enabled", "created_at")

    def to_representation(self, instance: NotificationChannel) -> dict[str, Any]:
        data: dict[str, Any] = super().to_representation(instance)
        data["target"] = instance.safe_target
        return data
