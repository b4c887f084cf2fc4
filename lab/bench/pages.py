"""Pages: the console's main pages timed over a large audit trail and many workloads."""

from __future__ import annotations

import hashlib
import json
import statistics
import time
from datetime import datetime, timedelta
from functools import partial
from types import SimpleNamespace
from typing import Any

from django.contrib.auth import get_user_model
from django.db import connection, transaction
from django.db.models import Count
from django.test import Client
from django.urls import NoReverseMatch, reverse

from fleet import audit, services
from fleet.models import Attempt, AuditChainHead, AuditEntry, Cluster, Workload, WorkloadState

from .loop import ACTOR, START
from .progress_bar import Tick
from .scale import p95, timed

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
