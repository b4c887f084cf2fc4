"""Advisor API payloads (DESIGN.md §4)."""

from typing import Any

from rest_framework import serializers

from fleet.core.scheduler import JobState, NodeState
from remediation.core.drains import drain_reason
from remediation.models import Advice, Milestone, NodeHealth

# The database's integer columns (restart count, exit code, signal, GPUs).
INT_MIN, INT_MAX = -(2**31), 2**31 - 1


class JobSerializer(serializers.Serializer):  # type: ignore[type-arg]
    """One job; the fleet checks the rest (lengths against its columns, the comment's depth)."""

    # Plain ids and array tasks ("1234_7") only: the id ends up in scontrol arguments.
    job_id = serializers.RegexField(r"^\d+(_\d+)?$", max_length=64)
    name = serializers.CharField(allow_blank=True, default="", trim_whitespace=False)
    state = serializers.ChoiceField(choices=[s.value for s in JobState])
    partition = serializers.CharField(allow_blank=True, default="")
    nodes = serializers.ListField(child=serializers.CharField(max_length=128), default=list)
    restart_count = serializers.IntegerField(min_value=0, max_value=INT_MAX, default=0)
    exit_code = serializers.IntegerField(
        allow_null=True, default=None, min_value=INT_MIN, max_value=INT_MAX
    )
    signal = serializers.IntegerField(
        allow_null=True, default=None, min_value=INT_MIN, max_value=INT_MAX
    )
    reason = serializers.CharField(allow_blank=True, default="")
    comment = serializers.CharField(allow_blank=True, default="", trim_whitespace=False)
    excluded_nodes = serializers.ListField(
        child=serializers.CharField(max_length=128), default=list
    )
    held = serializers.BooleanField(default=False)
    submit_time = serializers.DateTimeField(allow_null=True, default=None)
    start_time = serializers.DateTimeField(allow_null=True, default=None)
    end_time = serializers.DateTimeField(allow_null=True, default=None)


class NodeSerializer(serializers.Serializer):  # type: ignore[type-arg]
    name = serializers.CharField(max_length=128)
    state = serializers.ChoiceField(choices=[s.value for s in NodeState])
    reason = serializers.CharField(allow_blank=True, default="")  # cut to its column
    gpus = serializers.IntegerField(min_value=0, max_value=INT_MAX, default=0)
    partitions = serializers.ListField(child=serializers.CharField(max_length=64), default=list)
    lost_at = serializers.DateTimeField(
        allow_null=True, default=None, help_text="a lost node: when it was last known alive"
    )


class SnapshotSerializer(serializers.Serializer):  # type: ignore[type-arg]
    """The snapshot as documented. A bad job or node is rejected on its own (see
    ``SnapshotEnvelopeSerializer``); only a bad envelope refuses the whole request."""

    taken_at = serializers.DateTimeField()
    jobs = JobSerializer(many=True, max_length=100_000)  # type: ignore[call-arg]
    nodes = NodeSerializer(many=True, max_length=100_000)  # type: ignore[call-arg]


class SnapshotEnvelopeSerializer(serializers.Serializer):  # type: ignore[type-arg]
    """What is checked for the request as a whole; each job and node is checked by itself."""

    taken_at = serializers.DateTimeField()
    # Bounds one request, so a runaway squeue cannot make the console parse millions of rows.
    jobs = serializers.ListField(child=serializers.JSONField(allow_null=True), max_length=100_000)
    nodes = serializers.ListField(child=serializers.JSONField(allow_null=True), max_length=100_000)


class RejectionSerializer(serializers.Serializer):  # type: ignore[type-arg]
    kind = serializers.ChoiceField(choices=["job", "node"])
    id = serializers.CharField(help_text="the job id or node name as reported (cut short)")
    index = serializers.IntegerField(help_text="its position in the request's list")
    field = serializers.CharField()
    problem = serializers.CharField()


class SnapshotResultSerializer(serializers.Serializer):  # type: ignore[type-arg]
    new_attempts = serializers.IntegerField()
    changed_attempts = serializers.IntegerField()
    changed_nodes = serializers.IntegerField()
    rejected = RejectionSerializer(many=True, help_text="jobs and nodes not recorded, and why")


class AdviceSerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    # Flattened from the attempt, so a controller finds the job without a second request.
    job_id = serializers.CharField(source="attempt.job_id")
    attempt_index = serializers.IntegerField(source="attempt.attempt_index")
    partition = serializers.CharField(source="attempt.partition")
    drain_reason = serializers.SerializerMethodField(
        help_text="the reason to give Slurm when draining `drain_nodes` (empty when none)"
    )

    class Meta:
        model = Advice
        fields = (
            "id",
            "generation",
            "job_id",
            "attempt_index",
            "partition",
            "action",
            "desired_state",
            "exclude_nodes",
            "drain_nodes",
            "drain_reason",
            "enforce",
            "state",
            "reasons",
            "decided_at",
            "claimed_by",
            "observed_generation",
            "disposition",
        )

    def get_drain_reason(self, advice: Advice) -> str:
        if not advice.drain_nodes:
            return ""  # the anomaly is read only for the few advice that drain
        return drain_reason(advice.pk, advice.category, advice.anomaly.summary)


class NodeResumeSerializer(serializers.ModelSerializer):  # type: ignore[type-arg]
    """A node released in the console that our drain took out of Slurm: resume it there if
    Slurm still shows our reason (a person's drain since is theirs)."""

    node = serializers.CharField(source="name")
    reason = serializers.CharField(source="slurm_reason", help_text="our drain's reason, exactly")
    requested_at = serializers.DateTimeField(source="resume_requested_at")

    class Meta:
        model = NodeHealth
        fields = ("node", "reason", "requested_at")


class NodeResumeReportSerializer(serializers.Serializer):  # type: ignore[type-arg]
    node = serializers.CharField(max_length=128)
    requested_at = serializers.DateTimeField(help_text="as read: a report on it settles it once")
    outcome = serializers.ChoiceField(choices=["resumed", "in_service", "not_ours", "unknown_node"])
    detail = serializers.CharField(max_length=2000, allow_blank=True, default="")


class AdvicePageSerializer(serializers.Serializer):  # type: ignore[type-arg]
    next = serializers.URLField(allow_null=True, help_text="the next page; null on the last")
    previous = serializers.URLField(allow_null=True)
    results = AdviceSerializer(many=True)


class AdviceQuerySerializer(serializers.Serializer):  # type: ignore[type-arg]
    active = serializers.BooleanField(default=True)
    # Above 250 is cut to 250 by the paginator; a non-number or zero is a 400 naming it.
    limit = serializers.IntegerField(min_value=1, required=False)
    cursor = serializers.CharField(required=False)


class RefusalSerializer(serializers.Serializer):  # type: ignore[type-arg]
    detail = serializers.CharField()
    code = serializers.CharField(required=False, help_text="`withdrawn`: take no further step")


class ReconciliationSerializer(serializers.Serializer):  # type: ignore[type-arg]
    observed_generation = serializers.IntegerField(min_value=1)
    # A controller's words; the console maps them to claimed, executed and failed.
    disposition = serializers.ChoiceField(choices=["pending", "converged", "abandoned"])
    reason = serializers.CharField(max_length=2000, allow_blank=True, default="")


class MilestoneSerializer(serializers.Serializer):  # type: ignore[type-arg]
    advice = serializers.IntegerField(min_value=1)
    # Chosen by the controller and unique per cluster: a retried POST records nothing new.
    idempotency_key = serializers.CharField(max_length=200)
    action = serializers.ChoiceField(choices=Milestone.Step.values)
    at = serializers.DateTimeField()
    detail = serializers.DictField(required=False, default=dict)


class HeartbeatSerializer(serializers.Serializer):  # type: ignore[type-arg]
    role = serializers.ChoiceField(choices=["controller", "watchdog"], default="controller")
    # Its cycle: the console counts it silent after a few of these without a heartbeat.
    interval_s = serializers.FloatField(min_value=0.1, max_value=3600, required=False)
    controller_version = serializers.CharField(max_length=50, required=False, default="")
    transport = serializers.CharField(max_length=50, required=False, default="")
    slurm_version = serializers.CharField(max_length=50, required=False, default="")
    last_error = serializers.CharField(
        max_length=2000, required=False, allow_blank=True, default=""
    )

    def to_info(self) -> dict[str, Any]:
        return dict(self.validated_data)


class HoldTimeoutsSerializer(serializers.Serializer):  # type: ignore[type-arg]
    default = serializers.FloatField()
    partitions = serializers.DictField(child=serializers.FloatField())


class HeartbeatAnswerSerializer(serializers.Serializer):  # type: ignore[type-arg]
    snapshot_age_s = serializers.FloatField(
        allow_null=True,
        help_text="seconds since Slurm's state was last reported under another token of the "
        "cluster (null: never); a watchdog reports its own when this grows old",
    )
    hold_timeouts = HoldTimeoutsSerializer()


class WhoAmISerializer(serializers.Serializer):  # type: ignore[type-arg]
    cluster = serializers.CharField()
    name = serializers.CharField()
    mode = serializers.CharField()
    hold_timeouts = HoldTimeoutsSerializer()
