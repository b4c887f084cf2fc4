"""What a workload's interruptions cost in GPU-hours: idle time plus recomputation.

- **Idle**: GPUs held without progress. A failed attempt's GPUs from its last progress to its
  end (a hang burns them until someone notices), then the next attempt's GPUs while it waits to
  run: its time to resume, which starts at the failure's first evidence, less the part the failed
  attempt still held (counted already).
- **Recomputation**: the work a failed attempt did after its last checkpoint, which the next
  attempt does again: its GPUs from that checkpoint (or from its start, when it wrote none) to
  its last progress. Only for workloads whose log shows checkpoints at all; for the others the
  figure is unknown and none is counted.

Pure Python: plain data in, plain data out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

# Sorts an attempt that never started and never ended (never ran) last.
_NEVER = datetime.max.replace(tzinfo=UTC)


@dataclass(frozen=True)
class AttemptCostInput:
    """One attempt, as far as its cost is concerned."""

    gpus: int
    failed: bool
    started_at: datetime | None = None
    ended_at: datetime | None = None
    failed_at: datetime | None = None
    last_progress_at: datetime | None = None
    checkpoint_at: datetime | None = None
    time_to_resume_s: float | None = None


@dataclass(frozen=True)
class GpuHoursLost:
    idle: float = 0.0
    recompute: float = 0.0

    @property
    def total(self) -> float:
        return self.idle + self.recompute

    def __add__(self, other: GpuHoursLost) -> GpuHoursLost:
        return GpuHoursLost(self.idle + other.idle, self.recompute + other.recompute)


def gpu_hours_lost(
    attempts: Sequence[AttemptCostInput], *, checkpoints_known: bool
) -> GpuHoursLost:
    """The cost of one workload's interruptions; ``attempts`` in any order."""
    ordered = sorted(attempts, key=lambda a: a.started_at or a.ended_at or _NEVER)
    idle_s = recompute_s = 0.0
    previous: AttemptCostInput | None = None
    for attempt in ordered:
        if attempt.time_to_resume_s is not None:
            held = _held_after_failure(previous) if previous and previous.failed else 0.0
            idle_s += attempt.gpus * max(0.0, attempt.time_to_resume_s - held)
        if attempt.failed:
            idle_s += attempt.gpus * _hung(attempt)
            if checkpoints_known:
                recompute_s += attempt.gpus * _since_checkpoint(attempt)
        previous = attempt
    return GpuHoursLost(idle=idle_s / 3600, recompute=recompute_s / 3600)


def _hung(attempt: AttemptCostInput) -> float:
    """From the last progress to the end; without any progress reported it is unknown."""
    if (
        attempt.ended_at
        and attempt.last_progress_at
        and attempt.ended_at > attempt.last_progress_at
    ):
        return (attempt.ended_at - attempt.last_progress_at).total_seconds()
    return 0.0


def _held_after_failure(attempt: AttemptCostInput) -> float:
    """The part of the next attempt's wait (which starts at the failure's first evidence) the
    failed attempt still held its GPUs without progress: already counted as its hung time."""
    if attempt.failed_at is None or attempt.ended_at is None:
        return 0.0  # its time to resume started at its end: nothing overlaps
    since = max(filter(None, (attempt.failed_at, attempt.last_progress_at)))
    return max(0.0, (attempt.ended_at - since).total_seconds())


def _since_checkpoint(attempt: AttemptCostInput) -> float:
    since = attempt.checkpoint_at or attempt.started_at
    if since and attempt.last_progress_at and attempt.last_progress_at > since:
        return (attempt.last_progress_at - since).total_seconds()
    return 0.0
