"""REST payloads of the console API. Rows are read-only here: every write goes through a
service, and the input serializers below only validate what a verb needs."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast

from drf_spectacular.utils import extend_schema_field, extend_schema_serializer
from rest_framework import serializers

from detection import costs
from detection.core.losses import GpuHoursLost
from detection.models import Anomaly, TelemetryGap
from fleet.core.outbound import redacted
from fleet.core.taxonomy import ACTION_CHOICES
from fleet.models import Attempt, AuditEntry, Cluster, Node, Workload
from recovery_console.console.models import (
    ModeChangeRequest,
    NotificationChannel,
    NotificationEvent,
    PolicyChangeRequest,
    Review,
)
from remediation.models import Advice, NodeHealth


# Clusters are named in URLs and filters, so payloads name them too rather than give a pk.
def _cluster_name(nullable: bool = False) -> serializers.SlugRelatedField:  # type: ignore[type-arg]
    return serializers.SlugRelatedField(slug_field="name", read_only=True, allow_null=nullable)


def _username(nullable: bool = False) -> serializers.SlugRelatedField:  # type: ignore[type-arg]
    return serializers.SlugRelatedField(slug_field="username", read_only=True, allow_null=nullable)


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


class GpuHoursLostSerializer(serializers.Serializer):  # type: ignore[type-arg]
    """Idle GPU-hours (held without progress, or waiting for the next attempt) and recomputed
    ones (a failed attempt's work since its last checkpoint; 0 when no checkpoint was seen)."""

    idle = serializers.FloatField()
    recompute = serializers.FloatField()
    total = serializers.FloatField()


def _lost(lost: GpuHoursLost) -> dict[str, float]:
    return {"idle": lost.idle, "recompute": lost.recompute, "total": lost.total}


class _WorkloadListSerializer(serializers.ListSerializer):  # type: ignore[type-arg]
    """Reads the costs of a whole page of workloads at once, not one query set per row."""

    def to_representation(self, data: Any) -> list[Any]:
        items = list(data.all() if hasattr(data, "all") else data)
        cast(dict[str, Any], self._context)["costs"] = costs.workload_costs(w.pk for w in items)
        return super().to_representation(items)


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


class WorkloadSerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    cluster = _cluster_name()
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
        return _lost(self._cost(workload).lost)


class AttemptSerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    cluster = _cluster_name()

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
    resume = serializers.CharField(source="monitor.resume", read_only=True, default="")
    resume_summary = serializers.CharField(
        source="monitor.resume_summary", read_only=True, default=""
    )


class ClusterLossesSerializer(serializers.Serializer):  # type: ignore[type-arg]
    cluster = serializers.CharField()
    gpu_hours_lost = GpuHoursLostSerializer()


class TelemetryGapSerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    cluster = _cluster_name()

    class Meta:
        model = TelemetryGap
        fields = ("id", "cluster", "source", "reason", "started_at", "ended_at", "suspended_jobs")
        read_only_fields = fields


class AnomalySerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    cluster = _cluster_name()
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


# "Advice" is the Advisor API's (controllers') view of an advice.
@extend_schema_serializer(component_name="ConsoleAdvice")
class AdviceSerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    cluster = _cluster_name()

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
    reviewer = _username()

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


class ModeChangeRequestSerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    cluster = _cluster_name()
    requested_by = _username()
    decided_by = _username(nullable=True)

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
    cluster = _cluster_name()
    requested_by = _username()
    decided_by = _username(nullable=True)
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


class NoteSerializer(serializers.Serializer):  # type: ignore[type-arg]
    note = serializers.CharField(required=False, allow_blank=True, default="", max_length=5000)


class ReasonSerializer(serializers.Serializer):  # type: ignore[type-arg]
    reason = serializers.CharField(max_length=5000)


# Going back to monitor mode must never be held up for want of a reason.
class OptionalReasonSerializer(serializers.Serializer):  # type: ignore[type-arg]
    reason = serializers.CharField(required=False, allow_blank=True, default="", max_length=5000)


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

    cluster = _cluster_name()
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


class AuditEntrySerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    # Entries about people (a token issued) belong to no cluster.
    cluster = _cluster_name(nullable=True)

    class Meta:
        model = AuditEntry
        fields = (
            "id",
            "sequence",
            "at",
            "actor",
            "cluster",
            "workload",
            "attempt",
            "verb",
            "object_type",
            "object_id",
            "payload",
            # With the hashes a client can verify the chain itself, not just ask ``chain``.
            "previous_hash",
            "entry_hash",
        )


# One list for both formats: a field added to the JSON shows up in the CSV too.
AUDIT_CSV_COLUMNS = AuditEntrySerializer.Meta.fields


class ChainStatusSerializer(serializers.Serializer):  # type: ignore[type-arg]
    intact = serializers.BooleanField()
    checked = serializers.IntegerField()
    broken_sequence = serializers.IntegerField(allow_null=True)
    broken_entry_id = serializers.IntegerField(allow_null=True)
    problem = serializers.CharField()


class TokenSerializer(serializers.Serializer):  # type: ignore[type-arg]
    """A personal API token: send it as ``Authorization: Token <key>``. Shown once."""

    key = serializers.CharField()
    created = serializers.DateTimeField()


# Never the key: it is shown once, when issued.
class TokenStatusSerializer(serializers.Serializer):  # type: ignore[type-arg]
    exists = serializers.BooleanField()
    created = serializers.DateTimeField(allow_null=True)


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
