"""A simulated Slurm GPU cluster: a first-class telemetry and scheduler backend.

Pure Python: the standard library and the loop's plain records (``fleet.core``,
``detection.core.telemetry``), never Django or Celery. ``SimulatedCluster`` runs training
workloads on nodes with GPUs, injects faults from a catalogue with real-world shares and real log
text, obeys scheduler commands like Slurm, and records the ground truth.
"""

from .catalogue import ENTRIES, FAMILY_SHARES, Family, FaultEntry, draw_entry, kind_shares
from .cluster import SimulatedCluster
from .config import ManualRecoveryBaseline, PartitionSpec, SimulationConfig
from .records import (
    Attribution,
    Category,
    FaultKind,
    InjectedFault,
    SchedulerError,
    WorkloadProgress,
)
from .scheduler import SimulatedScheduler

__all__ = [
    "ENTRIES",
    "FAMILY_SHARES",
    "Attribution",
    "Category",
    "Family",
    "FaultEntry",
    "FaultKind",
    "InjectedFault",
    "ManualRecoveryBaseline",
    "PartitionSpec",
    "SchedulerError",
    "SimulatedCluster",
    "SimulatedScheduler",
    "SimulationConfig",
    "WorkloadProgress",
    "draw_entry",
    "kind_shares",
]
