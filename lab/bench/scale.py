"""Scale: one full detection cycle at thousands of running workloads, and the console's main
pages over a large audit trail.

The cycle is what runs every poll interval: detection's scan, the advice, and the controller's
cycle. Posting the scheduler's snapshot (which a real controller does at the start of its
cycle) is measured beside it, through the Advisor API as a controller posts it, and so are a
controller's polls of its advice list. Each part is timed on the wall clock and its database
queries counted; the median (and the 95th percentile) of a few cycles is reported. The
simulator's own work (advancing, scraping its GPUs) is not part of any figure.
"""

from __future__ import annotations

import hashlib
import json
import math
import statistics
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from functools import partial
from types import SimpleNamespace
from typing import Any

from django.contrib.auth import get_user_model
from django.db import connection, transaction
from django.db.models import Count
from django.test import Client
from django.urls import NoReverseMatch, reverse

from detection.scan import scan_cluster
from fleet import audit, services
from fleet.core.scheduler import ClusterSnapshot, snapshot_to_json
from fleet.models import (
    Attempt,
    AuditChainHead,
    AuditEntry,
    Cluster,
    Workload,
    WorkloadState,
)
from lab.demo.runner import ACTOR as SIMULATOR
from lab.demo.runner import SimulationRunner
from remediation.services import advise_cluster, issue_controller_token

from .loop import ACTOR, POLL_S, START, simulated_cluster
from .progress_bar import Tick

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


class QueryCounter:
    """Counts the statements sent to the database. (``CaptureQueriesContext`` keeps at most
    9,000 queries and counts none once DEBUG's query log is full; a cycle at scale runs more.)"""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, execute: Callable[..., Any], *args: Any) -> Any:
        self.count += 1
        return execute(*args)


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
        tick((len(WARM_UP_STEPS) + n + 1) / steps)
    running = sum(1 for job in runner.simulator.snapshot().jobs if job.state == "RUNNING")
    backlog = _backlog_scan(cluster, runner)
    tick(1.0)
    figures = _cycle_figures(workloads, nodes, running, samples, backlog)
    figures["advice_reads"] = {
        "reads": len(reads),
        "seconds_p50": round(statistics.median(r for r, _ in reads), 4),
        "seconds_p95": round(p95([r for r, _ in reads]), 4),
        "active_advice": max(i for _, i in reads),
        "page_size": 100,
    }
    return figures


ADVICE_READS_PER_CYCLE = 20


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


# --- pages ------------------------------------------------------------------------------------

PAGES = {
    "overview": ("overview", ()),
    "workloads": ("workloads", ()),
    "workload": ("workload", ("workload",)),
    "cluster": ("cluster", ("cluster",)),
    "nodes": ("nodes", ("cluster",)),
    "audit": ("audit", ()),
    "review_queue": ("review-queue", ()),
}
# Rows per bulk insert: memory stays flat and statements stay under parameter limits.
AUDIT_BATCH = 5000
VERBS = ("attempt.changed", "attempt.observed", "anomaly.detected", "advice.dispatched")


def measure_pages(
    cluster: Cluster, audit_rows: int, workloads: int, repeats: int, tick: Tick
) -> dict[str, Any]:
    """Median and 95th-percentile response time (ms) of the console's main pages with
    ``audit_rows`` audit entries and ``workloads`` workloads stored (topped up with plain rows),
    for a signed-in admin."""
    started = time.perf_counter()
    added_workloads = _top_up_workloads(workloads)
    tick(0.1)
    added_audit = _top_up_audit(cluster, audit_rows, lambda f: tick(0.1 + 0.5 * f))
    top_up_s = time.perf_counter() - started
    # The client's own default host, testserver, is only allowed under the test runner.
    client = Client(SERVER_NAME="localhost")
    # No password: the client is logged in directly.
    user = get_user_model().objects.create_superuser("bench", "bench@example.invalid", None)
    client.force_login(user)
    medians: dict[str, float | None] = {}
    p95s: dict[str, float | None] = {}
    queries: dict[str, int | None] = {}
    statuses: dict[str, int | None] = {}
    for n, (page, url) in enumerate(_page_urls(cluster).items(), start=1):
        timing = _time_page(client, url, repeats)
        medians[page], p95s[page], queries[page], statuses[page] = timing
        tick(0.6 + 0.4 * n / len(PAGES))
    return {
        "pages_ms": medians,
        "pages_p95_ms": p95s,
        "queries": queries,
        "status": statuses,
        "audit_entries": AuditEntry.objects.count(),
        "workloads": Workload.objects.count(),
        "added": {"audit_entries": added_audit, "workloads": added_workloads},
        "top_up_s": round(top_up_s, 1),
        "repeats": repeats,
    }


def _page_urls(cluster: Cluster) -> dict[str, str | None]:
    # The workload with the most attempts has the heaviest detail page.
    busiest = (
        Workload.objects.filter(cluster=cluster)
        .annotate(attempt_count=Count("attempts"))
        .order_by("-attempt_count", "pk")
        .first()
    )
    values = {"cluster": cluster.name, "workload": busiest.pk if busiest else 0}
    urls: dict[str, str | None] = {}
    for page, (name, args) in PAGES.items():
        try:
            urls[page] = reverse(name, args=[values[a] for a in args])
        except NoReverseMatch:
            # A page this build lacks is reported as null, not as a failure.
            urls[page] = None
    return urls


