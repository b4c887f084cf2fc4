"""The simulated scheduler obeys scontrol, scancel and sbatch the way Slurm does."""

from __future__ import annotations

import pytest

from fleet.core.scheduler import JobState, NodeRecord, NodeState
from lab.simulator import SchedulerError

from .support import advance_until, job, node, quiet_cluster, start_training, texts


def test_a_submitted_job_starts_on_free_nodes_within_a_second_or_two() -> None:
    sim = quiet_cluster()
    job_id = sim.scheduler.submit("llama-8b-dpo", 2)
    assert job(sim, job_id).state is JobState.PENDING
    sim.advance(2)
    record = job(sim, job_id)
    assert record.state is JobState.RUNNING
    assert record.nodes == ("gpu-node-001", "gpu-node-002")
    assert record.reason == "None"
    assert node(sim, "gpu-node-001").state is NodeState.ALLOCATED


def test_requeue_hold_puts_a_running_job_back_in_the_queue_held() -> None:
    sim = quiet_cluster()
    job_id = start_training(sim)
    sim.scheduler.requeue_hold(job_id)
    record = job(sim, job_id)
    assert (record.state, record.held, record.reason) == (JobState.PENDING, True, "JobHeldAdmin")
    assert record.restart_count == 1
    assert record.nodes == ()
    assert any("DUE TO JOB REQUEUE" in text for text in texts(sim.advance(1), job_id))


def test_a_held_job_stays_pending_until_released() -> None:
    sim = quiet_cluster()
    job_id = start_training(sim)
    sim.scheduler.requeue_hold(job_id)
    sim.advance(600)
    assert job(sim, job_id).state is JobState.PENDING


def test_release_starts_the_next_attempt_away_from_the_excluded_node() -> None:
    sim = quiet_cluster(nodes=3)
    job_id = start_training(sim)
    bad = job(sim, job_id).nodes[0]
    sim.scheduler.requeue_hold(job_id)
    sim.scheduler.update_exclusions(job_id, [bad])
    sim.scheduler.release(job_id)
    record = job(sim, job_id)
    assert record.excluded_nodes == (bad,)
    assert record.reason == "BeginTime"
    sim.advance(9)
    assert job(sim, job_id).state is JobState.PENDING  # the old credential has not expired yet
    advance_until(sim, lambda: job(sim, job_id).state is JobState.RUNNING, step_s=1)
    record = job(sim, job_id)
    assert record.restart_count == 1
    assert bad not in record.nodes
    assert len(record.nodes) == 2


def test_update_exclusions_is_refused_on_a_running_job() -> None:
    sim = quiet_cluster()
    job_id = start_training(sim)
    with pytest.raises(SchedulerError, match="Job is no longer pending execution"):
        sim.scheduler.update_exclusions(job_id, ["gpu-node-005"])


def test_requeue_hold_is_refused_on_a_pending_job() -> None:
    sim = quiet_cluster()
    job_id = start_training(sim)
    sim.scheduler.requeue_hold(job_id)
    with pytest.raises(SchedulerError, match="Job is pending execution"):
        sim.scheduler.requeue_hold(job_id)


def test_release_is_refused_on_a_running_job() -> None:
    sim = quiet_cluster()
    job_id = start_training(sim)
    with pytest.raises(SchedulerError, match="Job is no longer pending execution"):
        sim.scheduler.release(job_id)


def test_requeue_hold_works_on_a_recently_failed_job() -> None:
    sim = quiet_cluster()
    job_id = start_training(sim)
    sim.inject(job_id, "cuda_oom")
    advance_until(sim, lambda: job(sim, job_id).state is JobState.FAILED)
    sim.scheduler.requeue_hold(job_id)
    record = job(sim, job_id)
    assert (record.state, record.restart_count, record.exit_code) == (JobState.PENDING, 1, None)


def test_cancel_ends_a_running_job_after_a_brief_completing() -> None:
    sim = quiet_cluster()
    job_id = start_training(sim)
    first = job(sim, job_id).nodes[0]
    sim.scheduler.cancel(job_id)
    assert job(sim, job_id).state is JobState.COMPLETING
    assert node(sim, first).state is NodeState.COMPLETING
    lines = sim.advance(3)
    record = job(sim, job_id)
    assert (record.state, record.signal) == (JobState.CANCELLED, 15)
    assert node(sim, first).state is NodeState.IDLE
    assert any("CANCELLED AT" in text for text in texts(lines, job_id))


