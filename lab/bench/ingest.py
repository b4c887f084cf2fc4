"""Ingest at scale: a million log lines or more through the whole loop (source → routing →
detectors → stored), on a simulated cluster whose jobs report progress often, scanned by one
worker process and by two side by side.

The simulator runs ahead of detection one round at a time, so each scan reads a backlog of
lines, as a scan does when telemetry arrives faster than one poll handles. Its output goes to
two clusters of the same database alike (the same lines, scrapes and snapshots): one scanned
whole by one worker process, the other split in two shards (``scan_shards``) scanned by two
worker processes at once, as two Celery workers would. The workers are long-lived (``workers.
WorkerPool``): each round's output is handed to each of them before they scan, so each reads
it from its own memory while all of them write to the one database; the two setups take turns
going first. Only the scans are timed (from the start of the first to the end of the last) and
their database queries counted; the simulator's own work is not part of any figure.
Afterwards the two clusters' stored evidence is compared: sharding must change how fast, never
what is recorded.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import connection
from django.db.backends.sqlite3.creation import DatabaseCreation as SQLiteCreation

from detection import services as detection
from detection.models import Anomaly, AttemptMonitor
from detection.scan import scan_cluster
from fleet import services
from fleet.models import Cluster
from lab.demo.runner import ACTOR as SIMULATOR
from lab.demo.runner import SimulationRunner

from .loop import ACTOR, START, simulated_cluster
from .progress_bar import Tick
from .scale import NODES_PER_JOB, WARM_UP_STEPS, nodes_for
from .workers import WorkerPool, peak_rss_mb

# Simulated seconds between scans: each scan reads this much output of every job at once.
ROUND_S = 30.0
# Every job reports progress this often (simulated seconds): dense output, as large jobs write.
PROGRESS_INTERVAL_S = 1.0
# Worker processes of the two setups; each scans one shard of its cluster.
SETUPS = (1, 2)
# Monitor fields that say when a row was written, not what it holds.
UNCOMPARED = {"id", "attempt_id", "updated_at"}


@dataclass
class Setup:
    """One cluster and the worker processes that scan it, with what they did so far."""

    cluster: Cluster
    workers: int
    seconds: float = 0.0
    scan_seconds: float = 0.0
    lines: int = 0
    queries: int = 0
    peak_rss_mb: list[float] = field(default_factory=list)
    private_mb: list[float] = field(default_factory=list)
    busy_seconds: list[float] = field(default_factory=list)
    cpu_seconds: list[float] = field(default_factory=list)
    pool: WorkerPool | None = None

    def __post_init__(self) -> None:
        self.peak_rss_mb = [0.0] * self.workers
        self.private_mb = [0.0] * self.workers
        self.busy_seconds = [0.0] * self.workers
        self.cpu_seconds = [0.0] * self.workers

    def scan(self, now: datetime) -> int:
        """One round: every shard at once, each in a worker process of its own."""
        if self.pool is None:
            raise RuntimeError("the setup's workers were not started")
        seconds, runs = self.pool.cycle(now)
        self.seconds += seconds
        # Every shard reads every line and keeps its own jobs': a round is one shard's reading.
        read = {run.lines for run in runs}
        if len(read) != 1:
            raise RuntimeError(f"the shards of one round read different lines: {sorted(read)}")
        self.lines += read.pop()
        self.scan_seconds += max(run.seconds for run in runs)
        self.queries += sum(run.queries for run in runs)
        for run in runs:
            self.busy_seconds[run.shard] += run.seconds
            self.cpu_seconds[run.shard] += run.cpu_seconds
            self.peak_rss_mb[run.shard] = max(self.peak_rss_mb[run.shard], run.peak_rss_mb)
            self.private_mb[run.shard] = max(self.private_mb[run.shard], run.private_mb)
        return self.lines

    def figures(self) -> dict[str, Any]:
        return {
            "worker_processes": self.workers,
            "lines": self.lines,
            "seconds": round(self.seconds, 2),
            "lines_per_s": round(self.lines / self.seconds) if self.seconds else None,
            # The workers' own scan time (the slowest's, each round).
            "scan_seconds": round(self.scan_seconds, 2),
            "queries": self.queries,
            "queries_per_1000_lines": (
                round(1000 * self.queries / self.lines, 2) if self.lines else None
            ),
            # Each shard's own scan time: shard 0 also does the cluster-wide share (metrics,
            # endings, resolving), so the shards are not equal halves.
            "scan_seconds_per_process": [round(s, 2) for s in self.busy_seconds],
            # The workers' CPU time over the wall time: near the worker count when each had a
            # core of its own, lower when they waited (for the database, or for a busy machine).
            "cores_used": round(sum(self.cpu_seconds) / self.seconds, 2) if self.seconds else None,
            "cpu_seconds_per_process": [round(s, 2) for s in self.cpu_seconds],
            "peak_rss_mb_per_process": self.peak_rss_mb,
            "private_mb_per_process": self.private_mb,
        }


def measure_ingest(
    lines: int, workloads: int, seed: int, tick: Tick, fault_rate: float | None = None
) -> dict[str, Any]:
    """Scan rounds of simulated output until at least ``lines`` lines went through the loop,
    by one worker process and by two, and compare what each stored. ``fault_rate`` (faults
    per node-hour) replaces the simulator's default."""
    if connection.in_atomic_block:
        raise RuntimeError("worker processes see only committed rows: run outside a transaction")
    if connection.vendor == "sqlite" and SQLiteCreation.is_in_memory_db(
        connection.settings_dict["NAME"]
    ):
        raise RuntimeError("worker processes cannot share an in-memory SQLite database")
    simulation = {
        "seed": seed,
        "nodes": nodes_for(workloads),
        "workloads": workloads,
        "nodes_per_job": list(NODES_PER_JOB),
        "progress_interval_s": PROGRESS_INTERVAL_S,
    }
    if fault_rate is not None:
        simulation["fault_rate"] = fault_rate
    setups = [Setup(simulated_cluster(f"bench-ingest-{n}w", simulation), workers=n) for n in SETUPS]
    for setup in setups:
        if setup.workers > 1:
            detection.update_detection_settings(ACTOR, setup.cluster, scan_shards=setup.workers)
    # One simulator feeds both: its lines and scrapes reach each cluster through the same
    # in-process sources (each cluster keeps its own cursors), its snapshots are recorded for each.
    runner = SimulationRunner(setups[0].cluster, start=START, in_process=True)
    sources = runner.sources
    if sources is None:
        raise RuntimeError("an in-process simulation runner has in-process sources")

    def step(seconds: float) -> None:
        runner.step(seconds)
        for setup in setups[1:]:
            services.record_snapshot(SIMULATOR, setup.cluster, runner.simulator.snapshot())

    for seconds in WARM_UP_STEPS:
        step(seconds)
    # The start-up output is read once, before anything is measured.
    for setup in setups:
        for shard in range(setup.workers):
            scan_cluster(setup.cluster, runner.now, sources, shard=shard)
    # Others' work on the machine takes cores from the workers: the load is reported with them.
    load_before = os.getloadavg()[0]
    rounds = 0
    for setup in setups:
        setup.pool = WorkerPool(setup.cluster, sources, setup.workers)
    try:
        while setups[0].lines < lines:
            step(ROUND_S)
            before = setups[0].lines
            # Turn about, so neither setup always runs first after the simulator.
            for setup in setups if rounds % 2 == 0 else setups[::-1]:
                setup.scan(runner.now)
            rounds += 1
            tick(min(1.0, setups[0].lines / lines))
            # Nothing restarts a failed job here: once every job has failed, no more lines come.
            if setups[0].lines == before:
                break
    finally:
        for setup in setups:
            if setup.pool is not None:
                setup.pool.close()
    one, two = setups
    stored = [stored_evidence(setup.cluster) for setup in setups]
    first, second = (setup.figures() for setup in setups)
    return {
        # The one-worker figures, as the bench reported them before it measured two.
        **{k: first[k] for k in ("lines", "seconds", "lines_per_s", "queries")},
        "lines_asked": lines,
        "queries_per_1000_lines": first["queries_per_1000_lines"],
        "peak_rss_mb": max(first["peak_rss_mb_per_process"]),
        # The bench's own process: the simulator and its output in memory, shared with the
        # workers it forks.
        "bench_process_peak_rss_mb": peak_rss_mb(),
        "workloads": workloads,
        "scans": rounds,
        "simulated_s_per_scan": ROUND_S,
        "progress_interval_s": PROGRESS_INTERVAL_S,
        "anomalies": stored[0]["anomalies"],
        "one_worker": first,
        "two_workers": second,
        "two_over_one": _ratio(second["lines_per_s"], first["lines_per_s"]),
        # An estimate, not a measurement: the ratio had each worker a free core and the
        # database kept up, from CPU time (one worker's, over the busier shard's).
        "two_over_one_from_cpu_time": _ratio(
            sum(one.cpu_seconds), max(two.cpu_seconds, default=0.0)
        ),
        "same_evidence": _compare(stored),
        "parallelism": _parallelism(),
        "load_average_1min": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "cpus": os.cpu_count(),
    }