PageTiming = tuple[float | None, float | None, int | None, int | None]


def _time_page(client: Client, url: str | None, repeats: int) -> PageTiming:
    """Median and p95 (ms), queries and status of ``repeats`` requests for ``url``."""
    if url is None:
        return None, None, None, None
    status = client.get(url).status_code  # the first request compiles templates: not timed
    times = []
    counts = []
    for _ in range(repeats):
        seconds, count, response = timed(partial(client.get, url))
        status = response.status_code
        times.append(seconds)
        counts.append(count)
    if status != 200:
        return None, None, None, status
    median, worst = statistics.median(times), p95(times)
    return round(median * 1000, 1), round(worst * 1000, 1), max(counts), status


def _top_up_workloads(wanted: int) -> int:
    """Workloads (each with one attempt) in a cluster of their own, up to ``wanted`` in all."""
    missing = wanted - Workload.objects.count()
    if missing <= 0:
        return 0
    # A cluster of their own, so the loop's cluster and its figures stay as they were.
    cluster = services.create_cluster(ACTOR, "bench-pages", scheduler={"backend": "simulated"})
    states = list(WorkloadState)
    made = Workload.objects.bulk_create(
        Workload(
            cluster=cluster,
            key=f"bench-page-{n:05d}",
            state=states[n % len(states)],
            created_at=START + timedelta(minutes=n),
            updated_at=START + timedelta(minutes=n),
        )
        for n in range(missing)
    )
    Attempt.objects.bulk_create(
        Attempt(
            cluster=cluster,
            workload=workload,
            job_id=str(900_000 + n),
            attempt_index=0,
            name=workload.key,
            partition="gpu",
            state="RUNNING",
            nodes=[f"page-node-{n % 500:03d}"],
            first_seen_at=workload.created_at,
            started_at=workload.created_at,
        )
        for n, workload in enumerate(made)
    )
    return missing


def _top_up_audit(cluster: Cluster, wanted: int, tick: Tick) -> int:
    """Audit entries up to ``wanted``, bulk-inserted. They are hashed and chained like the ones
    ``audit.record`` appends, so the throwaway trail still verifies. Rows go in as plain
    tuples: building a model per row and compiling it cost three times the hashing."""
    missing = wanted - AuditEntry.objects.count()
    if missing <= 0:
        return 0
    workload_ids = list(Workload.objects.filter(cluster=cluster).values_list("pk", flat=True))
    with transaction.atomic(), connection.cursor() as cursor:
        # Locked as ``audit.record`` locks it, so no entry slips in mid-chain.
        head, _ = AuditChainHead.objects.select_for_update().get_or_create(pk=1)
        sequence, previous = head.last_sequence, head.last_hash
        batch: list[tuple[Any, ...]] = []
        insert = _audit_insert()
        for n in range(missing):
            sequence += 1
            # Back-dated before the run, 30 s apart, so the run's own entries stay the newest.
            at = START - timedelta(seconds=30 * (missing - n))
            row = _audit_row(cluster.pk, workload_ids, sequence, previous, n, at)
            previous = row.entry_hash
            batch.append(_audit_values(row))
            if len(batch) == AUDIT_BATCH or n == missing - 1:
                cursor.executemany(insert, batch)
                batch = []
                tick((n + 1) / missing)
        AuditChainHead.objects.filter(pk=head.pk).update(last_sequence=sequence, last_hash=previous)
    return missing


AUDIT_COLUMNS = (
    "sequence",
    "at",
    "actor",
    "cluster_id",
    "workload_id",
    "attempt_id",
    "verb",
    "object_type",
    "object_id",
    "payload",
    "previous_hash",
    "entry_hash",
)


def _audit_insert() -> str:
    quote = connection.ops.quote_name
    columns = ", ".join(quote(c) for c in AUDIT_COLUMNS)
    values = ", ".join(["%s"] * len(AUDIT_COLUMNS))
    # Names from the model and placeholders only: the values go as parameters.
    table = quote(AuditEntry._meta.db_table)
    return f"INSERT INTO {table} ({columns}) VALUES ({values})"  # noqa: S608


def _audit_row(
    cluster_id: int, workload_ids: list[int], sequence: int, previous: str, n: int, at: datetime
) -> SimpleNamespace:
    """One entry's fields, under the names ``audit.entry_hash`` reads, and its hash."""
    workload_id = workload_ids[n % len(workload_ids)] if workload_ids else None
    digest = hashlib.sha256(str(n).encode()).hexdigest()[:12]
    row = SimpleNamespace(
        sequence=sequence,
        at=at,
        actor=ACTOR,
        cluster_id=cluster_id,
        workload_id=workload_id,
        attempt_id=None,
        verb=VERBS[n % len(VERBS)],
        object_type="workload",
        object_id=str(workload_id or ""),
        payload={"bench": n, "ref": digest},
        previous_hash=previous,
    )
    row.entry_hash = audit.entry_hash(row)
    return row


def _audit_values(row: SimpleNamespace) -> tuple[Any, ...]:
    # The values as the model's fields would send them: a UTC datetime the backend accepts,
    # the payload as JSON text.
    values = {
        **vars(row),
        "at": connection.ops.adapt_datetimefield_value(row.at),
        "payload": json.dumps(row.payload),
    }
    return tuple(values[column] for column in AUDIT_COLUMNS)
