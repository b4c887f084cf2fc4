"""Advice and reviewers' labels on it."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_serializer
from rest_framework import serializers

from fleet.core.taxonomy import ACTION_CHOICES
from recovery_console.console.models import Review
from remediation.models import Advice

from .common import cluster_name_field, username_field


# "Advice" is the Advisor API's (controllers') view of an advice.
@extend_schema_serializer(component_name="ConsoleAdvice")
class AdviceSerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    cluster = cluster_name_field()

    class Meta:
        model = Advice
        fields = (
            "id",
            "cluster",
            "workload",
            "attempt",
            "anomaly",
            "generation",
            "action",
            "desired_state",
            "exclude_nodes",
            "drain_nodes",
            "reasons",
            "explanation",
            "category",
            "attribution",
            "rule",
            "confidence_label",
            "enforce",
            "state",
            "decided_at",
            "updated_at",
            # The controller's side: who claimed the advice and what it reported back.
            "claimed_by",
            "claimed_at",
            "executed_at",
            "observed_generation",
            "disposition",
            "disposition_reason",
        )


class ReviewSerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    reviewer = username_field()

    class Meta:
        model = Review
        fields = (
            "id",
            "advice",
            "reviewer",
            "agrees",
            "preferred_action",
            "comment",
            # The advice's generation labelled: a label on an older one no longer counts.
            "generation",
            "created_at",
            "updated_at",
        )


class LabelSerializer(serializers.Serializer):  # type: ignore[type-arg]
    """A reviewer's label. Agreeing implies the advised action; disagreeing names another."""

    agrees = serializers.BooleanField()
    # Left empty when agreeing: the service fills in the advised action.
    preferred_action = serializers.ChoiceField(
        choices=ACTION_CHOICES, required=False, allow_blank=True, default=""
    )
    comment = serializers.CharField(required=False, allow_blank=True, default="", max_length=5000)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        # A 400 on the field before any lock is taken; the service checks it again.
        if not attrs["agrees"] and not attrs["preferred_action"]:
            raise serializers.ValidationError(
                {"preferred_action": "name the action you would have taken"}
            )
        return attrs
