"""Scale: one full detection cycle at thousands of running workloads, with the console's own
scan and with two and four scan worker processes.

The cycle is what runs every poll interval: detection's scan, the advice, and the controller's
cycle. Posting the scheduler's snapshot (which a real controller does at the start of its
cycle) is measured beside it, through the Advisor API as a controller posts it, and so are a
controller's polls of its advice list. Each part is timed on the wall clock and its database
queries counted; the median (and the 95th percentile) of a few cycles is reported. The
simulator's own work (advancing, scraping its GPUs) is not part of any figure.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from django.db import connection
from django.test import Client

from detection import services as detection
from detection.scan import scan_cluster
from fleet import services
from fleet.core.scheduler import ClusterSnapshot, snapshot_to_json
from fleet.models import (
    Cluster,
)
from lab.demo.runner import ACTOR as SIMULATOR
from lab.demo.runner import SimulationRunner
from remediation.services import advise_cluster, issue_controller_token

from .loop import ACTOR, POLL_S, START, simulated_cluster
from .progress_bar import Tick
from .workers import QueryCounter, WorkerPool, current_rss_mb

# Jobs of 1–4 nodes of 8 GPUs; two and a half nodes per workload leave room for exclusions.
NODES_PER_JOB = (1, 4)
NODES_PER_WORKLOAD = 2.5
# Start-up takes up to 150 s of simulated time; these steps let every workload start.
WARM_UP_STEPS = (30.0,) * 6
# One long step leaves a backlog of lines: the scan that reads it gives the ingest rate.
BACKLOG_S = 120.0
PART_NAMES = ("snapshot", "scan", "advise", "controller")


def nodes_for(workloads: int) -> int:
    return max(8, math.ceil(workloads * NODES_PER_WORKLOAD))


def timed(work: Callable[[], Any]) -> tuple[float, int, Any]:
    """Wall seconds and database queries of ``work()``, and what it returned."""
    counter = QueryCounter()
    with connection.execute_wrapper(counter):
        started = time.perf_counter()
        result = work()
        seconds = time.perf_counter() - started
    return seconds, counter.count, result


def measure_cycle(workloads: int, seed: int, cycles: int, tick: Tick) -> dict[str, Any]:
    """The median full cycle at ``workloads`` running workloads, and the scan's ingest rate."""
    nodes = nodes_for(workloads)
    simulation = {
        "seed": seed,
        "nodes": nodes,
        "workloads": workloads,
        "nodes_per_job": list(NODES_PER_JOB),
    }
    cluster = simulated_cluster("bench-scale", simulation)
    # In process: writing files would be the simulator's cost, not the cycle's.
    runner = SimulationRunner(cluster, start=START, in_process=True)
    controller = runner.controller()
    sources = runner.sources
    steps = len(WARM_UP_STEPS) + cycles + 1
    for n, seconds in enumerate(WARM_UP_STEPS, start=1):
        runner.step(seconds)
        tick(n / steps)
    # The start-up output of every job is read once, before anything is measured.
    scan_cluster(cluster, runner.now, sources)
    advise_cluster(cluster, runner.now)
    controller.cycle()
    # A controller's own path: its snapshot and its polls go through the Advisor API.
    advisor = AdvisorClient(cluster)
    samples: dict[str, list[tuple[float, int]]] = {name: [] for name in PART_NAMES}
    reads: list[tuple[float, int]] = []
    # The console's process as a long-lived worker: its memory after each cycle must stay flat.
    rss_by_cycle: list[float] = []
    for n in range(cycles):
        snapshot = _advance(runner, POLL_S)
        parts = (
            ("snapshot", partial(advisor.post_snapshot, advisor.snapshot_body(snapshot))),
            ("scan", lambda: scan_cluster(cluster, runner.now, sources)),
            ("advise", lambda: advise_cluster(cluster, runner.now)),
            ("controller", controller.cycle),
        )
        for name, work in parts:
            seconds, queries, _ = timed(work)
            samples[name].append((seconds, queries))
        for _ in range(ADVICE_READS_PER_CYCLE):
            started = time.perf_counter()
            items = advisor.read_advice()
            reads.append((time.perf_counter() - started, items))
        rss_by_cycle.append(current_rss_mb())
        tick((len(WARM_UP_STEPS) + n + 1) / steps)
    by_workers = {
        workers: _cycles_with_workers(runner, cluster, advisor, controller, workers, cycles)
        for workers in WORKER_COUNTS
    }
    running = sum(1 for job in runner.simulator.snapshot().jobs if job.state == "RUNNING")
    backlog = _backlog_scan(cluster, runner)
    tick(1.0)
    figures = _cycle_figures(workloads, nodes, running, samples, backlog)
    figures["rss_mb_by_cycle"] = rss_by_cycle
    figures["workers"] = _worker_figures(figures, by_workers)
    figures["advice_reads"] = {
        "reads": len(reads),
        "seconds_p50": round(statistics.median(r for r, _ in reads), 4),
        "seconds_p95": round(p95([r for r, _ in reads]), 4),
        "active_advice": max(i for _, i in reads),
        "page_size": 100,
    }
    return figures


