from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from fleet import services
from fleet.core.scheduler import ClusterSnapshot, JobState, NodeRecord, NodeState
from fleet.models import Attempt, AttemptIsHistory, AuditEntry, Node, Workload
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


def test_each_array_task_is_a_workload_of_its_own_under_the_array(cluster) -> None:
    tag = '{"workload": "sweep-lr"}'
    report(
        cluster,
        JobRecordFactory(job_id="900_1", name="sweep"),
        JobRecordFactory(job_id="900_2", name="sweep"),
        JobRecordFactory(job_id="901_0", name="other", comment=tag),
        JobRecordFactory(job_id="902", name="sweep"),  # not an array: the name alone
    )
    array = Workload.objects.get(key="sweep[]")
    assert array.is_array and not array.attempts.exists()
    assert sorted(array.tasks.values_list("key", flat=True)) == ["sweep[1]", "sweep[2]"]
    assert Workload.objects.get(key="sweep-lr[0]").array.key == "sweep-lr[]"
    assert Workload.objects.get(key="sweep").array is None
    task = Workload.objects.get(key="sweep[2]")
    assert list(task.attempts.values_list("job_id", flat=True)) == ["900_2"]


def test_a_requeued_task_stays_in_its_own_lineage_and_the_array_follows_its_tasks(cluster) -> None:
    one, two = (JobRecordFactory(job_id=f"900_{n}", name="sweep") for n in (1, 2))
    report(cluster, one, two)
    failed = replace(two, state=JobState.FAILED, exit_code=1, end_time=T0 + timedelta(seconds=5))
    report(cluster, one, failed, at=T0 + timedelta(seconds=5))
    assert Workload.objects.get(key="sweep[]").state == "running"  # task 1 still runs
    report(cluster, replace(one, state=JobState.COMPLETED), failed, at=T0 + timedelta(seconds=9))
    assert Workload.objects.get(key="sweep[]").state == "interrupted"
    again = replace(two, restart_count=1, start_time=T0 + timedelta(seconds=20))
    report(cluster, again, at=T0 + timedelta(seconds=20))
    assert Workload.objects.get(key="sweep[2]").attempts.count() == 2
    assert Workload.objects.get(key="sweep[1]").attempts.count() == 1
    assert Workload.objects.get(key="sweep[]").state == "running"


def test_a_long_name_keeps_room_for_the_task_number(cluster) -> None:
    report(cluster, JobRecordFactory(job_id="900_12", name="x" * 200))
    keys = set(Workload.objects.values_list("key", flat=True))
    assert keys == {"x" * 196 + "[12]", "x" * 198 + "[]"}


# --- one bad job or node never blocks the rest ------------------------------------------


def deep(levels: int) -> str:
    return '{"a": ' * levels + "1" + "}" * levels


def test_each_bad_job_and_node_is_rejected_alone_and_the_rest_recorded(cluster) -> None:
    good = [JobRecordFactory(job_id=str(n), name=f"good-{n}") for n in (1, 2, 3)]
    bad = {
        "name": JobRecordFactory(job_id="10", name="n" * 201),
        "partition": JobRecordFactory(job_id="11", partition="p" * 65),
        "comment": JobRecordFactory(job_id="12", comment="[" * 3000 + "]" * 3000),
        "exit_code": JobRecordFactory(job_id="13", exit_code=2**31),
        "restart_count": JobRecordFactory(job_id="14", restart_count=2**32),
        "nodes": JobRecordFactory(job_id="15", nodes=("x" * 129,)),
        "job_id": replace(good[0], name="again"),
    }
    nodes = [
        NodeRecord("gpu-node-001", NodeState.IDLE, gpus=8),
        NodeRecord("gpu-node-002", NodeState.IDLE, gpus=2**40),
        NodeRecord("gpu-node-001", NodeState.DOWN),
    ]
    result = report(cluster, *good, *bad.values(), nodes=nodes)

    assert sorted(Attempt.objects.values_list("name", flat=True)) == ["good-1", "good-2", "good-3"]
    assert list(Node.objects.values_list("name", "state")) == [("gpu-node-001", "IDLE")]
    assert (result.new_attempts, result.changed_nodes) == (3, 1)
    assert [(r.kind, r.index, r.field) for r in result.rejected] == [
        ("job", 3 + n, field) for n, field in enumerate(bad)
    ] + [("node", 1, "gpus"), ("node", 2, "name")]
    assert all(r.problem for r in result.rejected)
    entry = AuditEntry.objects.get(verb="snapshot.rejected")
    assert entry.payload["count"] == 9
    assert entry.payload["rejected"][0] == result.rejected[0].as_json()


