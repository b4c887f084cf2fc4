"""Filters of the console API. Every list takes ``cluster`` (by name) and a time range:
``created__after`` (inclusive) and ``created__before`` (exclusive) on when the row came to be
(an audit entry's time, an anomaly's detection, an advice's decision, an attempt first seen),
so consecutive ranges never count a row twice. Lists that change also take ``updated__*``."""

from __future__ import annotations

import django_filters as filters
from django.db.models import Exists, OuterRef, QuerySet

from detection.models import Anomaly, AnomalyFamily, AnomalyState, TelemetryGap
from fleet.core.taxonomy import (
    ACTION_CHOICES,
    Attribution,
    Category,
    Kind,
    choices,
)
from fleet.models import (
    JOB_STATE_CHOICES,
    NODE_STATE_CHOICES,
    Attempt,
    AuditEntry,
    Cluster,
    ClusterMode,
    Node,
    Workload,
    WorkloadState,
)
from recovery_console.console.models import (
    ModeChangeRequest,
    ModeRequestStatus,
    NotificationChannel,
    PolicyChangeRequest,
    Review,
)
from remediation.models import Advice, AdviceState, NodeHealth, NodeHealthState


def _cluster(field: str = "cluster") -> filters.ModelChoiceFilter:
    return filters.ModelChoiceFilter(
        field_name=field,
        queryset=Cluster.objects.all(),
        # By name, as payloads name clusters; an unknown name is a 400, not an empty list.
        to_field_name="name",
        label="Cluster name",
    )


def _after(field: str) -> filters.IsoDateTimeFilter:
    return filters.IsoDateTimeFilter(
        field_name=field, lookup_expr="gte", label=f"{field} at or after"
    )


def _before(field: str) -> filters.IsoDateTimeFilter:
    return filters.IsoDateTimeFilter(field_name=field, lookup_expr="lt", label=f"{field} before")


class ClusterFilterSet(filters.FilterSet):  # type: ignore[misc]  # django-filter is untyped
    mode = filters.ChoiceFilter(choices=ClusterMode.choices)
    created__after = _after("created_at")
    created__before = _before("created_at")

    class Meta:
        model = Cluster
        fields = ("mode",)


class WorkloadFilterSet(filters.FilterSet):  # type: ignore[misc]  # django-filter is untyped
    cluster = _cluster()
    state = filters.MultipleChoiceFilter(choices=WorkloadState.choices)
    key = filters.CharFilter(lookup_expr="icontains", label="Key contains")
    created__after = _after("created_at")
    created__before = _before("created_at")
    updated__after = _after("updated_at")
    updated__before = _before("updated_at")

    class Meta:
        model = Workload
        fields = ("cluster", "state", "key")


class AttemptFilterSet(filters.FilterSet):  # type: ignore[misc]  # django-filter is untyped
    cluster = _cluster()
    state = filters.MultipleChoiceFilter(choices=JOB_STATE_CHOICES)
    # The row came to be when the console first saw the attempt, whatever its submit time.
    created__after = _after("first_seen_at")
    created__before = _before("first_seen_at")
    ended__after = _after("ended_at")
    ended__before = _before("ended_at")

    class Meta:
        model = Attempt
        fields = ("cluster", "workload", "state", "job_id", "partition")


class AnomalyFilterSet(filters.FilterSet):  # type: ignore[misc]  # django-filter is untyped
    cluster = _cluster()
    # Repeatable (``?kind=crash&kind=hang``); family and state take one value.
    kind = filters.MultipleChoiceFilter(choices=choices(Kind))
    category = filters.MultipleChoiceFilter(choices=choices(Category))
    attribution = filters.MultipleChoiceFilter(choices=choices(Attribution))
    family = filters.ChoiceFilter(choices=AnomalyFamily.choices)
    state = filters.ChoiceFilter(choices=AnomalyState.choices)
    created__after = _after("detected_at")
    created__before = _before("detected_at")
    updated__after = _after("updated_at")
    updated__before = _before("updated_at")

    class Meta:
        model = Anomaly
        fields = ("cluster", "workload", "attempt", "kind", "category", "attribution", "state")


class TelemetryGapFilterSet(filters.FilterSet):  # type: ignore[misc]  # django-filter is untyped
    cluster = _cluster()
    open = filters.BooleanFilter(field_name="ended_at", lookup_expr="isnull", label="still open")
    created__after = _after("started_at")
    created__before = _before("started_at")

    class Meta:
        model = TelemetryGap
        fields = ("cluster", "source", "open")


