"""Clusters: the row, its registration and settings, its check, reporters, losses and agreement."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from fleet.core.outbound import redacted
from fleet.models import Cluster

from .common import GpuHoursLostSerializer


class ClusterSerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    class Meta:
        model = Cluster
        fields = (
            "id",
            "name",
            "mode",
            "partitions_allowlist",
            "policy",
            "telemetry",
            "scheduler",
            "created_at",
            "updated_at",
        )
        # Settings change through ``partial_update`` and the mode through the workflow, never here.
        read_only_fields = fields

    def to_representation(self, instance: Cluster) -> dict[str, Any]:
        data: dict[str, Any] = super().to_representation(instance)
        # Secrets are references; one stored inline before that rule is never shown.
        data["telemetry"] = redacted(data["telemetry"])
        data["scheduler"] = redacted(data["scheduler"])
        return data


class ReporterHealthSerializer(serializers.Serializer):  # type: ignore[type-arg]
    """One controller or watchdog, as the console last heard from it."""

    cluster = serializers.CharField()
    name = serializers.CharField()
    role = serializers.CharField(help_text="controller or watchdog (empty: never heard from)")
    status = serializers.ChoiceField(choices=["ok", "failing", "silent", "unused"])
    last_heartbeat_at = serializers.DateTimeField(allow_null=True)
    heartbeat_age_s = serializers.FloatField(allow_null=True)
    last_snapshot_at = serializers.DateTimeField(allow_null=True)
    silent_since = serializers.DateTimeField(allow_null=True)
    silent_after_s = serializers.FloatField()
    version = serializers.CharField(allow_blank=True)
    transport = serializers.CharField(allow_blank=True)
    last_error = serializers.CharField(allow_blank=True)


class ClusterSettingsSerializer(serializers.Serializer):  # type: ignore[type-arg]
    """What an operator may change on a cluster (each optional; the model validates them)."""

    policy = serializers.DictField(required=False)
    partitions_allowlist = serializers.ListField(
        child=serializers.CharField(max_length=64), required=False
    )
    telemetry = serializers.DictField(required=False)
    scheduler = serializers.DictField(required=False)
    # For the approver, when the change waits for one.
    note = serializers.CharField(required=False, allow_blank=True, max_length=5000)


class ClusterRegistrationSerializer(serializers.Serializer):  # type: ignore[type-arg]
    """A cluster's registration (admin): every document optional, each checked by the model
    (README, "The scheduler document" and "The telemetry document"). On ``PUT`` the documents
    given replace the cluster's; those left out stay as they are."""

    name = serializers.CharField(max_length=63)
    scheduler = serializers.DictField(required=False)
    telemetry = serializers.DictField(required=False)
    partitions_allowlist = serializers.ListField(
        child=serializers.CharField(max_length=64), required=False
    )
    policy = serializers.DictField(required=False)
    # For the approver, when a change waits for one.
    note = serializers.CharField(required=False, allow_blank=True, max_length=5000)


class FindingSerializer(serializers.Serializer):  # type: ignore[type-arg]
    stage = serializers.CharField()
    status = serializers.ChoiceField(choices=["ok", "warning", "problem", "info"])
    summary = serializers.CharField()
    details = serializers.ListField(child=serializers.CharField())


class CheckSerializer(serializers.Serializer):  # type: ignore[type-arg]
    status = serializers.ChoiceField(choices=["ok", "warning", "problem"])
    findings = FindingSerializer(many=True)


class ClusterLossesSerializer(serializers.Serializer):  # type: ignore[type-arg]
    cluster = serializers.CharField()
    gpu_hours_lost = GpuHoursLostSerializer()


class DayAgreementSerializer(serializers.Serializer):  # type: ignore[type-arg]
    day = serializers.DateField()
    agreed = serializers.IntegerField()
    labelled = serializers.IntegerField()


class AgreementSerializer(serializers.Serializer):  # type: ignore[type-arg]
    agreed = serializers.IntegerField()
    labelled = serializers.IntegerField()
    rate = serializers.FloatField(allow_null=True)
    window_days = serializers.IntegerField()
    min_agreement = serializers.FloatField()
    min_labelled = serializers.IntegerField()
    met = serializers.BooleanField()
    shortfall = serializers.CharField()
    by_day = DayAgreementSerializer(many=True)


class PrecisionRowSerializer(serializers.Serializer):  # type: ignore[type-arg]
    dimension = serializers.ChoiceField(choices=["category", "action", "rule"])
    value = serializers.CharField()
    agreed = serializers.IntegerField()
    labelled = serializers.IntegerField()
    precision = serializers.FloatField(allow_null=True)


class PrecisionSerializer(serializers.Serializer):  # type: ignore[type-arg]
    window_days = serializers.IntegerField()
    rows = PrecisionRowSerializer(many=True)


class RuleProposalSerializer(serializers.Serializer):  # type: ignore[type-arg]
    """A rule-table edit that reviewers' corrections propose, with the labels behind it."""

    key = serializers.CharField(help_text="the rule-table key: a signature, or a category")
    action = serializers.CharField(help_text="the action most reviewers chose instead")
    advised = serializers.ListField(child=serializers.CharField())
    chose = serializers.IntegerField(help_text="labels that chose the action")
    labels = serializers.IntegerField(help_text="labels on the advice of this key")
    advice_ids = serializers.ListField(child=serializers.IntegerField())
    agreement_now = serializers.FloatField(allow_null=True)
    agreement_with_rule = serializers.FloatField(
        allow_null=True, help_text="the agreement the window would have had with the rule"
    )
    summary = serializers.CharField()


class RuleEditSerializer(serializers.Serializer):  # type: ignore[type-arg]
    key = serializers.CharField(max_length=64)
    note = serializers.CharField(required=False, allow_blank=True, max_length=5000, default="")
