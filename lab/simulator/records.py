"""Values the simulator hands out besides telemetry: injected faults, progress, scheduler errors.

The taxonomy is detection's own (DESIGN.md section 3), so ground truth compares with what the
detectors and ``diagnose`` report without any mapping.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

# Re-exported: the simulator's modules take the taxonomy from here.
from fleet.core.taxonomy import Attribution as Attribution
from fleet.core.taxonomy import Category as Category


class FaultKind(StrEnum):
    """How an interruption shows itself."""

    CRASH = "crash"
    HANG = "hang"
    STRAGGLER = "straggler"


@dataclass(frozen=True)
class InjectedFault:
    """One fault the simulator injected: the ground truth a detector is scored against.

    ``at`` is the time of the first evidence (the first root-cause line, or the moment progress
    stopped for a silent hang). ``attempt`` is the job's ``restart_count`` when it happened.
    ``implicated_hosts`` is empty when no node is to blame.
    """

    fault_id: str
    at: datetime
    job_id: str
    attempt: int
    kind: FaultKind
    category: Category
    attribution: Attribution
    implicated_hosts: tuple[str, ...]
    family: str
    description: str
    workload: str = ""
    entry: str = ""
    rank: int | None = None
    gpu: int | None = None


@dataclass(frozen=True)
class WorkloadProgress:
    """How much useful training a workload has done, for the effective-training-time figure.

    ``productive_gpu_s`` counts only iterations that still stand (work lost since the last
    checkpoint of a failed attempt is not counted) at the workload's nominal speed, so slowdowns
    lower it too. ``wall_gpu_s`` is the workload's GPUs times the time since it first started.
    """

    workload: str
    job_ids: tuple[str, ...]
    gpus: int
    iteration: int
    train_iters: int
    checkpoint_iteration: int
    lost_iterations: int
    attempts: int
    productive_gpu_s: float
    # GPU time attempts actually held; wall GPU time also counts the time spent pending.
    allocated_gpu_s: float
    wall_gpu_s: float
    finished: bool

    @property
    def effective_training_time(self) -> float:
        """Productive GPU time over wall GPU time (1.0 before anything ran)."""
        # Nothing has run yet, so nothing has been lost either.
        if self.wall_gpu_s <= 0:
            return 1.0
        return self.productive_gpu_s / self.wall_gpu_s


class SchedulerError(Exception):
    """A scheduler command that Slurm would refuse; the message is Slurm's own wording."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        # The ESLURM_* name, so callers tell errors apart without parsing the wording.
        self.code = code
