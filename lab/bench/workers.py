"""Worker processes for the bench: long-lived, each scanning one shard of a cluster, as Celery
workers do, against the same database; they report their time, queries and memory."""

from __future__ import annotations

import multiprocessing
import pickle
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


class WorkerPool:
    """Long-lived scan worker processes, one per shard, as Celery workers are: forked once, each
    with its own copy of the in-process sources, and fed every cycle with the new log lines and
    the scrape over a pipe. What a worker scans is then its own memory, as what a Celery worker
    reads from Loki or Prometheus is, not pages it shares with the bench (touching those would
    copy them, a cost no real worker has). Each cycle the workers first take their data, then
    all scan at once; the scan is what is timed."""

    def __init__(self, cluster: Cluster, sources: ClusterSources, workers: int) -> None:
        self.workers = workers
        self._sources = sources
        self._log = sources.logs["memory"]
        self._sent = self._log.pushed  # type: ignore[attr-defined]
        connections.close_all()
        fork = multiprocessing.get_context("fork")
        self._pipes: list[Connection] = []
        self._processes = []
        for shard in range(workers):
            ours, theirs = fork.Pipe()
            process = fork.Process(
                target=_pooled_worker, args=(theirs, cluster, sources, shard), daemon=True
            )
            process.start()
            theirs.close()
            self._pipes.append(ours)
            self._processes.append(process)

    def cycle(self, now: datetime) -> tuple[float, list[WorkerRun]]:
        """Hand every worker the cycle's data, then let them scan at once: the wall time from
        the start to the last worker's end, and what each did."""
        lines = self._log.since(self._sent)  # type: ignore[attr-defined]
        self._sent = self._log.pushed  # type: ignore[attr-defined]
        metrics = self._sources.metrics
        samples = metrics.scrape(now).samples if metrics is not None else ()
        data = pickle.dumps((lines, samples), protocol=pickle.HIGHEST_PROTOCOL)
        for pipe in self._pipes:
            pipe.send_bytes(data)
        self._expect("ready")
        started = time.perf_counter()
        for pipe in self._pipes:
            pipe.send(now)
        runs = self._expect("done")
        return time.perf_counter() - started, runs

    def close(self) -> None:
        for pipe in self._pipes:
            pipe.send_bytes(b"")  # no data: stop
        for process in self._processes:
            process.join()

    def _expect(self, word: str) -> list[WorkerRun]:
        runs, failures = [], []
        for pipe in self._pipes:
            reply = pipe.recv()
            if isinstance(reply, WorkerRun):
                runs.append(reply)
            elif reply != word:
                failures.append(str(reply))
        if failures:
            self.close()
            raise RuntimeError("a worker process failed:\n" + "\n".join(failures))
        return runs


def _pooled_worker(pipe: Connection, cluster: Cluster, sources: ClusterSources, shard: int) -> None:
    """One long-lived worker: take each cycle's data into its own sources, scan its shard when
    told, report; until told to stop. It opens its own database connection."""
    log, metrics = sources.logs["memory"], sources.metrics
    try:
        while True:
            data = pipe.recv_bytes()
            if not data:
                return
            # The bench's own process wrote it, pickled once for every worker (Pipe.recv would
            # pickle it again per worker).
            lines, samples = pickle.loads(data)  # noqa: S301
            log.push(lines)  # type: ignore[attr-defined]
            if metrics is not None:
                metrics.publish(samples)  # type: ignore[attr-defined]
            del data, lines, samples
            pipe.send("ready")
            now = pipe.recv()
            counter = QueryCounter()
            cpu_before = time.process_time()
            with connection.execute_wrapper(counter):
                started = time.perf_counter()
                summary = scan_cluster(cluster, now, sources, shard=shard)
                seconds = time.perf_counter() - started
            if summary.skipped:
                raise RuntimeError(f"shard {shard} was skipped: its lease was held")
            pipe.send(
                WorkerRun(
                    shard,
                    summary.lines,
                    counter.count,
                    seconds,
                    time.process_time() - cpu_before,
                    peak_rss_mb(),
                    private_mb(),
                )
            )
    except BaseException:
        pipe.send(traceback.format_exc())
        raise
    finally:
        connections.close_all()
        pipe.close()
