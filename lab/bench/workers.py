"""Worker processes for the bench: each forked to scan one shard of a cluster, as a Celery
worker would, against the same database; they report their time, queries and memory."""

from __future__ import annotations

import multiprocessing
import resource
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from multiprocessing.connection import Connection
from typing import Any

from django.db import connection, connections

from detection.scan import scan_cluster
from detection.sources.config import ClusterSources
from fleet.models import Cluster


class QueryCounter:
    """Counts the statements sent to the database. (``CaptureQueriesContext`` keeps at most
    9,000 queries and counts none once DEBUG's query log is full; a cycle at scale runs more.)"""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, execute: Callable[..., Any], *args: Any) -> Any:
        self.count += 1
        return execute(*args)


@dataclass(frozen=True)
class WorkerRun:
    """What one worker process reports of its scan."""

    shard: int
    lines: int
    queries: int
    seconds: float
    # CPU time the process used (its own: a forked child starts from zero).
    cpu_seconds: float
    peak_rss_mb: float
    # Memory the process holds alone (copied on write or its own): a forked worker shares the
    # rest, the simulator included, with the bench.
    private_mb: float


def run_workers(
    cluster: Cluster, now: datetime, sources: ClusterSources, workers: int
) -> list[WorkerRun]:
    """Fork ``workers`` processes, each scanning its shard of ``cluster`` at ``now``; wait for
    all. The bench's own connections are closed first, so no process shares a socket."""
    connections.close_all()
    fork = multiprocessing.get_context("fork")
    started = []
    for shard in range(workers):
        receive, send = fork.Pipe(duplex=False)
        process = fork.Process(
            target=_worker, args=(send, cluster, now, sources, shard), daemon=True
        )
        process.start()
        send.close()
        started.append((process, receive))
    runs, failures = [], []
    for process, receive in started:
        try:
            outcome = receive.recv()
        except EOFError:
            outcome = "the worker exited without a word"
        process.join()
        if isinstance(outcome, WorkerRun) and process.exitcode == 0:
            runs.append(outcome)
        else:
            failures.append(f"exit {process.exitcode}: {outcome}")
    if failures:
        raise RuntimeError("a worker process failed:\n" + "\n".join(failures))
    return runs


def _worker(
    send: Connection, cluster: Cluster, now: datetime, sources: ClusterSources, shard: int
) -> None:
    """One worker process: scan one shard and report; it opens its own database connection."""
    try:
        counter = QueryCounter()
        with connection.execute_wrapper(counter):
            started = time.perf_counter()
            summary = scan_cluster(cluster, now, sources, shard=shard)
            seconds = time.perf_counter() - started
        if summary.skipped:
            raise RuntimeError(f"shard {shard} was skipped: its lease was held")
        usage = resource.getrusage(resource.RUSAGE_SELF)
        send.send(
            WorkerRun(
                shard,
                summary.lines,
                counter.count,
                seconds,
                usage.ru_utime + usage.ru_stime,
                peak_rss_mb(),
                private_mb(),
            )
        )
    except BaseException:
        send.send(traceback.format_exc())
        raise
    finally:
        connections.close_all()
        send.close()


def peak_rss_mb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def private_mb() -> float:
    """Private memory of this process now (Linux; 0 where /proc does not say)."""
    try:
        with open("/proc/self/smaps_rollup") as rollup:
            kb = sum(
                int(line.split()[1])
                for line in rollup
                if line.startswith(("Private_Clean", "Private_Dirty"))
            )
    except OSError:
        return 0.0
    return round(kb / 1024, 1)


def current_rss_mb() -> float:
    """Resident memory of this process now (Linux; 0 where /proc does not say)."""
    try:
        with open("/proc/self/statm") as statm:
            pages = int(statm.read().split()[1])
    except OSError:
        return 0.0
    return round(pages * resource.getpagesize() / 2**20, 1)