def stored_evidence(cluster: Cluster) -> dict[str, Any]:
    """What detection stored for ``cluster``: every attempt's detector state and anomalies."""
    kept = [f.attname for f in AttemptMonitor._meta.concrete_fields if f.attname not in UNCOMPARED]
    monitors = sorted(
        AttemptMonitor.objects.filter(attempt__cluster=cluster).values_list(
            "attempt__job_id", "attempt__attempt_index", *kept
        ),
        key=repr,
    )
    anomalies = sorted(
        Anomaly.objects.filter(attempt__cluster=cluster).values_list(
            "attempt__job_id", "attempt__attempt_index", "family", "kind", "category", "state"
        ),
        key=repr,
    )
    progress = AttemptMonitor.objects.filter(attempt__cluster=cluster).values_list(
        "progress", flat=True
    )
    return {
        "lines": sum(
            AttemptMonitor.objects.filter(attempt__cluster=cluster).values_list(
                "lines_seen", flat=True
            )
        ),
        "anomalies": len(anomalies),
        "progress_reports": sum(int((p or {}).get("reports") or 0) for p in progress),
        "attempts": len(monitors),
        "_monitors": monitors,
        "_anomalies": anomalies,
    }


def _compare(stored: list[dict[str, Any]]) -> dict[str, Any]:
    """The stored counts of each setup (one worker first) and whether every row is the same.
    They hold the start-up output read before the timed rounds, so they exceed ``lines``."""
    counts = ("lines", "anomalies", "progress_reports", "attempts")
    one, two = stored
    return {
        **{name: [s[name] for s in stored] for name in counts},
        "monitors_match": one["_monitors"] == two["_monitors"],
        "anomalies_match": one["_anomalies"] == two["_anomalies"],
        "match": one["_monitors"] == two["_monitors"] and one["_anomalies"] == two["_anomalies"],
    }


def _parallelism() -> dict[str, Any]:
    """How the workers ran, and whether the database let them run side by side."""
    shared = connection.vendor != "sqlite"
    return {
        "processes": "long-lived, one per shard, each with its own connection and its own copy"
        " of each round's output",
        "database": connection.vendor,
        "meaningful": shared,
        "note": (
            "the workers write to one database server side by side"
            if shared
            else "SQLite takes one writer at a time: the second worker waits for the file "
            "lock, so the two-worker figure does not show what a second worker adds; "
            "measure it on MySQL or MariaDB"
        ),
    }


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 2) if a and b else None
