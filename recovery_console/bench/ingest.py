"""Ingest at scale: a million log lines or more through the whole loop (source → routing →
detectors → stored), on a simulated cluster whose jobs report progress often.

The simulator runs ahead of detection one round at a time, so each scan reads a backlog of
lines, as a scan does when telemetry arrives faster than one poll handles; only the scans are
timed and their database queries counted (the simulator's own work is not part of any figure).
Peak memory is the process's resident peak, read before and after the scans.
"""

from __future__ import annotations

import resource
import time
from typing import Any

from django.db import connection

from detection.scan import scan_cluster
from recovery_console.demo.runner import SimulationRunner

from .loop import START, simulated_cluster
from .progress_bar import Tick
from .scale import NODES_PER_JOB, WARM_UP_STEPS, QueryCounter, nodes_for

# Simulated seconds between scans: each scan reads this much output of every job at once.
ROUND_S = 30.0
# Every job reports progress this often (simulated seconds): dense output, as large jobs write.
PROGRESS_INTERVAL_S = 1.0


def measure_ingest(lines: int, workloads: int, seed: int, tick: Tick) -> dict[str, Any]:
    """Scan rounds of simulated output until at least ``lines`` lines went through the loop."""
    simulation = {
        "seed": seed,
        "nodes": nodes_for(workloads),
        "workloads": workloads,
        "nodes_per_job": list(NODES_PER_JOB),
        "progress_interval_s": PROGRESS_INTERVAL_S,
    }
    cluster = simulated_cluster("bench-ingest", simulation)
    runner = SimulationRunner(cluster, start=START, in_process=True)
    for seconds in WARM_UP_STEPS:
        runner.step(seconds)
    scan_cluster(cluster, runner.now, runner.sources)
    rss_before = _peak_rss_mb()
    counter = QueryCounter()
    done = rounds = 0
    seconds = 0.0
    while done < lines:
        runner.step(ROUND_S)
        with connection.execute_wrapper(counter):
            started = time.perf_counter()
            summary = scan_cluster(cluster, runner.now, runner.sources)
            seconds += time.perf_counter() - started
        done += summary.lines
        rounds += 1
        tick(min(1.0, done / lines))
    return {
        "lines": done,
        "workloads": workloads,
        "scans": rounds,
        "simulated_s_per_scan": ROUND_S,
        "progress_interval_s": PROGRESS_INTERVAL_S,
        "seconds": round(seconds, 2),
        "lines_per_s": round(done / seconds) if seconds else None,
        "queries": counter.count,
        "queries_per_1000_lines": round(1000 * counter.count / done, 2) if done else None,
        "peak_rss_mb": _peak_rss_mb(),
        "peak_rss_growth_mb": round(_peak_rss_mb() - rss_before, 1),
        "anomalies": cluster.anomalies.count(),
    }


def _peak_rss_mb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
