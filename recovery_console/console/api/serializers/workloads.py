"""Workloads and their attempts, with the GPU-hours their interruptions cost."""

from __future__ import annotations

from typing import Any, cast

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from detection import costs
from detection.core.losses import GpuHoursLost
from fleet.models import Attempt, Workload

from .common import GpuHoursLostSerializer, cluster_name_field, lost_as_json


class _WorkloadListSerializer(serializers.ListSerializer):  # type: ignore[type-arg]
    """Reads the costs of a whole page of workloads at once, not one query set per row."""

    def to_representation(self, data: Any) -> list[Any]:
        items = list(data.all() if hasattr(data, "all") else data)
        cast(dict[str, Any], self._context)["costs"] = costs.workload_costs(w.pk for w in items)
        return super().to_representation(items)


class WorkloadSerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    cluster = cluster_name_field()
    last_checkpoint_step = serializers.SerializerMethodField()
    last_checkpoint_at = serializers.SerializerMethodField()
    gpu_hours_lost = serializers.SerializerMethodField()

    class Meta:
        model = Workload
        fields = (
            "id",
            "cluster",
            "key",
            "is_array",
            "array",
            "state",
            "stopped_reason",
            "stopped_at",
            "created_at",
            "updated_at",
            "last_checkpoint_step",
            "last_checkpoint_at",
            "gpu_hours_lost",
        )
        list_serializer_class = _WorkloadListSerializer

    def _cost(self, workload: Workload) -> costs.WorkloadCost:
        found = self.context.get("costs")
        if found is None:  # one workload, not a page of them
            found = costs.workload_costs([workload.pk])
            cast(dict[str, Any], self.context)["costs"] = found
        return cast(
            costs.WorkloadCost, found.get(workload.pk) or costs.WorkloadCost(GpuHoursLost())
        )

    @extend_schema_field(serializers.IntegerField(allow_null=True))
    def get_last_checkpoint_step(self, workload: Workload) -> int | None:
        return self._cost(workload).last_checkpoint_step

    @extend_schema_field(serializers.DateTimeField(allow_null=True))
    def get_last_checkpoint_at(self, workload: Workload) -> str | None:
        at = self._cost(workload).last_checkpoint_at
        return serializers.DateTimeField().to_representation(at) if at else None

    @extend_schema_field(GpuHoursLostSerializer)
    def get_gpu_hours_lost(self, workload: Workload) -> dict[str, float]:
        return lost_as_json(self._cost(workload).lost)


class AttemptSerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    cluster = cluster_name_field()

    class Meta:
        model = Attempt
        fields = (
            "id",
            "cluster",
            "workload",
            "job_id",
            "attempt_index",
            "name",
            "partition",
            "state",
            "nodes",
            "excluded_nodes",
            "submitted_at",
            "started_at",
            "ended_at",
            "exit_code",
            "signal",
            "reason",
            "first_seen_at",
            "time_to_resume_s",
            "checkpoint_step",
            "checkpoint_at",
            "resume",
            "resume_summary",
        )

    checkpoint_step = serializers.IntegerField(
        source="monitor.checkpoint_step", read_only=True, allow_null=True, default=None
    )
    checkpoint_at = serializers.DateTimeField(
        source="monitor.checkpoint_at", read_only=True, allow_null=True, default=None
    )
    # Blank: nothing to resume from, or not known yet.
    # Null for an attempt detection has not watched yet (it has no monitor).
    resume = serializers.CharField(
        source="monitor.resume", read_only=True, default="", allow_null=True
    )
    resume_summary = serializers.CharField(
        source="monitor.resume_summary", read_only=True, default="", allow_null=True
    )
