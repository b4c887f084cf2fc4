"""Recording a scheduler snapshot: nodes, workloads and attempts brought up to date in bulk.

Everything in a snapshot is hostile input (a job's name and comment are the user's): each job
and node is checked on its own, and one that does not fit is rejected, named in the result and
in the audit trail, while the rest is recorded. Jobs are written in chunks, each its own short
transaction with a few queries and one append to the audit trail, so a large snapshot never
holds the trail's head (every writer's lock) for long.

The parts are split by what they do: ``validation`` (checking each job and node),
``recording`` (the snapshot as a whole), ``attempts`` and ``workloads`` (what its jobs record),
``nodes``, and ``resume`` (failures and time to resume). The names the rest of the loop uses
are here.
"""

from .recording import SnapshotResult, record_snapshot
from .validation import Rejection
from .workloads import workload_key

__all__ = ["Rejection", "SnapshotResult", "record_snapshot", "workload_key"]