ADVICE_READS_PER_CYCLE = 20
# Scan worker processes (long-lived, one shard each), besides the console's in-process scan.
WORKER_COUNTS = (1, 2, 4)


def _cycles_with_workers(
    runner: SimulationRunner,
    cluster: Cluster,
    advisor: AdvisorClient,
    controller: Any,
    workers: int,
    cycles: int,
) -> list[dict[str, Any]]:
    """``cycles`` cycles whose scan is split in ``workers`` shards, each scanned by a
    long-lived worker process of its own at once (as Celery workers on as many cores); the
    snapshot, the advice and the controller run in the console's process as before."""
    detection.update_detection_settings(ACTOR, cluster, scan_shards=workers)
    sources = runner.sources
    if sources is None:
        raise RuntimeError("an in-process simulation runner has in-process sources")
    pool = WorkerPool(cluster, sources, workers)
    measured = []
    try:
        for _ in range(cycles):
            body = advisor.snapshot_body(_advance(runner, POLL_S))
            snapshot_s, _, _ = timed(partial(advisor.post_snapshot, body))
            scan_s, runs = pool.cycle(runner.now)
            advise_s, _, _ = timed(lambda: advise_cluster(cluster, runner.now))
            controller_s, _, _ = timed(controller.cycle)
            measured.append(
                {
                    "snapshot": snapshot_s,
                    "scan": scan_s,
                    "cycle": scan_s + advise_s + controller_s,
                    "peak_rss_mb": [run.peak_rss_mb for run in runs],
                    "lines": sum(run.lines for run in runs),
                }
            )
    finally:
        pool.close()
    # Back to one shard, as the rest of the bench expects.
    detection.update_detection_settings(ACTOR, cluster, scan_shards=1)
    return measured


def _worker_figures(
    in_process: dict[str, Any], by_workers: dict[int, list[dict[str, Any]]]
) -> dict[str, Any]:
    """Medians of the cycle with the console's own scan (``in_process``: its cycle figures)
    and with 1, 2 and 4 scan worker processes, and the speed-up of more workers over one."""
    out: dict[str, Any] = {
        "in_process": {
            "scan_seconds": in_process["parts"]["scan"]["seconds"],
            "cycle_seconds": in_process["seconds"],
        }
    }
    medians = {
        workers: {
            part: statistics.median(c[part] for c in cycles)
            for part in ("scan", "cycle", "snapshot")
        }
        for workers, cycles in by_workers.items()
    }
    one = medians.get(1)
    for workers, cycles in by_workers.items():
        median = medians[workers]
        out[f"{workers}_workers"] = {
            "scan_seconds": round(median["scan"], 3),
            "cycle_seconds": round(median["cycle"], 3),
            "with_snapshot_seconds": round(median["cycle"] + median["snapshot"], 3),
            "scan_speedup": _ratio(one["scan"], median["scan"]) if one else None,
            "cycle_speedup": _ratio(one["cycle"], median["cycle"]) if one else None,
            "lines_per_cycle": [c["lines"] for c in cycles],
            # Long-lived processes: a peak that grew from cycle to cycle would be a leak.
            "peak_rss_mb_per_worker_by_cycle": [c["peak_rss_mb"] for c in cycles],
        }
    out["cpus"] = os.cpu_count()
    return out


