"""Recording a snapshot's nodes in bulk, each change (or first sighting) audited."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from fleet import audit
from fleet.core.scheduler import NodeRecord

from ..models import Cluster, Node
from .common import _save_existing


def _record_nodes(
    actor: str, cluster: Cluster, reported: Sequence[NodeRecord], seen_at: datetime
) -> tuple[int, list[str]]:
    """Nodes written in bulk; the count changed, and the names refused as another's."""
    # Plain rows, not models: a snapshot compares every node and most have not changed.
    known = {
        name: (pk, (state, reason, gpus, partitions))
        for pk, name, state, reason, gpus, partitions in Node.objects.filter(
            cluster=cluster
        ).values_list("pk", "name", "state", "reason", "gpus", "partitions")
    }
    new: list[tuple[Node, str]] = []
    changed: list[tuple[Node, str]] = []
    for record in reported:
        pk, before = known.get(record.name, (None, ("", "", 0, [])))
        after = (record.state.value, record.reason[:255], record.gpus, list(record.partitions))
        # Unchanged nodes are skipped: a snapshot every few seconds must not flood the trail.
        if pk is not None and before == after:
            continue
        node = Node(pk=pk, cluster=cluster, name=record.name)
        node.state, node.reason, node.gpus, node.partitions = after
        node.updated_at = seen_at
        (changed if node.pk is not None else new).append((node, before[0]))
    _save_existing(
        Node, [n for n, _ in changed], ("state", "reason", "gpus", "partitions", "updated_at")
    )
    collided: list[str] = []
    if new:
        Node.objects.bulk_create([n for n, _ in new], ignore_conflicts=True)
        ids = dict(
            Node.objects.filter(cluster=cluster, name__in=[n.name for n, _ in new]).values_list(
                "name", "pk"
            )
        )
        for node, _ in new:
            node.pk = ids.get(node.name)
        # A name the database's collation equates with another node's ("GPU-1", "gpu-1").
        collided = [n.name for n, _ in new if n.pk is None]
    audit.append(
        [
            audit.entry(
                actor,
                # A new node has no state yet: that tells a first sighting from a change.
                "node.state_changed" if previous else "node.observed",
                node,
                cluster=cluster,
                payload={"state": node.state, "reason": node.reason, "previous_state": previous},
            )
            for node, previous in [*changed, *new]
            if node.pk is not None
        ]
    )
    return len(changed) + len(new) - len(collided), collided
