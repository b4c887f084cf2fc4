from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from recovery_console.fleet import services
from recovery_console.fleet.core.scheduler import ClusterSnapshot, JobState, NodeRecord, NodeState
from recovery_console.fleet.models import Attempt, AttemptIsHistory, AuditEntry, Node, Workload
from tests.factories import JobRecordFactory

pytestmark = pytest.mark.django_db
T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


@pytest.fixture
def cluster():
    return services.create_cluster("user:alice", "research")


def report(cluster, *jobs, nodes=(), at=T0):
    snapshot = ClusterSnapshot(taken_at=at, jobs=tuple(jobs), nodes=tuple(nodes))
    return services.record_snapshot("controller:research", cluster, snapshot)


def test_a_new_job_becomes_an_attempt_of_the_workload_named_in_its_comment(cluster) -> None:
    job = JobRecordFactory(job_id="700", comment='{"workload": "llama-70b", "recovery": true}')
    result = report(cluster, job)
    attempt = Attempt.objects.get()
    assert (attempt.job_id, attempt.attempt_index, attempt.state) == ("700", 0, "RUNNING")
    assert attempt.workload.key == "llama-70b"
    assert attempt.workload.state == "running"
    assert result.new_attempts == 1
    assert AuditEntry.objects.filter(verb="attempt.observed", attempt=attempt).exists()


def test_without_a_tag_attempts_are_grouped_by_job_name(cluster) -> None:
    report(
        cluster,
        JobRecordFactory(job_id="1", name="gpt-13b"),
        JobRecordFactory(job_id="2", name="gpt-13b"),
    )
    assert Workload.objects.get().attempts.count() == 2


def test_a_failed_attempt_ends_and_interrupts_its_workload(cluster) -> None:
    job = JobRecordFactory(job_id="700")
    report(cluster, job)
    failed = replace(
        job,
        state=JobState.FAILED,
        exit_code=1,
        reason="NonZeroExitCode",
        end_time=T0 + timedelta(minutes=5),
    )
    result = report(cluster, failed, at=T0 + timedelta(minutes=5))
    attempt = Attempt.objects.get()
    assert (attempt.state, attempt.exit_code, attempt.ended_at) == ("FAILED", 1, failed.end_time)
    assert attempt.workload.state == "interrupted"
    assert result.changed_attempts == 1
    entry = AuditEntry.objects.get(verb="attempt.ended")
    assert entry.payload["state"] == {"from": "RUNNING", "to": "FAILED"}


def test_a_requeue_adds_an_attempt_and_never_rewrites_the_failed_one(cluster) -> None:
    job = JobRecordFactory(job_id="700")
    report(cluster, replace(job, state=JobState.NODE_FAIL, end_time=T0, reason="NodeFail"))
    report(
        cluster,
        replace(
            job,
            state=JobState.RUNNING,
            restart_count=1,
            nodes=("gpu-node-003", "gpu-node-004"),
            excluded_nodes=("gpu-node-001",),
        ),
        at=T0 + timedelta(minutes=2),
    )
    first, second = Attempt.objects.order_by("attempt_index")
    assert (first.state, first.nodes) == ("NODE_FAIL", ["gpu-node-001", "gpu-node-002"])
    assert (second.state, second.excluded_nodes) == ("RUNNING", ["gpu-node-001"])
    assert second.workload_id == first.workload_id


def test_a_requeue_we_never_saw_end_closes_the_earlier_attempt_as_requeued(cluster) -> None:
    job = JobRecordFactory(job_id="700")
    report(cluster, job)
    report(
        cluster,
        replace(job, state=JobState.PENDING, restart_count=1, held=True),
        at=T0 + timedelta(seconds=30),
    )
    first = Attempt.objects.get(attempt_index=0)
    assert (first.state, first.ended_at) == ("REQUEUED", T0 + timedelta(seconds=30))


def test_a_stale_report_cannot_reopen_an_ended_attempt(cluster) -> None:
    job = JobRecordFactory(job_id="700")
    report(cluster, replace(job, state=JobState.FAILED, end_time=T0))
    report(cluster, job, at=T0 + timedelta(seconds=5))  # a late RUNNING view of attempt 0
    assert Attempt.objects.get().state == "FAILED"


def test_an_ended_attempt_refuses_to_be_saved_again(cluster) -> None:
    report(cluster, JobRecordFactory(job_id="700", state=JobState.FAILED, end_time=T0))
    attempt = Attempt.objects.get()
    attempt.reason = "rewritten"
    with pytest.raises(AttemptIsHistory):
        attempt.save()


def test_an_unchanged_report_writes_nothing(cluster) -> None:
    job = JobRecordFactory(job_id="700")
    node = NodeRecord("gpu-node-001", NodeState.ALLOCATED, gpus=8, partitions=("gpu",))
    report(cluster, job, nodes=[node])
    before = AuditEntry.objects.count()
    result = report(cluster, job, nodes=[node], at=T0 + timedelta(seconds=5))
    assert result == services.SnapshotResult(0, 0, 0)
    assert AuditEntry.objects.count() == before


def test_node_state_changes_are_recorded_with_their_reason(cluster) -> None:
    node = NodeRecord("gpu-node-001", NodeState.ALLOCATED, gpus=8, partitions=("gpu",))
    report(cluster, nodes=[node])
    report(cluster, nodes=[replace(node, state=NodeState.DRAINED, reason="xid 79")])
    stored = Node.objects.get()
    assert (stored.state, stored.reason, stored.gpus) == ("DRAINED", "xid 79", 8)
    change = AuditEntry.objects.get(verb="node.state_changed")
    assert change.payload == {"state": "DRAINED", "reason": "xid 79", "previous_state": "ALLOCATED"}


def test_array_tasks_are_attempts_of_their_own(cluster) -> None:
    report(
        cluster,
        JobRecordFactory(job_id="900_1", name="sweep"),
        JobRecordFactory(job_id="900_2", name="sweep"),
    )
    assert sorted(Attempt.objects.values_list("job_id", flat=True)) == ["900_1", "900_2"]
