"""Plain records of what a scheduler reports: jobs, nodes and a snapshot of both.

The shapes a Slurm controller's snapshot, the Advisor API and the simulated cluster all speak.
Pure Python: no Django, no I/O. The vocabulary is Slurm's, because that is what operators read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from datetime import datetime
from enum import StrEnum
from typing import Any


class JobState(StrEnum):
    """Slurm job states (squeue's ``job_state``)."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    COMPLETING = "COMPLETING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    NODE_FAIL = "NODE_FAIL"
    CANCELLED = "CANCELLED"
    TIMEOUT = "TIMEOUT"
    OUT_OF_MEMORY = "OUT_OF_MEMORY"
    PREEMPTED = "PREEMPTED"


# States after which a job (this attempt of it) no longer runs.
TERMINAL_JOB_STATES = frozenset(
    {
        JobState.COMPLETED,
        JobState.FAILED,
        JobState.NODE_FAIL,
        JobState.CANCELLED,
        JobState.TIMEOUT,
        JobState.OUT_OF_MEMORY,
        # Even when Slurm requeues a preempted job: the requeue is a new attempt.
        JobState.PREEMPTED,
    }
)


class NodeState(StrEnum):
    """Slurm node states as sinfo reports them (base state, with drain shown explicitly)."""

    IDLE = "IDLE"
    ALLOCATED = "ALLOCATED"
    MIXED = "MIXED"
    COMPLETING = "COMPLETING"
    DOWN = "DOWN"
    # Kept apart from DRAINED: a draining node still runs the jobs it has.
    DRAINING = "DRAINING"
    DRAINED = "DRAINED"
    UNKNOWN = "UNKNOWN"


@dataclass(frozen=True)
class JobRecord:
    """One job as the scheduler reports it at one moment.

    ``job_id`` is Slurm's id as text: ``"1234"``, or ``"1234_7"`` for task 7 of array 1234, so
    each array task is its own job. ``restart_count`` is Slurm's ``restart_cnt``: a requeue keeps
    the job id and adds one, so (job_id, restart_count) names one attempt.
    """

    job_id: str
    name: str
    state: JobState
    partition: str
    nodes: tuple[str, ...] = ()
    restart_count: int = 0
    exit_code: int | None = None
    signal: int | None = None
    reason: str = ""
    comment: str = ""
    excluded_nodes: tuple[str, ...] = ()
    # PENDING but not schedulable until released (scontrol hold or requeuehold).
    held: bool = False
    submit_time: datetime | None = None
    start_time: datetime | None = None
    end_time: datetime | None = None
    # A pending job's earliest start (after a requeue: the requeue plus Slurm's delay).
    eligible_time: datetime | None = None

    @property
    def is_terminal(self) -> bool:
        return self.state in TERMINAL_JOB_STATES


_ARRAY_TASK_ID = re.compile(r"([0-9]+)_([0-9]+)", re.ASCII)


def array_task_of(job_id: str) -> tuple[str, int] | None:
    """(array job id, task id) for an array task's job id (``"1234_7"``); None otherwise."""
    match = _ARRAY_TASK_ID.fullmatch(job_id)
    return (match.group(1), int(match.group(2))) if match else None


@dataclass(frozen=True)
class NodeRecord:
    """One node as the scheduler reports it."""

    name: str
    state: NodeState
    reason: str = ""
    gpus: int = 0
    partitions: tuple[str, ...] = ()
    # A node the scheduler lost (down, not responding): when it was last known alive, which is
    # where a failure of the jobs on it starts (Slurm waits SlurmdTimeout before saying so).
    lost_at: datetime | None = None


@dataclass(frozen=True)
class ClusterSnapshot:
    """Everything the scheduler reported at ``taken_at``."""

    taken_at: datetime
    jobs: tuple[JobRecord, ...]
    nodes: tuple[NodeRecord, ...]


def snapshot_to_json(snapshot: ClusterSnapshot) -> dict[str, object]:
    """A JSON-ready dict (times as ISO 8601), for task arguments and the Advisor API."""
    return {
        "taken_at": snapshot.taken_at.isoformat(),
        "jobs": [_record_to_json(job) for job in snapshot.jobs],
        "nodes": [_record_to_json(node) for node in snapshot.nodes],
    }


def snapshot_from_json(data: dict[str, Any]) -> ClusterSnapshot:
    """Parse what ``snapshot_to_json`` wrote; a malformed document raises ``ValueError``."""
    try:
        return ClusterSnapshot(
            taken_at=_parse_time(data["taken_at"]),
            jobs=tuple(_job_from_json(job) for job in data.get("jobs", ())),
            nodes=tuple(_node_from_json(node) for node in data.get("nodes", ())),
        )
    except (KeyError, TypeError, AttributeError) as exc:
        # Every bad shape becomes ValueError, so callers have one exception to catch.
        raise ValueError(f"malformed snapshot: {exc!r}") from exc


def _record_to_json(record: JobRecord | NodeRecord) -> dict[str, object]:
    out: dict[str, object] = {}
    # The fields are flat (strings, numbers, times, tuples of strings): no deep copy as
    # ``asdict`` makes, which cost more than the rest of a 35,000-item snapshot.
    for field in fields(record):
        name, value = field.name, getattr(record, field.name)
        if isinstance(value, datetime):
            value = value.isoformat()
        elif isinstance(value, tuple):
            value = list(value)
        out[name] = value
    return out


def _job_from_json(data: dict[str, Any]) -> JobRecord:
    times = {
        k: _parse_time(data.get(k))
        for k in ("submit_time", "start_time", "end_time", "eligible_time")
    }
    return JobRecord(
        job_id=str(data["job_id"]),
        # Optional fields may be missing (an older writer); a missing required one is a KeyError.
        name=str(data.get("name", "")),
        state=JobState(data["state"]),
        partition=str(data.get("partition", "")),
        nodes=tuple(str(n) for n in data.get("nodes", ())),
        restart_count=int(data.get("restart_count", 0)),
        exit_code=_optional_int(data.get("exit_code")),
        signal=_optional_int(data.get("signal")),
        reason=str(data.get("reason", "")),
        comment=str(data.get("comment", "")),
        excluded_nodes=tuple(str(n) for n in data.get("excluded_nodes", ())),
        held=bool(data.get("held", False)),
        **times,
    )


def _node_from_json(data: dict[str, Any]) -> NodeRecord:
    return NodeRecord(
        name=str(data["name"]),
        state=NodeState(data["state"]),
        reason=str(data.get("reason", "")),
        gpus=int(data.get("gpus", 0)),
        partitions=tuple(str(p) for p in data.get("partitions", ())),
        lost_at=_parse_time(data.get("lost_at")),
    )


def _parse_time(value: object) -> Any:
    if value is None:
        return None
    parsed = datetime.fromisoformat(str(value))
    if parsed.tzinfo is None:
        # Naive times are refused: guessing a zone would shift attempts by hours.
        raise ValueError(f"time {value!r} has no timezone")
    return parsed


def _optional_int(value: object) -> int | None:
    return None if value is None else int(value)  # type: ignore[call-overload]
