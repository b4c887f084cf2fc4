"""Restarts resume from the last checkpoint, so lost work and effective training time show."""

from __future__ import annotations

import re

from fleet.core.scheduler import JobState

from .support import advance_until, job, quiet_cluster, start_training, texts


def test_a_restart_resumes_from_the_last_checkpoint_and_counts_the_lost_work() -> None:
    sim = quiet_cluster(checkpoint_interval_s=300.0, min_job_age_s=1e6)
    job_id = start_training(sim)
    lines = sim.advance(1000)
    saved = [
        int(m.group(1))
        for t in texts(lines, job_id)
        if (m := re.search(r"successfully saved checkpoint from iteration +(\d+)", t))
    ]
    assert saved
    before = sim.progress_of(job_id)
    assert before.checkpoint_iteration == saved[-1]
    assert before.iteration > saved[-1]
    sim.inject(job_id, "xid94_contained_ecc")
    advance_until(sim, lambda: job(sim, job_id).state is JobState.FAILED)
    failed = sim.progress_of(job_id)
    assert failed.iteration == saved[-1]
    assert failed.lost_iterations >= before.iteration - saved[-1]
    sim.scheduler.requeue_hold(job_id)
    sim.scheduler.release(job_id)
    lines = advance_until(sim, lambda: sim.progress_of(job_id).iteration > saved[-1])
    resumed = f"from /checkpoints/llama-70b-pretrain-test at iteration {saved[-1]}"
    assert any(t.endswith(" loading checkpoint " + resumed) for t in texts(lines, job_id))
    assert sim.progress_of(job_id).attempts == 2


def test_effective_training_time_drops_while_a_job_sits_failed() -> None:
    sim = quiet_cluster(nodes=4)
    healthy = start_training(sim, nodes=2)
    broken = start_training(sim, name="gpt-22b-pretrain", nodes=2)
    sim.inject(broken, "cuda_oom")
    sim.advance(3600)
    good, bad = sim.progress_of(healthy), sim.progress_of(broken)
    assert good.effective_training_time > 0.9
    assert bad.effective_training_time < 0.2
    assert good.allocated_gpu_s == good.wall_gpu_s
    assert bad.allocated_gpu_s < bad.wall_gpu_s


def test_a_workload_that_reaches_its_last_iteration_completes_and_is_replaced() -> None:
    sim = quiet_cluster(workloads=2, nodes_per_job=(1, 1))
    first = {w.workload for w in sim.progress()}
    advance_until(
        sim, lambda: any(p.finished for p in sim.progress()), limit_s=40 * 3600, step_s=600
    )
    done = next(p for p in sim.progress() if p.finished)
    assert done.iteration == done.train_iters
    assert job(sim, done.job_ids[-1]).state in (JobState.COMPLETED, JobState.COMPLETING)
    sim.advance(120)
    live = [p for p in sim.progress() if not p.finished]
    assert len(live) == 2
    assert {p.workload for p in live} != first
