"""Map Slurm's JSON (``squeue --json``, ``sinfo --json``, ``scontrol show job --json``) to the
telemetry records in ``detection.telemetry``.

Recorded against Slurm 22.05 (openapi v0.0.38: plain numbers, ``job_state`` a string, ``exit_code``
a raw wait status). Later versions wrap numbers as ``{"set", "infinite", "number"}``, make states
lists of flags and ``exit_code`` an object with ``return_code`` and ``signal``; those shapes are
read too. Array tasks become jobs ``"<array>_<task>"``; a pending array record that stands for
several tasks (``array_task_string: "2-3"``) becomes one pending job per task.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator, Mapping
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from fleet.core.scheduler import (
    TERMINAL_JOB_STATES,
    JobRecord,
    JobState,
    NodeRecord,
    NodeState,
)

from .hostlist import expand_hostlist

logger = logging.getLogger(__name__)


class SlurmOutputError(ValueError):
    """Slurm printed something that is not the JSON document we expect."""


# Slurm's job state strings that are not one of our JobStates, mapped to what they mean for a run
_STATE_ALIASES = {
    "COMPLETE": JobState.COMPLETED,
    "CONFIGURING": JobState.RUNNING,  # nodes allocated, booting
    "RESIZING": JobState.RUNNING,
    "SUSPENDED": JobState.RUNNING,  # still holds its nodes
    "STOPPED": JobState.RUNNING,
    "REQUEUED": JobState.PENDING,
    "REQUEUE_FED": JobState.PENDING,
    "REQUEUE_HOLD": JobState.PENDING,
    "SPECIAL_EXIT": JobState.PENDING,
    "RESV_DEL_HOLD": JobState.PENDING,
    "SIGNALING": JobState.COMPLETING,
    "STAGE_OUT": JobState.COMPLETING,
    "REVOKED": JobState.CANCELLED,
    "BOOT_FAIL": JobState.NODE_FAIL,
    "LAUNCH_FAILED": JobState.FAILED,
    "DEADLINE": JobState.TIMEOUT,
    "OOM": JobState.OUT_OF_MEMORY,
}
# flags that override the base state when a list of flags is given (23.02+)
_STATE_FLAG_PRIORITY = ("COMPLETING", "REQUEUE_HOLD", "SPECIAL_EXIT", "REQUEUED", "RESIZING")
_HELD_STATES = frozenset({"REQUEUE_HOLD", "SPECIAL_EXIT", "RESV_DEL_HOLD"})
_HELD_REASONS = frozenset({"JobHeldAdmin", "JobHeldUser"})
_BUSY_NODE_STATES = frozenset({"ALLOCATED", "MIXED"})
LOST_NODE_REASON = "Not responding"  # Slurm's own reason for a node it lost
_GRES_PAREN = re.compile(r"\([^)]*\)")
_ARRAY_RANGE = re.compile(r"([0-9]+)(?:-([0-9]+)(?::([0-9]+))?)?", re.ASCII)


def load_document(text: str, what: str) -> dict[str, Any]:
    """Parse one JSON document printed by a Slurm command; its ``errors`` must be empty."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SlurmOutputError(f"{what} did not print JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise SlurmOutputError(f"{what} printed {type(doc).__name__}, not an object")
    errors = doc.get("errors") or []
    if errors:
        raise SlurmOutputError(f"{what} reported errors: {errors!r}")
    return doc


def jobs_from_document(doc: Mapping[str, Any]) -> tuple[JobRecord, ...]:
    """Every job of a ``squeue --json`` (or ``scontrol show job --json``) document."""
    return tuple(record for raw in _list(doc, "jobs") for record in job_records(raw))


def nodes_from_document(
    doc: Mapping[str, Any], slurmd_timeout_s: int | None = None
) -> tuple[NodeRecord, ...]:
    """Every node of a ``sinfo --json`` document (``slurmd_timeout_s``: see ``node_record``)."""
    return tuple(node_record(raw, slurmd_timeout_s) for raw in _list(doc, "nodes"))


