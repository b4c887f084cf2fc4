"""Recording one scheduler snapshot: its nodes and its rejections in one transaction, then its
jobs in chunks, each its own short transaction, and one event for the pages after the commit."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from django.db import transaction

from fleet import audit, events
from fleet.core.scheduler import ClusterSnapshot, JobRecord

from ..models import Cluster
from .attempts import _record_jobs
from .nodes import _record_nodes
from .resume import _note_lost_nodes
from .validation import Rejection, _valid_jobs, _valid_nodes

# Jobs per transaction: a few hundred keep each one well under a second.
CHUNK = 400


# Rejections listed in the audit entry (the count is always there).
AUDITED_REJECTIONS = 100


@dataclass(frozen=True)
class SnapshotResult:
    """What recording one scheduler snapshot changed, and what it refused."""

    new_attempts: int = 0
    changed_attempts: int = 0
    changed_nodes: int = 0
    rejected: tuple[Rejection, ...] = ()


def record_snapshot(
    actor: str,
    cluster: Cluster,
    snapshot: ClusterSnapshot,
    rejected: Sequence[Rejection] = (),
    positions: tuple[Sequence[int], Sequence[int]] | None = None,
) -> SnapshotResult:
    """Bring nodes, workloads and attempts up to date with what the scheduler reported.

    Attempts are history: a new restart count adds an attempt (closing the previous one as
    REQUEUED if we never saw it end), and an attempt that has ended is left alone. ``rejected``
    are the entries the caller could not even parse, audited with the others; ``positions``
    then give each job's and node's index in the caller's lists, so rejections name those.
    """
    job_at, node_at = positions or (range(len(snapshot.jobs)), range(len(snapshot.nodes)))
    jobs, bad_jobs = _valid_jobs(snapshot.jobs, job_at)
    nodes, bad_nodes = _valid_nodes(snapshot.nodes, node_at)
    with transaction.atomic():
        changed_nodes, collided = _record_nodes(actor, cluster, nodes, snapshot.taken_at)
        index_of: dict[str, int] = {}
        for n, node in enumerate(snapshot.nodes):
            index_of.setdefault(node.name, node_at[n])  # the one recorded is the first
        same_name = "is another node's name in other letters (the database cannot keep both)"
        rejections = (
            *rejected,
            *bad_jobs,
            *bad_nodes,
            *(Rejection("node", name, index_of[name], "name", same_name) for name in collided),
        )
        if rejections:
            audit.record(
                actor,
                "snapshot.rejected",
                cluster=cluster,
                payload={
                    "taken_at": snapshot.taken_at.isoformat(),
                    "count": len(rejections),
                    "rejected": [r.as_json() for r in rejections[:AUDITED_REJECTIONS]],
                },
            )
    _note_lost_nodes(cluster, nodes, snapshot.taken_at)
    new = changed = 0
    touched: set[int] = set()
    for chunk in _chunks(jobs, CHUNK):
        with transaction.atomic():
            counts = _record_jobs(actor, cluster, chunk, snapshot.taken_at)
        new, changed = new + counts[0], changed + counts[1]
        touched |= counts[2]
    # One event per snapshot, sent after the commit, rather than one per attempt.
    if touched or changed_nodes:
        events.send_workloads_changed(cluster.pk, sorted(touched))
    return SnapshotResult(new, changed, changed_nodes, tuple(rejections))


def _chunks(items: Sequence[JobRecord], size: int) -> Iterator[Sequence[JobRecord]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]
