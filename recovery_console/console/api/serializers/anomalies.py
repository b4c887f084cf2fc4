"""Anomalies and telemetry gaps."""

from __future__ import annotations

from rest_framework import serializers

from detection.models import Anomaly, TelemetryGap

from .common import cluster_name_field


class TelemetryGapSerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    cluster = cluster_name_field()

    class Meta:
        model = TelemetryGap
        fields = ("id", "cluster", "source", "reason", "started_at", "ended_at", "suspended_jobs")
        read_only_fields = fields


class AnomalySerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    cluster = cluster_name_field()
    # A model property, not a column: evidence to detection, the figure the p95 target is about.
    detection_latency_seconds = serializers.FloatField(read_only=True)

    class Meta:
        model = Anomaly
        fields = (
            "id",
            "cluster",
            "workload",
            "attempt",
            "family",
            "kind",
            "category",
            "attribution",
            "confidence",
            "confidence_label",
            "root_cause",
            "implicated_hosts",
            "summary",
            "explanation",
            "evidence",
            "occurrences",
            "signature",
            "node_local",
            "state",
            "outcome",
            "resolution",
            "resolved_at",
            "first_evidence_at",
            "detected_at",
            "updated_at",
            "detection_latency_seconds",
        )
