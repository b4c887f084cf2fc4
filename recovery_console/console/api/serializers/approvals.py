"""Requests for action mode and for settings changes that wait for a second person."""

from __future__ import annotations

from rest_framework import serializers

from recovery_console.console.models import ModeChangeRequest, PolicyChangeRequest

from .common import cluster_name_field, username_field


class ModeChangeRequestSerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    cluster = cluster_name_field()
    requested_by = username_field()
    decided_by = username_field(nullable=True)

    class Meta:
        model = ModeChangeRequest
        fields = (
            "id",
            "cluster",
            "requested_by",
            "requested_at",
            "note",
            "agreement_rate",
            "labelled",
            "status",
            "decided_by",
            "decided_at",
            "decision_note",
        )


class PolicyChangeRequestSerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    cluster = cluster_name_field()
    requested_by = username_field()
    decided_by = username_field(nullable=True)
    changes = serializers.DictField(read_only=True)
    base = serializers.DictField(read_only=True)
    why = serializers.ListField(child=serializers.CharField(), read_only=True)

    class Meta:
        model = PolicyChangeRequest
        fields = (
            "id",
            "cluster",
            "requested_by",
            "requested_at",
            "changes",
            "base",
            "why",
            "note",
            "status",
            "decided_by",
            "decided_at",
            "decision_note",
        )