def job_records(raw: Mapping[str, Any]) -> Iterator[JobRecord]:
    """One record, or one per task for a pending array record standing for several tasks."""
    record = _job_record(raw)
    array_id = _number(raw.get("array_job_id"))
    tasks = str(raw.get("array_task_string") or "")
    if array_id and _number(raw.get("array_task_id")) is None and tasks:
        for task in expand_array_tasks(tasks):
            yield replace(record, job_id=f"{array_id}_{task}")
    else:
        yield record


def expand_array_tasks(text: str) -> list[int]:
    """Task ids of an ``array_task_string`` such as ``2-3``, ``1,4-8:2`` or ``0-99%4``."""
    tasks: list[int] = []
    for item in text.split("%")[0].split(","):
        match = _ARRAY_RANGE.fullmatch(item.strip())
        if match is None:
            raise SlurmOutputError(f"bad array task string {text!r}")
        low = int(match.group(1))
        high = int(match.group(2) or low)
        tasks.extend(range(low, high + 1, int(match.group(3) or 1)))
    return tasks


def node_record(raw: Mapping[str, Any], slurmd_timeout_s: int | None = None) -> NodeRecord:
    """One ``sinfo --json`` node entry. A node Slurm set down for not responding was last
    heard from at least ``SlurmdTimeout`` before it said so: that is its ``lost_at``."""
    base, flags = _state_and_flags(raw.get("state"), raw.get("state_flags"))
    reason = str(raw.get("reason") or "")
    state = node_state(base, flags)
    lost_at = _time(raw.get("reason_changed_at"))
    if state != NodeState.DOWN or reason != LOST_NODE_REASON or lost_at is None:
        lost_at = None
    else:
        lost_at -= timedelta(seconds=slurmd_timeout_s or 0)
    return NodeRecord(
        name=str(raw["name"]),
        state=state,
        reason=reason,
        gpus=gpus_from_gres(str(raw.get("gres") or "")),
        partitions=tuple(str(p) for p in raw.get("partitions") or ()),
        lost_at=lost_at,
    )


def node_state(base: str, flags: frozenset[str]) -> NodeState:
    """Slurm's base state plus flags as sinfo would summarise them (``drng``, ``drain``)."""
    if base in ("DOWN", "ERROR"):
        return NodeState.DOWN  # down outranks drain: the node runs nothing either way
    if "DRAIN" in flags or "FAIL" in flags:
        busy = base in _BUSY_NODE_STATES or "COMPLETING" in flags
        return NodeState.DRAINING if busy else NodeState.DRAINED
    if "COMPLETING" in flags:
        return NodeState.COMPLETING
    try:
        return NodeState(base)
    except ValueError:
        return NodeState.UNKNOWN  # FUTURE, a state newer than this code ...


def gpus_from_gres(gres: str) -> int:
    """GPUs in a gres string: ``gpu:4``, ``gpu:a100:8(S:0-1)``, ``gpu:a:2,gpu:b:2,mps:100``."""
    total = 0
    for item in _GRES_PAREN.sub("", gres).split(","):
        fields = item.strip().split(":")
        if fields[0] != "gpu":
            continue
        count = fields[-1] if len(fields) > 1 else "1"
        total += int(count) if count.isdigit() else 1  # "gpu:a100" alone means one
    return total


def decode_exit(value: object) -> tuple[int | None, int | None]:
    """(exit code, signal) from ``exit_code``: a raw wait status (22.05: 768 is exit 3, 9 is
    SIGKILL) or an object with ``return_code`` and ``signal`` (23.11+)."""
    if isinstance(value, Mapping) and "return_code" in value:
        code = _number(value.get("return_code"))
        signal = value.get("signal") or {}
        signal_id = _number(signal.get("id")) if isinstance(signal, Mapping) else None
        return code, signal_id or None
    status = _number(value)
    if status is None:
        return None, None
    if status & 0x7F:
        return None, status & 0x7F
    return (status >> 8) & 0xFF, None


