"""SlurmClient on a real 4-node Slurm 22.05 cluster, through both transports (local and SSH)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fleet.core.scheduler import JobRecord, JobState, NodeState
from remediation.controller import SlurmClient, SlurmCommandError
from remediation.controller.slurm import MAX_REASON_LENGTH
from tests.remediation.controller.lab import CRED_EXPIRE, SlurmLab, wait_for

pytestmark = pytest.mark.slurm

START_TIMEOUT = 10.0
RESTART_TIMEOUT = CRED_EXPIRE + 15.0  # a requeued job waits cred_expire, then a scheduling pass


def wait_for_job(client: SlurmClient, job_id: str, state: JobState, timeout: float) -> JobRecord:
    def check() -> JobRecord | None:
        job = client.job(job_id)
        return job if job is not None and job.state == state else None

    return wait_for(check, timeout, f"job {job_id} {state}")


def wait_for_node(client: SlurmClient, name: str, states: set[NodeState]) -> None:
    def check() -> bool:
        node = next(n for n in client.snapshot().nodes if n.name == name)
        return node.state in states

    wait_for(check, START_TIMEOUT, f"{name} in {sorted(states)}")


def test_it_reads_a_two_node_job_running_on_its_two_nodes(
    slurm_client: SlurmClient, slurm_lab: SlurmLab
) -> None:
    job_id = slurm_lab.submit_job(nodes=2, options=["--comment=workload=w1 attempt=0"])

    job = wait_for_job(slurm_client, job_id, JobState.RUNNING, START_TIMEOUT)

    assert len(job.nodes) == 2 and set(job.nodes) <= set(slurm_lab.nodes)
    assert job.comment == "workload=w1 attempt=0"
    assert (job.restart_count, job.held, job.exit_code, job.end_time) == (0, False, None, None)
    assert job.submit_time is not None and job.submit_time.utcoffset() is not None
    snapshot = slurm_client.snapshot()
    assert job_id in {j.job_id for j in snapshot.jobs}
    states = {n.name: n.state for n in snapshot.nodes}
    assert all(states[name] == NodeState.ALLOCATED for name in job.nodes)


def test_requeue_hold_exclude_and_release_restart_the_job_away_from_its_nodes(
    slurm_client: SlurmClient, slurm_lab: SlurmLab
) -> None:
    job_id = slurm_lab.submit_job(nodes=2)
    first = wait_for_job(slurm_client, job_id, JobState.RUNNING, START_TIMEOUT)

    slurm_client.requeue_hold(job_id)
    held = wait_for_job(slurm_client, job_id, JobState.PENDING, START_TIMEOUT)
    assert held.held and held.restart_count == first.restart_count + 1

    slurm_client.update_exclusions(job_id, first.nodes)
    excluding = slurm_client.job(job_id)
    assert excluding is not None and excluding.excluded_nodes == first.nodes and excluding.held

    slurm_client.release(job_id)
    again = wait_for_job(slurm_client, job_id, JobState.RUNNING, RESTART_TIMEOUT)
    assert not again.held and again.restart_count == 1
    assert len(again.nodes) == 2 and not set(again.nodes) & set(first.nodes)
    assert again.excluded_nodes == first.nodes


def test_a_pending_job_is_held_while_its_exclusions_are_added_then_released(
    slurm_client: SlurmClient, slurm_lab: SlurmLab
) -> None:
    job_id = slurm_lab.submit_job(nodes=1, options=["--begin=now+60"])
    waiting = wait_for_job(slurm_client, job_id, JobState.PENDING, START_TIMEOUT)
    assert not waiting.held and waiting.eligible_time is not None  # its begin time

    slurm_client.hold(job_id)
    slurm_client.update_exclusions(job_id, ["node1"])
    held = slurm_client.job(job_id)
    assert held is not None and held.held and held.excluded_nodes == ("node1",)

    slurm_client.release(job_id)
    released = slurm_client.job(job_id)
    assert released is not None and not released.held and released.state == JobState.PENDING


def test_cancel_ends_the_job_cancelled(slurm_client: SlurmClient, slurm_lab: SlurmLab) -> None:
    job_id = slurm_lab.submit_job(nodes=2)
    wait_for_job(slurm_client, job_id, JobState.RUNNING, START_TIMEOUT)

    slurm_client.cancel(job_id)

    job = wait_for_job(slurm_client, job_id, JobState.CANCELLED, START_TIMEOUT)
    assert job.is_terminal and job.end_time is not None


def test_drain_marks_an_idle_node_drained_and_a_busy_one_draining_and_resume_frees_them(
    slurm_client: SlurmClient, slurm_lab: SlurmLab
) -> None:
    job_id = slurm_lab.submit_job(nodes=1, options=["-w", "node1"])
    wait_for_job(slurm_client, job_id, JobState.RUNNING, START_TIMEOUT)

    slurm_client.drain("node1", "Xid 79 on GPU 3 (repeat offender)")
    slurm_client.drain("node4", "NCCL timeouts in 3 attempts")

    nodes = {n.name: n for n in slurm_client.snapshot().nodes}
    assert (nodes["node1"].state, nodes["node1"].reason) == (
        NodeState.DRAINING,
        "Xid 79 on GPU 3 (repeat offender)",
    )
    assert (nodes["node4"].state, nodes["node4"].reason) == (
        NodeState.DRAINED,
        "NCCL timeouts in 3 attempts",
    )
    slurm_client.cancel(job_id)
    wait_for_node(slurm_client, "node1", {NodeState.DRAINED})
    slurm_client.resume("node1")
    slurm_client.resume("node4")
    wait_for_node(slurm_client, "node1", {NodeState.IDLE})
    wait_for_node(slurm_client, "node4", {NodeState.IDLE})


def test_an_array_task_is_addressed_as_array_underscore_task(
    slurm_client: SlurmClient, slurm_lab: SlurmLab
) -> None:
    array_id = slurm_lab.sbatch("sleep 300\n", "-N", "1", "--array=0-1")
    task0, task1 = f"{array_id}_0", f"{array_id}_1"
    wait_for_job(slurm_client, task0, JobState.RUNNING, START_TIMEOUT)
    wait_for_job(slurm_client, task1, JobState.RUNNING, START_TIMEOUT)

    slurm_client.requeue_hold(task1)

    requeued = wait_for_job(slurm_client, task1, JobState.PENDING, START_TIMEOUT)
    assert requeued.held and requeued.restart_count == 1
    assert slurm_client.job(task0) is not None
    assert slurm_client.job(task0).state == JobState.RUNNING  # type: ignore[union-attr]
    slurm_client.cancel(task0)
    wait_for_job(slurm_client, task0, JobState.CANCELLED, START_TIMEOUT)


def test_a_failing_job_reports_its_exit_code_and_prints_its_text(
    slurm_client: SlurmClient, slurm_lab: SlurmLab
) -> None:
    text = "NCCL error: unhandled system error\nXid 79, GPU has fallen off the bus\n"

    job_id = slurm_lab.submit_failing_job(text, "node3", exit_code=3)

    job = wait_for_job(slurm_client, job_id, JobState.FAILED, START_TIMEOUT)
    assert (job.nodes, job.exit_code, job.signal) == (("node3",), 3, None)
    assert Path(slurm_lab.output_path(job_id)).read_text() == text


def test_requeueing_an_unknown_job_raises_with_slurms_message(slurm_client: SlurmClient) -> None:
    with pytest.raises(SlurmCommandError) as caught:
        slurm_client.requeue_hold("999999")

    assert caught.value.command == ("scontrol", "requeuehold", "999999")
    assert caught.value.exit_code == 1
    assert "Invalid job id specified" in caught.value.stderr
    assert slurm_client.job("999999") is None


def test_excluding_nodes_of_a_running_job_raises_with_slurms_message(
    slurm_client: SlurmClient, slurm_lab: SlurmLab
) -> None:
    job_id = slurm_lab.submit_job(nodes=1)
    wait_for_job(slurm_client, job_id, JobState.RUNNING, START_TIMEOUT)

    with pytest.raises(SlurmCommandError, match="Job is no longer pending execution"):
        slurm_client.update_exclusions(job_id, ["node4"])


@pytest.mark.parametrize(
    "node", ["node1; touch /tmp/pwned", "node[1-2]", "-node1", "node1 node2", "", "nöde1"]
)
def test_a_hostile_node_name_is_refused_before_anything_runs(
    slurm_client: SlurmClient, slurm_lab: SlurmLab, node: str
) -> None:
    before = slurm_lab.sinfo()

    with pytest.raises(ValueError, match="not a node name"):
        slurm_client.drain(node, "reason")

    assert slurm_lab.sinfo().keys() == before.keys()
    assert all(n["state_flags"] == [] for n in slurm_lab.sinfo().values())


def test_a_reason_with_shell_metacharacters_arrives_literally(
    slurm_client: SlurmClient, slurm_lab: SlurmLab
) -> None:
    # short, as reasons are capped at 200 characters; the name is unique to this process
    canary = Path(f"/tmp/rc-pwned-{os.getpid()}")  # noqa: S108
    reason = (
        f'node2; touch {canary} $(touch {canary}) `touch {canary}` && rm -rf "/x" '
        f"|| 'q' > {canary} < /dev/null & Xid=79 %s \\n $HOME *"
    )

    slurm_client.drain("node2", reason + '\n\t"')

    assert slurm_lab.sinfo()["node2"]["reason"] == reason
    assert not canary.exists()
    assert len(reason) <= MAX_REASON_LENGTH
