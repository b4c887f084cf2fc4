"""Loading and storing the monitors' rows: one attempt's, or a whole batch's in a few queries
and one bulk write."""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from typing import Any

from django.db import connection
from django.utils import timezone

from fleet.models import Attempt

from ..models import AttemptMonitor


def load(attempt: Attempt) -> AttemptMonitor:
    """The attempt's monitor: the one already fetched with it (select_related), or the stored
    one, or a new one."""
    try:
        return attempt.monitor
    except AttemptMonitor.DoesNotExist:
        monitor, _ = AttemptMonitor.objects.get_or_create(
            attempt=attempt,
            defaults={"throughput": _seeded_throughput([attempt]).get(attempt.pk, {})},
        )
        return monitor


def load_many(attempts: Sequence[Attempt]) -> dict[int, AttemptMonitor]:
    """The monitors of ``attempts`` by attempt id, in two queries however many there are
    (three when some are new), each tied to its attempt so reading it costs no query."""
    wanted = [attempt.pk for attempt in attempts]
    found = {m.attempt_id: m for m in AttemptMonitor.objects.filter(attempt_id__in=wanted)}
    missing = [attempt for attempt in attempts if attempt.pk not in found]
    if missing:
        # The scan lease keeps other writers out; ignoring conflicts only makes a race harmless.
        seeded = _seeded_throughput(missing)
        AttemptMonitor.objects.bulk_create(
            [AttemptMonitor(attempt=a, throughput=seeded.get(a.pk, {})) for a in missing],
            ignore_conflicts=True,
        )
        new = AttemptMonitor.objects.filter(attempt_id__in=[a.pk for a in missing])
        found.update({m.attempt_id: m for m in new})
    for attempt in attempts:
        found[attempt.pk].attempt = attempt
    return found


def _seeded_throughput(attempts: Sequence[Attempt]) -> dict[int, dict[str, Any]]:
    """For new attempts of workloads that ran before, the previous attempt's median
    throughput as their prior (one query for all of them)."""
    workloads = {a.workload_id for a in attempts}
    new = {a.pk for a in attempts}
    earlier = (
        AttemptMonitor.objects.filter(attempt__workload_id__in=workloads)
        .exclude(attempt_id__in=new)
        .order_by("attempt__first_seen_at", "attempt_id")
        .values_list("attempt__workload_id", "throughput")
    )
    prior: dict[int, float] = {}
    for workload_id, data in earlier:
        values = (data or {}).get("values") or ()
        if values:  # the latest attempt that reported any throughput
            prior[workload_id] = statistics.median(values)
    return {
        a.pk: {"values": [], "times": [], "prior": prior[a.workload_id]}
        for a in attempts
        if a.workload_id in prior
    }


# What ``observe`` changes; saved together in one statement per chunk of monitors.
OBSERVED_FIELDS = (
    "progress",
    "throughput",
    "matched_lines",
    "lines_seen",
    "last_step",
    "last_progress_at",
    "checkpoint_step",
    "checkpoint_at",
    "resume",
    "resume_summary",
    "updated_at",
)


def save_many(monitors: Iterable[AttemptMonitor]) -> None:
    """Store what ``observe`` changed in the given (stored) monitors, in bulk.

    An upsert on the primary key writes a chunk of rows in one statement; Django's
    ``bulk_update`` would build a CASE expression per field and row, which costs more than
    the detectors themselves."""
    rows = list(monitors)
    stamp = timezone.now()
    for monitor in rows:
        monitor.updated_at = stamp  # bulk writes skip auto_now
    # MySQL upserts on any unique key it meets and takes no target; SQLite and PostgreSQL do.
    target = ["id"] if connection.features.supports_update_conflicts_with_target else None
    AttemptMonitor.objects.bulk_create(
        rows,
        batch_size=BULK_ROWS,
        update_conflicts=True,
        unique_fields=target,
        update_fields=OBSERVED_FIELDS,
    )


# Rows per statement: keeps its size and parameter count bounded.
BULK_ROWS = 500