def _job_record(raw: Mapping[str, Any]) -> JobRecord:
    base, flags = _state_and_flags(raw.get("job_state"), None)
    state = job_state(base, flags, bool(raw.get("nodes")))
    exit_code, signal = decode_exit(raw.get("exit_code"))
    finished = state == JobState.COMPLETING or state in TERMINAL_JOB_STATES
    started = state != JobState.PENDING
    return JobRecord(
        job_id=job_id_of(raw),
        name=str(raw.get("name") or ""),
        state=state,
        partition=str(raw.get("partition") or ""),
        nodes=expand_hostlist(str(raw.get("nodes") or "")),
        restart_count=_number(raw.get("restart_cnt")) or 0,
        exit_code=exit_code if finished else None,  # an earlier attempt's code otherwise
        signal=signal if finished else None,
        reason=_reason(raw),
        comment=str(raw.get("comment") or ""),
        excluded_nodes=expand_hostlist(str(raw.get("excluded_nodes") or "")),
        held=_is_held(raw, state, base, flags),
        submit_time=_time(raw.get("submit_time")),
        # Slurm puts estimates here for pending jobs and a limit-based end for running ones
        start_time=_time(raw.get("start_time")) if started else None,
        end_time=_time(raw.get("end_time")) if finished else None,
        eligible_time=_time(raw.get("eligible_time")) if not started else None,
    )


def job_id_of(raw: Mapping[str, Any]) -> str:
    """``"1234"``, or ``"1234_7"`` for task 7 of array 1234 (whose own job_id differs)."""
    array_id = _number(raw.get("array_job_id"))
    task_id = _number(raw.get("array_task_id"))
    if array_id and task_id is not None:
        return f"{array_id}_{task_id}"
    job_id = _number(raw.get("job_id"))
    if job_id is None:
        raise SlurmOutputError(f"job without a job_id: {dict(raw)!r:.200}")
    return str(job_id)


def job_state(base: str, flags: frozenset[str], has_nodes: bool) -> JobState:
    """Our JobState for Slurm's state string (or base state plus flags)."""
    for flag in _STATE_FLAG_PRIORITY:
        if flag in flags:
            base = flag
            break
    try:
        return JobState(base)
    except ValueError:
        pass
    if base in _STATE_ALIASES:
        return _STATE_ALIASES[base]
    logger.warning("unknown Slurm job state %r", base)
    return JobState.RUNNING if has_nodes else JobState.PENDING


def _is_held(raw: Mapping[str, Any], state: JobState, base: str, flags: frozenset[str]) -> bool:
    if state not in (JobState.PENDING, JobState.COMPLETING):
        return False  # a finished job keeps priority 0 and its hold reason
    if raw.get("hold") is True or _number(raw.get("priority")) == 0:
        return True
    return base in _HELD_STATES or bool(flags & _HELD_STATES) or _reason(raw) in _HELD_REASONS


def _reason(raw: Mapping[str, Any]) -> str:
    reason = str(raw.get("state_reason") or "")
    return "" if reason == "None" else reason


def _state_and_flags(state: object, flags: object) -> tuple[str, frozenset[str]]:
    """(base, flags) from ``"idle"`` + ``["DRAIN"]`` (22.05), ``["IDLE", "DRAIN"]`` (23.02+) or
    scontrol's ``"IDLE+DRAIN"``."""
    items = [str(s).upper() for s in state] if isinstance(state, list) else str(state).split("+")
    items = [item.strip().upper() for item in items if item.strip()]
    extra = {str(f).upper() for f in flags} if isinstance(flags, list) else set()
    base = items[0] if items else "UNKNOWN"
    return base, frozenset(items[1:]) | extra


def _number(value: object) -> int | None:
    """An int from ``7`` or ``{"set": true, "infinite": false, "number": 7}``; None if unset."""
    if isinstance(value, Mapping):
        if not value.get("set", True) or value.get("infinite"):
            return None
        value = value.get("number")
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return int(value)
    if isinstance(value, str) and value.isdigit():
        return int(value)
    raise SlurmOutputError(f"expected a number, got {value!r}")


def _time(value: object) -> datetime | None:
    seconds = _number(value)
    return datetime.fromtimestamp(seconds, UTC) if seconds else None


def _list(doc: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    items = doc.get(key)
    if not isinstance(items, list):
        raise SlurmOutputError(f"document has no {key!r} list")
    return items