def test_cancel_of_a_pending_job_is_immediate_and_a_second_cancel_is_refused() -> None:
    sim = quiet_cluster()
    job_id = sim.scheduler.submit("llama-8b-dpo", 2, hold=True)
    assert job(sim, job_id).reason == "JobHeldUser"
    sim.scheduler.cancel(job_id)
    assert job(sim, job_id).state is JobState.CANCELLED
    with pytest.raises(SchedulerError, match="already completing or completed"):
        sim.scheduler.cancel(job_id)


def test_drain_keeps_the_running_job_and_takes_no_new_one() -> None:
    sim = quiet_cluster(nodes=4)
    job_id = start_training(sim)
    drained = job(sim, job_id).nodes[0]
    sim.scheduler.drain(drained, "bad GPU")
    sim.advance(60)
    assert job(sim, job_id).state is JobState.RUNNING
    assert node(sim, drained) == NodeRecord(drained, NodeState.DRAINING, "bad GPU", 8, ("gpu",))
    sim.scheduler.cancel(job_id)
    sim.advance(3)
    assert node(sim, drained).state is NodeState.DRAINED
    second = sim.scheduler.submit("llama-8b-dpo", 3)
    sim.advance(2)
    assert job(sim, second).state is JobState.RUNNING
    assert drained not in job(sim, second).nodes


def test_a_job_that_needs_a_drained_node_waits_until_it_is_resumed() -> None:
    sim = quiet_cluster(nodes=2)
    sim.scheduler.drain("gpu-node-002", "swap fan")
    job_id = sim.scheduler.submit("llama-8b-dpo", 2)
    sim.advance(30)
    assert job(sim, job_id).reason == "ReqNodeNotAvail"
    sim.scheduler.resume("gpu-node-002")
    assert node(sim, "gpu-node-002").state is NodeState.IDLE
    sim.advance(2)
    assert job(sim, job_id).state is JobState.RUNNING


def test_jobs_that_do_not_fit_wait_for_resources_then_priority() -> None:
    sim = quiet_cluster(nodes=4)
    running = [sim.scheduler.submit("llama-8b-dpo", 2) for _ in range(2)]
    waiting = [sim.scheduler.submit("llama-8b-dpo", 2) for _ in range(2)]
    sim.advance(5)
    assert [job(sim, j).state for j in running] == [JobState.RUNNING] * 2
    assert [job(sim, j).reason for j in waiting] == ["Resources", "Priority"]


def test_resume_and_drain_refuse_what_slurm_refuses() -> None:
    sim = quiet_cluster()
    with pytest.raises(SchedulerError, match="Invalid node state specified"):
        sim.scheduler.resume("gpu-node-003")
    with pytest.raises(SchedulerError, match="must specify a reason"):
        sim.scheduler.drain("gpu-node-003", " ")


def test_unknown_jobs_and_nodes_raise_slurms_errors() -> None:
    sim = quiet_cluster()
    verbs = [sim.scheduler.requeue_hold, sim.scheduler.release, sim.scheduler.cancel]
    for verb in verbs:
        with pytest.raises(SchedulerError, match="Invalid job id specified"):
            verb("999999")
    with pytest.raises(SchedulerError, match="Invalid node name specified"):
        sim.scheduler.drain("gpu-node-999", "x")
    job_id = sim.scheduler.submit("llama-8b-dpo", 2, hold=True)
    with pytest.raises(SchedulerError, match="Invalid node name specified"):
        sim.scheduler.update_exclusions(job_id, ["nowhere"])


def test_submit_refuses_impossible_requests() -> None:
    sim = quiet_cluster()
    with pytest.raises(SchedulerError, match="Node count specification invalid"):
        sim.scheduler.submit("llama-8b-dpo", 13)
    with pytest.raises(SchedulerError, match="Invalid partition name specified"):
        sim.scheduler.submit("llama-8b-dpo", 2, partition="nonesuch")


def test_finished_jobs_are_forgotten_after_min_job_age() -> None:
    sim = quiet_cluster()
    job_id = start_training(sim)
    sim.scheduler.cancel(job_id)
    sim.advance(250)
    assert job(sim, job_id).state is JobState.CANCELLED
    sim.advance(60)
    assert all(j.job_id != job_id for j in sim.snapshot().jobs)
    with pytest.raises(SchedulerError, match="Invalid job id specified"):
        sim.scheduler.requeue_hold(job_id)


def test_submitting_with_exclusions_avoids_those_nodes() -> None:
    sim = quiet_cluster()
    job_id = sim.scheduler.submit("llama-8b-dpo", 2, exclude=["gpu-node-001", "gpu-node-003"])
    sim.advance(2)
    assert job(sim, job_id).nodes == ("gpu-node-002", "gpu-node-004")
    assert job(sim, job_id).excluded_nodes == ("gpu-node-001", "gpu-node-003")
