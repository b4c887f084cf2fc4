"""The manual-recovery baseline: an operator who requeues broken jobs late."""

from __future__ import annotations

from datetime import timedelta

from fleet.core.scheduler import JobState
from lab.simulator import ManualRecoveryBaseline

from .support import advance_until, job, quiet_cluster, start_training

BASELINE = ManualRecoveryBaseline(notice_s=600.0, act_s=300.0)


def test_the_operator_requeues_after_notice_and_act_excluding_the_blamed_node() -> None:
    sim = quiet_cluster(nodes=4, manual_recovery=BASELINE, min_job_age_s=1e6)
    job_id = start_training(sim, nodes=2)
    host = job(sim, job_id).nodes[1]
    fault = sim.inject(job_id, "xid48_dbe", host=host, gpu=1)
    advance_until(sim, lambda: job(sim, job_id).state is JobState.FAILED, step_s=1)
    acted = fault.at + timedelta(seconds=900)
    advance_until(sim, lambda: sim.now >= acted - timedelta(seconds=2), step_s=1)
    assert job(sim, job_id).restart_count == 0
    advance_until(sim, lambda: job(sim, job_id).restart_count == 1, step_s=1)
    assert sim.now - acted < timedelta(seconds=2)
    advance_until(sim, lambda: job(sim, job_id).state is JobState.RUNNING)
    assert job(sim, job_id).excluded_nodes == (host,)
    assert host not in job(sim, job_id).nodes


def test_the_operator_resubmits_a_job_slurm_has_already_forgotten() -> None:
    sim = quiet_cluster(nodes=4, manual_recovery=BASELINE)
    job_id = start_training(sim, nodes=2)
    sim.inject(job_id, "cuda_oom")
    sim.advance(1000)
    assert all(j.job_id != job_id for j in sim.snapshot().jobs)
    progress = sim.progress_of(job_id)
    assert len(progress.job_ids) == 2
    resubmitted = job(sim, progress.job_ids[1])
    assert resubmitted.comment == '{"workload": "llama-70b-pretrain-test"}'
    assert resubmitted.state is JobState.RUNNING


def test_the_operator_ends_a_hang_and_ignores_a_slowdown() -> None:
    sim = quiet_cluster(nodes=4, manual_recovery=BASELINE, min_job_age_s=1e6)
    job_id = start_training(sim, nodes=2)
    sim.inject(job_id, "gpu_power_brake", host=job(sim, job_id).nodes[0])
    sim.advance(1000)
    assert job(sim, job_id).restart_count == 0
    sim.inject(job_id, "gpu_silent_hang", host=job(sim, job_id).nodes[0])
    sim.advance(1000)
    assert job(sim, job_id).restart_count == 1
