"""Helpers for the simulator tests: small clusters and ways to wait for a state."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace

from detection.core.telemetry import LogLine
from fleet.core.scheduler import JobRecord, JobState, NodeRecord
from lab.simulator import PartitionSpec, SimulatedCluster, SimulationConfig

QUIET = SimulationConfig(
    seed=11,
    nodes=12,
    workloads=0,
    nodes_per_job=(2, 2),
    fault_rate=0.0,
    bad_node_share=0.0,
    partitions=(PartitionSpec("gpu", 1.0),),
)


def quiet_cluster(**changes: object) -> SimulatedCluster:
    """A small cluster with no workloads of its own and no random faults."""
    return SimulatedCluster(replace(QUIET, **changes))  # type: ignore[arg-type]


def job(sim: SimulatedCluster, job_id: str) -> JobRecord:
    return next(j for j in sim.snapshot().jobs if j.job_id == job_id)


def node(sim: SimulatedCluster, name: str) -> NodeRecord:
    return next(n for n in sim.snapshot().nodes if n.name == name)


def advance_until(
    sim: SimulatedCluster, done: Callable[[], bool], limit_s: float = 7200.0, step_s: float = 5.0
) -> list[LogLine]:
    """Advance in steps until ``done()``; fail the test if it never happens."""
    lines: list[LogLine] = []
    waited = 0.0
    while not done():
        assert waited < limit_s, "condition never met"
        lines += sim.advance(step_s)
        waited += step_s
    return lines


def start_training(
    sim: SimulatedCluster, name: str = "llama-70b-pretrain", nodes: int = 2, **submit: object
) -> str:
    """Submit a job and advance until it is past start-up and has logged progress."""
    tag = f"{name}-test"
    job_id = sim.scheduler.submit(name, nodes, comment=json.dumps({"workload": tag}), **submit)  # type: ignore[arg-type]
    advance_until(sim, lambda: job(sim, job_id).state is JobState.RUNNING)
    advance_until(sim, lambda: sim.progress_of(job_id).iteration > sim_start_iter(sim, job_id))
    return job_id


def sim_start_iter(sim: SimulatedCluster, job_id: str) -> int:
    progress = sim.progress_of(job_id)
    return progress.checkpoint_iteration


def texts(lines: list[LogLine], job_id: str | None = None, host: str | None = None) -> list[str]:
    return [
        line.text
        for line in lines
        if (job_id is None or line.job_id == job_id) and (host is None or line.host == host)
    ]
