"""Array tasks are runs of their own: a task's failures use its own retries and restarts,
never its siblings'."""

from datetime import timedelta

import pytest

from fleet import services as fleet
from fleet.core.scheduler import ClusterSnapshot
from fleet.models import Attempt
from remediation import services
from remediation.models import Advice
from tests.factories import JobRecordFactory
from tests.remediation.conftest import T0, anomaly_on


def hang(attempt, at=T0):
    return anomaly_on(
        attempt,
        category="nccl_timeout_hang",
        attribution="none",
        hosts=(),
        label="supported",
        root_cause="nccl_watchdog_timeout",
        node_local=False,
        at=at,
    )


def task_attempt(cluster, job_id, restart, at):
    job = JobRecordFactory(job_id=job_id, name="sweep", nodes=("n1",), restart_count=restart)
    fleet.record_snapshot("test", cluster, ClusterSnapshot(at, (job,), ()))
    return Attempt.objects.get(job_id=job_id, attempt_index=restart)


pytestmark = pytest.mark.django_db


def test_thirteen_tasks_failing_once_each_are_each_restarted(cluster) -> None:
    # Seen one after another, as Slurm starts them: were they one workload, task 3 would be
    # stopped for three retries of one cause and tasks 10-12 for the workload's 10 restarts.
    for task in range(13):
        at = T0 + timedelta(seconds=task)
        hang(task_attempt(cluster, f"900_{task}", 0, at), at)
        services.advise_cluster(cluster, at)
    advice = Advice.objects.order_by("attempt__job_id")
    assert advice.count() == 13
    assert {a.action for a in advice} == {"restart"}, [a.reasons for a in advice]
    assert len({a.workload_id for a in advice}) == 13


def test_a_task_that_keeps_failing_runs_out_of_its_own_budget_only(cluster) -> None:
    cluster.policy = {"max_retries_per_root_cause": 2}
    cluster.save()
    for restart in range(3):
        at = T0 + timedelta(minutes=restart)
        hang(task_attempt(cluster, "900_3", restart, at), at)
        services.advise_cluster(cluster, at)
    later = T0 + timedelta(minutes=5)
    hang(task_attempt(cluster, "900_4", 0, later), later)
    services.advise_cluster(cluster, later)
    third = Advice.objects.get(attempt__job_id="900_3", attempt__attempt_index=2)
    assert third.action == "stop" and "2 restarts after" in third.reasons[0]
    sibling = Advice.objects.get(attempt__job_id="900_4")
    assert sibling.action == "restart", sibling.reasons