def _ratio(a: float, b: float) -> float | None:
    return round(a / b, 2) if b else None


def p95(values: list[float]) -> float:
    """The nearest-rank 95th percentile."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


class AdvisorClient:
    """The Advisor API as a controller calls it, in process (no network in the figure)."""

    def __init__(self, cluster: Cluster) -> None:
        secret = issue_controller_token(ACTOR, cluster, "bench").secret
        self.client = Client(SERVER_NAME="localhost", HTTP_AUTHORIZATION=f"Bearer {secret}")
        self.base = f"/api/v1/advisor/{cluster.name}"

    @staticmethod
    def snapshot_body(snapshot: ClusterSnapshot) -> str:
        """The request body, as the controller builds it on its own host (not timed)."""
        return json.dumps(snapshot_to_json(snapshot))

    def post_snapshot(self, body: str) -> None:
        response = self.client.post(f"{self.base}/snapshots", body, content_type="application/json")
        if response.status_code != 200 or response.json().get("rejected"):
            raise RuntimeError(f"snapshot refused: {response.status_code} {response.content!r}")

    def read_advice(self) -> int:
        """Every active advice, page by page; how many there were."""
        url: str | None = f"{self.base}/advice"
        items = 0
        while url:
            page = self.client.get(url).json()
            items += len(page["results"])
            url = page["next"]
        return items


def _advance(runner: SimulationRunner, seconds: float) -> ClusterSnapshot:
    """What ``runner.step`` does but recording the snapshot: the simulator's part."""
    runner.write_lines(runner.simulator.advance(seconds))
    runner.write_metrics(runner.simulator.gpu_metrics())
    return runner.simulator.snapshot()


def _backlog_scan(cluster: Cluster, runner: SimulationRunner) -> dict[str, Any]:
    # Recorded first, so the scan knows every attempt the backlog's lines belong to.
    services.record_snapshot(SIMULATOR, cluster, _advance(runner, BACKLOG_S))
    seconds, queries, summary = timed(lambda: scan_cluster(cluster, runner.now, runner.sources))
    return {
        "simulated_s": BACKLOG_S,
        "lines": summary.lines,
        "seconds": round(seconds, 3),
        "queries": queries,
        "lines_per_s": round(summary.lines / seconds) if seconds else None,
    }


def _cycle_figures(
    workloads: int,
    nodes: int,
    running: int,
    samples: dict[str, list[tuple[float, int]]],
    backlog: dict[str, Any],
) -> dict[str, Any]:
    parts = {
        name: {
            "seconds": round(statistics.median(s for s, _ in values), 3),
            "seconds_p95": round(p95([s for s, _ in values]), 3),
            "queries": round(statistics.median(q for _, q in values)),
        }
        for name, values in samples.items()
    }
    # The snapshot is the controller's to post: the console's cycle proper leaves it out.
    cycle_runs = [
        sum(samples[name][i][0] for name in PART_NAMES if name != "snapshot")
        for i in range(len(samples["scan"]))
    ]
    cycle_queries = [
        sum(samples[name][i][1] for name in PART_NAMES if name != "snapshot")
        for i in range(len(samples["scan"]))
    ]
    seconds = round(statistics.median(cycle_runs), 3)
    with_snapshot = seconds + parts["snapshot"]["seconds"]
    return {
        "workloads": workloads,
        "running_attempts": running,
        "nodes": nodes,
        # The simulation's default of eight GPUs per node.
        "gpus": nodes * 8,
        "seconds": seconds,
        "queries": round(statistics.median(cycle_queries)),
        "cycles_measured": len(cycle_runs),
        "with_snapshot_seconds": round(with_snapshot, 3),
        "poll_interval_s": POLL_S,
        "within_poll_interval": with_snapshot <= POLL_S,
        "parts": parts,
        "ingest": backlog,
    }