class AdviceFilterSet(filters.FilterSet):  # type: ignore[misc]  # django-filter is untyped
    cluster = _cluster()
    action = filters.MultipleChoiceFilter(choices=ACTION_CHOICES)
    state = filters.MultipleChoiceFilter(choices=AdviceState.choices)
    category = filters.MultipleChoiceFilter(choices=choices(Category))
    created__after = _after("decided_at")
    created__before = _before("decided_at")
    updated__after = _after("updated_at")
    updated__before = _before("updated_at")

    class Meta:
        model = Advice
        fields = ("cluster", "workload", "attempt", "anomaly", "action", "state", "enforce")


class ReviewFilterSet(filters.FilterSet):  # type: ignore[misc]  # django-filter is untyped
    # A review has no cluster of its own: it is its advice's.
    cluster = _cluster("advice__cluster")
    # By username, as payloads show reviewers; an unknown one is just an empty list.
    reviewer = filters.CharFilter(field_name="reviewer__username", label="Reviewer username")
    preferred_action = filters.ChoiceFilter(choices=ACTION_CHOICES)
    created__after = _after("created_at")
    created__before = _before("created_at")
    updated__after = _after("updated_at")
    updated__before = _before("updated_at")

    class Meta:
        model = Review
        fields = ("cluster", "advice", "reviewer", "agrees", "preferred_action")


class ModeChangeRequestFilterSet(filters.FilterSet):  # type: ignore[misc]  # django-filter is untyped
    cluster = _cluster()
    status = filters.ChoiceFilter(choices=ModeRequestStatus.choices)
    created__after = _after("requested_at")
    created__before = _before("requested_at")

    class Meta:
        model = ModeChangeRequest
        fields = ("cluster", "status")


class PolicyChangeRequestFilterSet(filters.FilterSet):  # type: ignore[misc]  # django-filter is untyped
    cluster = _cluster()
    status = filters.ChoiceFilter(choices=ModeRequestStatus.choices)
    created__after = _after("requested_at")
    created__before = _before("requested_at")

    class Meta:
        model = PolicyChangeRequest
        fields = ("cluster", "status")


class NodeFilterSet(filters.FilterSet):  # type: ignore[misc]  # django-filter is untyped
    cluster = _cluster()
    state = filters.MultipleChoiceFilter(choices=NODE_STATE_CHOICES)
    health = filters.ChoiceFilter(
        choices=NodeHealthState.choices, method="filter_health", label="Health state"
    )
    updated__after = _after("updated_at")
    updated__before = _before("updated_at")

    class Meta:
        model = Node
        fields = ("cluster", "state", "name")

    def filter_health(self, queryset: QuerySet[Node], name: str, value: str) -> QuerySet[Node]:
        # A node without a health row has never had a strike: it is healthy.
        record = NodeHealth.objects.filter(cluster=OuterRef("cluster"), name=OuterRef("name"))
        # Healthy: no record at all, or a record back in the healthy state (a released node).
        if value == NodeHealthState.HEALTHY:
            return queryset.exclude(Exists(record.exclude(state=value)))
        return queryset.filter(Exists(record.filter(state=value)))


class AuditEntryFilterSet(filters.FilterSet):  # type: ignore[misc]  # django-filter is untyped
    cluster = _cluster()
    verb = filters.CharFilter(label="Verb (exact, e.g. cluster.mode_changed)")
    verb__startswith = filters.CharFilter(
        field_name="verb", lookup_expr="startswith", label="Verb prefix (e.g. advice.)"
    )
    actor = filters.CharFilter(label="Actor (exact, e.g. user:alice)")
    actor__startswith = filters.CharFilter(
        field_name="actor", lookup_expr="startswith", label="Actor prefix (e.g. controller:)"
    )
    created__after = _after("at")
    created__before = _before("at")
    # For a client following the trail: everything after the last sequence it saw (gapless).
    sequence__gt = filters.NumberFilter(field_name="sequence", lookup_expr="gt")

    class Meta:
        model = AuditEntry
        fields = ("cluster", "workload", "attempt", "verb", "actor", "object_type", "object_id")


class NotificationChannelFilterSet(filters.FilterSet):  # type: ignore[misc]  # django-filter is untyped
    cluster = _cluster()

    class Meta:
        model = NotificationChannel
        fields = ("cluster", "kind", "enabled")
