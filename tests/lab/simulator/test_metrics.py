"""DCGM gauges: what one scrape returns for idle, busy, broken, stuck and throttled GPUs."""

from __future__ import annotations

from statistics import median

from detection.core.telemetry import MetricSample
from fleet.core.scheduler import JobState
from lab.simulator import SimulatedCluster

from .support import advance_until, job, quiet_cluster, start_training


def gauge(samples: list[MetricSample], name: str, host: str, gpu: int) -> float:
    return next(s.value for s in samples if (s.name, s.host, s.gpu) == (name, host, gpu))


def gauges(samples: list[MetricSample], name: str, hosts: tuple[str, ...]) -> list[float]:
    return [s.value for s in samples if s.name == name and s.host in hosts]


def test_a_scrape_has_every_gauge_for_every_gpu_with_the_job_label() -> None:
    sim = quiet_cluster(nodes=4)
    job_id = start_training(sim, nodes=2)
    samples = sim.gpu_metrics()
    assert len(samples) == 4 * 8 * 9
    busy = [s for s in samples if s.host in job(sim, job_id).nodes]
    assert {s.job_id for s in busy} == {job_id}
    assert {s.job_id for s in samples if s not in busy} == {None}
    assert min(gauges(samples, "DCGM_FI_DEV_GPU_UTIL", job(sim, job_id).nodes)) > 90


def test_healthy_values_vary_a_little_but_stay_healthy() -> None:
    sim = quiet_cluster(nodes=2)
    job_id = start_training(sim, nodes=2)
    clocks = gauges(sim.gpu_metrics(), "DCGM_FI_DEV_SM_CLOCK", job(sim, job_id).nodes)
    assert len(set(clocks)) > 1
    assert min(clocks) > 1900


def test_the_xid_gauge_holds_the_last_code_on_the_faulty_gpu() -> None:
    sim = quiet_cluster(nodes=2, min_job_age_s=1e6)
    job_id = start_training(sim, nodes=2)
    host = job(sim, job_id).nodes[1]
    sim.inject(job_id, "xid94_contained_ecc", host=host, gpu=2)
    samples = sim.gpu_metrics()
    assert gauge(samples, "DCGM_FI_DEV_XID_ERRORS", host, 2) == 94
    assert gauge(samples, "DCGM_FI_DEV_XID_ERRORS", host, 3) == 0
    assert gauge(samples, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", host, 2) == 1
    advance_until(sim, lambda: job(sim, job_id).state is JobState.FAILED)
    sim.advance(600)
    assert gauge(sim.gpu_metrics(), "DCGM_FI_DEV_XID_ERRORS", host, 2) == 94
    sim.scheduler.requeue_hold(job_id)
    sim.scheduler.release(job_id)
    advance_until(sim, lambda: sim.progress_of(job_id).iteration > 0 and _training(sim, job_id))
    sim.inject(job_id, "xid48_dbe", host=host, gpu=2)
    samples = sim.gpu_metrics()
    assert gauge(samples, "DCGM_FI_DEV_XID_ERRORS", host, 2) == 48
    assert gauge(samples, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", host, 2) == 2


def _training(sim: SimulatedCluster, job_id: str) -> bool:
    return (
        job(sim, job_id).state is JobState.RUNNING
        and min(gauges(sim.gpu_metrics(), "DCGM_FI_DEV_GPU_UTIL", job(sim, job_id).nodes)) > 50
    )


def test_a_crashed_nodes_series_vanish_until_it_is_back() -> None:
    sim = quiet_cluster(nodes=4)
    job_id = start_training(sim, nodes=2)
    host = job(sim, job_id).nodes[0]
    sim.inject(job_id, "node_crash", host=host)
    sim.advance(60)
    hosts = {s.host for s in sim.gpu_metrics()}
    assert host not in hosts
    assert len(hosts) == 3
    sim.advance(2800)
    assert gauge(sim.gpu_metrics(), "DCGM_FI_DEV_XID_ERRORS", host, 0) == 0


def test_a_straggler_nodes_clocks_are_an_outlier() -> None:
    sim = quiet_cluster(nodes=4)
    job_id = start_training(sim, nodes=3)
    slow = job(sim, job_id).nodes[1]
    sim.inject(job_id, "gpu_thermal_throttle", host=slow, gpu=0)
    sim.advance(30)
    samples = sim.gpu_metrics()
    others = tuple(n for n in job(sim, job_id).nodes if n != slow)
    slow_clocks = gauges(samples, "DCGM_FI_DEV_SM_CLOCK", (slow,))
    assert max(slow_clocks) < 0.7 * median(gauges(samples, "DCGM_FI_DEV_SM_CLOCK", others))
    throttles = gauges(samples, "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", (slow,))
    assert all(int(bits) & 0x60 for bits in throttles)
    assert gauge(samples, "DCGM_FI_DEV_GPU_TEMP", slow, 0) > 85


def test_the_idle_gpus_of_a_hung_job_drop_toward_zero() -> None:
    sim = quiet_cluster(nodes=2)
    job_id = start_training(sim, nodes=2)
    host = job(sim, job_id).nodes[1]
    sim.inject(job_id, "xid119_gsp_timeout", host=host, gpu=6)
    sim.advance(60)
    samples = sim.gpu_metrics()
    assert gauge(samples, "DCGM_FI_DEV_GPU_UTIL", host, 6) >= 98
    waiting = [
        s.value
        for s in samples
        if s.name == "DCGM_FI_DEV_GPU_UTIL" and (s.host, s.gpu) != (host, 6)
    ]
    assert max(waiting) < 5
