"""Time and count the queries of recording one 2,000-job snapshot (first sighting, unchanged,
all ended), and how long the audit trail's head stays locked per chunk.

    DATABASE_URL=mysql://root@127.0.0.1:3306/scratch python scripts/measure_snapshot_ingest.py

Writes a throwaway cluster into that database: point it at a scratch one.
"""

import os
import sys
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "recovery_console.settings")

import django  # noqa: E402

django.setup()

from django.db import connection, transaction  # noqa: E402

from recovery_console.fleet import audit, services  # noqa: E402
from recovery_console.fleet.core.scheduler import (  # noqa: E402
    ClusterSnapshot,
    JobRecord,
    JobState,
    NodeRecord,
    NodeState,
)

JOBS, NODES = 2000, 500
T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
held: list[float] = []
original_append = audit.append


def timed_append(entries):  # type: ignore[no-untyped-def]
    # From taking the head's lock to the commit that releases it.
    start = time.perf_counter()
    result = original_append(entries)
    transaction.on_commit(lambda: held.append(time.perf_counter() - start))
    return result


def main() -> None:
    audit.append = timed_append  # type: ignore[assignment]
    cluster = services.create_cluster("user:measure", f"measure-{int(time.time())}")
    jobs = tuple(
        JobRecord(
            job_id=str(500_000 + n),
            name=f"run-{n}",
            state=JobState.RUNNING,
            partition="gpu",
            nodes=(f"m-{n % NODES:03d}",),
            start_time=T0,
            comment=f'{{"workload": "w{n}"}}',
        )
        for n in range(JOBS)
    )
    nodes = tuple(
        NodeRecord(f"m-{n:03d}", NodeState.ALLOCATED, gpus=8, partitions=("gpu",))
        for n in range(NODES)
    )
    ended = tuple(
        replace(j, state=JobState.FAILED, exit_code=1, end_time=T0 + timedelta(seconds=9))
        for j in jobs
    )
    cases = [
        ("first sighting", ClusterSnapshot(T0, jobs, nodes)),
        ("unchanged", ClusterSnapshot(T0 + timedelta(seconds=5), jobs, nodes)),
        ("all ended", ClusterSnapshot(T0 + timedelta(seconds=10), ended, nodes)),
    ]
    count = [0]

    def counter(execute, sql, params, many, context):  # type: ignore[no-untyped-def]
        count[0] += 1
        return execute(sql, params, many, context)

    for label, snapshot in cases:
        count[0] = 0
        held.clear()
        with connection.execute_wrapper(counter):
            start = time.perf_counter()
            services.record_snapshot("controller:measure", cluster, snapshot)
            elapsed = time.perf_counter() - start
        lock = f", head locked at most {max(held):.2f} s at a time" if held else ""
        sys.stdout.write(f"{label}: {elapsed:.2f} s, {count[0]} queries{lock}\n")


if __name__ == "__main__":
    main()
