"""Workloads, their attempts, anomalies and telemetry gaps (read-only)."""

from __future__ import annotations

from detection.models import Anomaly, TelemetryGap
from fleet.models import Attempt, Workload
from recovery_console.console.api import filtersets as f
from recovery_console.console.api import serializers as s

from .common import ReadOnlyViewSet


class WorkloadViewSet(ReadOnlyViewSet):
    """Workloads: logical training runs, each made of attempts."""

    queryset = Workload.objects.select_related("cluster")
    serializer_class = s.WorkloadSerializer
    filterset_class = f.WorkloadFilterSet


class AttemptViewSet(ReadOnlyViewSet):
    """Attempts: one Slurm job, or one requeue of it. History: never rewritten."""

    queryset = Attempt.objects.select_related("cluster", "monitor")
    serializer_class = s.AttemptSerializer
    filterset_class = f.AttemptFilterSet


class AnomalyViewSet(ReadOnlyViewSet):
    """Anomalies: detected crashes, hangs and stragglers, with evidence and attribution."""

    queryset = Anomaly.objects.select_related("cluster")
    serializer_class = s.AnomalySerializer
    filterset_class = f.AnomalyFilterSet


class TelemetryGapViewSet(ReadOnlyViewSet):
    """Telemetry gaps: when a source was unreachable, silent or late, and for how many running
    jobs hang and slowdown verdicts waited on it."""

    queryset = TelemetryGap.objects.select_related("cluster")
    serializer_class = s.TelemetryGapSerializer
    filterset_class = f.TelemetryGapFilterSet
