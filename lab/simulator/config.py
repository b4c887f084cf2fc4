"""What to simulate: cluster size, workload mix, fault rate, timings. Every field has a default."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime


@dataclass(frozen=True)
class PartitionSpec:
    """A Slurm partition and the share of the cluster's nodes it owns."""

    name: str
    share: float


@dataclass(frozen=True)
class ManualRecoveryBaseline:
    """An operator who notices a failed or hung job ``notice_s`` after it broke and acts
    ``act_s`` later: requeues the workload, excluding the node a human would blame."""

    notice_s: float = 1800.0
    act_s: float = 900.0


def _default_partitions() -> tuple[PartitionSpec, ...]:
    # 56 and 8 of the default 64 nodes: a small canary partition beside the main one.
    return (PartitionSpec("gpu", 0.875), PartitionSpec("canary", 0.125))


@dataclass(frozen=True)
class SimulationConfig:
    """Parameters of one simulated cluster.

    ``fault_rate`` is faults per node-hour for an ordinary node; a ``bad_node_share`` of the
    nodes fault ``bad_node_factor`` times as often, so repeat offenders exist. The intervals are
    in simulated seconds.
    """

    seed: int = 0
    nodes: int = 64
    gpus_per_node: int = 8
    partitions: tuple[PartitionSpec, ...] = field(default_factory=_default_partitions)
    node_name_pattern: str = "gpu-node-{index:03d}"
    workloads: int = 8
    nodes_per_job: tuple[int, int] = (2, 8)
    array_share: float = 0.2
    start_time: datetime = datetime(2025, 5, 1, 12, 0, tzinfo=UTC)
    fault_rate: float = 0.001
    bad_node_share: float = 0.05
    bad_node_factor: float = 15.0
    progress_interval_s: float = 20.0
    checkpoint_interval_s: float = 1800.0
    time_limit_s: float = 48 * 3600.0
    # Slurm's credential-expiry wait before a requeued job may start again.
    requeue_delay_s: float = 10.0
    # Slurm's default MinJobAge: finished jobs vanish from squeue after it.
    min_job_age_s: float = 300.0
    completing_s: float = 2.0
    first_job_id: int = 4200
    manual_recovery: ManualRecoveryBaseline | None = None

    def __post_init__(self) -> None:
        # Checked here, so a bad setting fails when the cluster is built, not hours into a run.
        if self.nodes < 1 or self.gpus_per_node < 1 or self.workloads < 0:
            raise ValueError("nodes and gpus_per_node must be positive, workloads not negative")
        if not self.partitions or any(p.share <= 0 for p in self.partitions):
            raise ValueError("at least one partition, each with a positive share")
        low, high = self.nodes_per_job
        if not 1 <= low <= high:
            raise ValueError("nodes_per_job must be (low, high) with 1 <= low <= high")
        if self.start_time.tzinfo is None:
            raise ValueError("start_time must be an aware datetime")
        if self.fault_rate < 0 or self.progress_interval_s <= 0:
            raise ValueError("fault_rate must not be negative; progress_interval_s positive")
        if self.checkpoint_interval_s <= 0 or self.time_limit_s <= 0:
            raise ValueError("checkpoint_interval_s and time_limit_s must be positive")