@pytest.mark.parametrize(
    ("comment", "problem"),
    [
        (deep(9), "nested deeper than 8 levels"),
        ('{"workload": "' + "w" * 201 + '"}', "workload tag is longer than 200"),
        ('{"workload": {"nested": 1}}', "workload tag is not a string"),
        ("c" * 10_001, "longer than 10000 characters"),
    ],
)
def test_a_comment_too_deep_too_long_or_with_a_bad_tag_is_rejected(cluster, comment, problem):
    result = report(cluster, JobRecordFactory(job_id="1", comment=comment), JobRecordFactory())
    ((rejection),) = result.rejected
    assert (rejection.id, rejection.field) == ("1", "comment")
    assert problem in rejection.problem
    assert Attempt.objects.count() == 1


def test_text_that_is_not_unicode_is_rejected_not_a_crash(cluster) -> None:
    result = report(cluster, JobRecordFactory(job_id="1", name="bad\ud800"), JobRecordFactory())
    assert [(r.id, r.field) for r in result.rejected] == [("1", "name")]
    assert Attempt.objects.count() == 1


def test_names_the_database_holds_equal_do_not_fail_the_snapshot(cluster) -> None:
    report(cluster, nodes=[NodeRecord("gpu-node-001", NodeState.IDLE)])
    result = report(
        cluster,
        JobRecordFactory(job_id="1", comment='{"workload": "LLaMA"}'),
        JobRecordFactory(job_id="2", comment='{"workload": "llama"}'),
        nodes=[
            NodeRecord("GPU-NODE-001", NodeState.DOWN),
            NodeRecord("gpu-node-009", NodeState.IDLE),
        ],
        at=T0 + timedelta(seconds=5),
    )
    assert result.new_attempts == 2
    assert Node.objects.filter(name="gpu-node-009").exists()
    if Node.objects.filter(name__iexact="GPU-NODE-001").count() == 1:  # a case-blind collation
        assert [(r.kind, r.index, r.field) for r in result.rejected] == [("node", 0, "name")]
        assert Workload.objects.count() == 1


# --- large snapshots: a bounded number of queries, short transactions ----------------------


def queries_to_record(cluster, jobs, at) -> int:  # type: ignore[no-untyped-def]
    with CaptureQueriesContext(connection) as queries:
        report(cluster, *jobs, at=at)
    return len(queries.captured_queries)


def test_a_large_snapshot_takes_a_few_queries_per_chunk_not_per_job(cluster) -> None:
    jobs = [
        JobRecordFactory(job_id=str(5000 + n), name=f"run-{n}", start_time=T0) for n in range(900)
    ]
    first = queries_to_record(cluster, jobs, T0)
    ended = [
        replace(j, state=JobState.FAILED, exit_code=1, end_time=T0 + timedelta(seconds=9))
        for j in jobs
    ]
    changed = queries_to_record(cluster, ended, T0 + timedelta(seconds=10))
    requeued = [replace(j, restart_count=1, start_time=T0 + timedelta(seconds=20)) for j in jobs]
    restarted = queries_to_record(cluster, requeued, T0 + timedelta(seconds=20))
    assert Attempt.objects.count() == 1800
    assert AuditEntry.objects.filter(verb="attempt.ended").count() == 900
    # A fixed handful per chunk of 400 (bulk inserts split at the database's parameter limit),
    # where recording them one by one took more than ten per job.
    assert max(first, changed, restarted) / len(jobs) < 0.15, (first, changed, restarted)
    resumed = Attempt.objects.filter(attempt_index=1).values_list("time_to_resume_s", flat=True)
    assert set(resumed) == {11.0}


def test_a_lost_node_starts_the_failure_of_the_attempt_running_on_it(cluster) -> None:
    """Slurm says a node is down only SlurmdTimeout after it went silent, and requeues its job
    then: time to resume counts from the node's loss, not from the requeue."""
    job = JobRecordFactory(job_id="900", nodes=("n1", "n2"), start_time=T0)
    report(cluster, job)
    lost = NodeRecord("n2", NodeState.DOWN, "Not responding", lost_at=T0 + timedelta(seconds=5))
    requeued = replace(job, state=JobState.PENDING, nodes=(), restart_count=1, start_time=None)
    report(cluster, requeued, nodes=(lost,), at=T0 + timedelta(seconds=30))
    rerun = replace(job, nodes=("n3", "n4"), restart_count=1, start_time=T0 + timedelta(seconds=40))
    report(cluster, rerun, at=T0 + timedelta(seconds=41))
    first, second = Attempt.objects.filter(job_id="900").order_by("attempt_index")
    assert first.failed_at == T0 + timedelta(seconds=5)
    assert second.time_to_resume_s == 35.0
