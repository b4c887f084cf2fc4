"""The same config and the same calls give the same simulation, to the last character."""

from __future__ import annotations

from lab.simulator import SchedulerError, SimulatedCluster, SimulationConfig

BUSY = SimulationConfig(seed=5, nodes=32, workloads=6, fault_rate=0.3)


def play(config: SimulationConfig, scrape: bool = False) -> tuple[object, ...]:
    """An hour with a few scheduler actions mixed in; everything observable, collected."""
    sim = SimulatedCluster(config)
    lines, snapshots, metrics = [], [], []
    for step in range(60):
        lines += sim.advance(60)
        if scrape:
            sim.gpu_metrics()
            sim.snapshot()
        if step % 10 == 9:
            _act(sim, step)
            snapshots.append(sim.snapshot())
            metrics.append(sim.gpu_metrics())
    return lines, snapshots, metrics, sim.ground_truth, sim.progress()


def _act(sim: SimulatedCluster, step: int) -> None:
    """Requeue the first failed job excluding one of its nodes, the way a controller would."""
    failed = [j for j in sim.snapshot().jobs if j.state.value == "FAILED"]
    try:
        if failed:
            sim.scheduler.requeue_hold(failed[0].job_id)
            sim.scheduler.update_exclusions(failed[0].job_id, failed[0].nodes[:1])
            sim.scheduler.release(failed[0].job_id)
        else:
            sim.scheduler.drain(f"gpu-node-{step:03d}", "checking")
    except SchedulerError:
        pass


def test_the_same_seed_gives_the_same_lines_snapshots_metrics_and_ground_truth() -> None:
    first, second = play(BUSY), play(BUSY)
    assert first[0]  # lines were written
    assert first[3]  # faults were injected
    assert first == second


def test_a_different_seed_gives_a_different_run() -> None:
    first = play(BUSY)
    other = play(SimulationConfig(seed=6, nodes=32, workloads=6, fault_rate=0.3))
    assert first[0] != other[0]
    assert first[3] != other[3]


def test_reading_the_cluster_does_not_change_what_happens() -> None:
    assert play(BUSY, scrape=True) == play(BUSY)
