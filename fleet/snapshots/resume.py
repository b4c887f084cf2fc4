"""When a workload's attempt failed and how long the workload took to run again: a lost node's
attempts are noted failed from its loss, and an attempt that starts running gets its time to
resume from the failure it recovers from."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from django.db.models import F, Q, Window
from django.db.models.functions import RowNumber

from fleet.core.scheduler import NodeRecord

from ..models import Attempt, Cluster

# A lost node's attempts are looked for this long after it was lost (see _note_lost_nodes).
LOST_NODE_RECENT = timedelta(minutes=10)


def _note_lost_nodes(cluster: Cluster, nodes: Sequence[NodeRecord], seen_at: datetime) -> None:
    """A node the scheduler lost ended the attempts running on it when it died, not when
    Slurm said so: their failure is noted from then (time to resume starts there). Only
    recent losses: a node down for days is not looked up again at every snapshot."""
    lost: dict[str, datetime] = {}
    for node in nodes:
        if node.lost_at is not None and seen_at - node.lost_at <= LOST_NODE_RECENT:
            lost[node.name] = node.lost_at
    if not lost:
        return
    overlapping = Attempt.objects.filter(
        cluster=cluster, started_at__lte=max(lost.values())
    ).filter(Q(ended_at__isnull=True) | Q(ended_at__gte=min(lost.values())))
    for pk, names, started, ended in overlapping.values_list(
        "pk", "nodes", "started_at", "ended_at"
    ):
        # Within the attempt's run: a node lost before it began or after it ended did not end it.
        window = (started or seen_at, ended or seen_at)  # started_at__lte: never None here
        died = [lost[n] for n in names if n in lost and window[0] <= lost[n] <= window[1]]
        if died:
            # As detection's ``note_failure``: the earliest wins, nothing else is rewritten.
            Attempt.objects.filter(pk=pk).filter(
                Q(failed_at__isnull=True) | Q(failed_at__gt=min(died))
            ).update(failed_at=min(died))


def _set_time_to_resume(starting: Sequence[Attempt], ended_now: Sequence[Attempt]) -> None:
    """From the failure of each workload's previous attempt (its first evidence of failure, or
    its end) to the attempt running; none for a first attempt or after a clean end.
    ``ended_now`` are this chunk's attempts that ended and are not yet saved."""
    workload_ids = {a.workload_id for a in starting if a.workload_id is not None}
    if not workload_ids:
        return
    latest_failures = (
        Attempt.objects.filter(workload_id__in=workload_ids, ended_at__isnull=False)
        .exclude(state="COMPLETED")
        .annotate(
            rank=Window(RowNumber(), partition_by=F("workload_id"), order_by=F("ended_at").desc())
        )
        .filter(rank=1)
    )
    previous: dict[int, Attempt] = {a.workload_id: a for a in latest_failures}
    for attempt in ended_now:
        stored = previous.get(attempt.workload_id)
        if attempt.state != "COMPLETED" and (stored is None or _ended(stored) < _ended(attempt)):
            previous[attempt.workload_id] = attempt
    for attempt in starting:
        failed = previous.get(attempt.workload_id)
        started = attempt.started_at
        # An attempt that ended after this one started is not the failure it recovers from.
        if failed is None or failed.ended_at is None or started is None:
            continue
        if failed.ended_at > started:
            continue
        # Detection's first evidence often precedes the scheduler's end by minutes (a hang).
        failed_at = min(filter(None, (failed.failed_at, failed.ended_at)))
        attempt.time_to_resume_s = max(0.0, (started - failed_at).total_seconds())


def _ended(attempt: Attempt) -> datetime:
    return attempt.ended_at or datetime.min.replace(tzinfo=UTC)
