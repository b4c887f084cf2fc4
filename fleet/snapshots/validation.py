"""Checking each job and node of a snapshot on its own: one that does not fit the columns (or
whose comment is too large or too deep a document) is rejected, with the field and the
problem, and the rest is recorded."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from django.db.backends.base.operations import BaseDatabaseOperations

from fleet.core.scheduler import JobRecord, NodeRecord

from ..models import Attempt, Node, Workload
from .common import _max_length

# A comment is the user's; the loop reads a couple of keys from it, never a deep document.
COMMENT_MAX_CHARS = 10_000
COMMENT_MAX_DEPTH = 8


@dataclass(frozen=True)
class Rejection:
    """A job or node of a snapshot that was not recorded, and why."""

    kind: Literal["job", "node"]
    id: str  # the job id or node name as reported (cut short)
    index: int  # its position in the snapshot's list
    field: str
    problem: str

    def __post_init__(self) -> None:
        # Shown back and audited: cut short, and text that is not Unicode made printable.
        shown = self.id[:64].encode("utf-8", "backslashreplace").decode()
        object.__setattr__(self, "id", shown)

    def as_json(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in ("kind", "id", "index", "field", "problem")}


# --- checking each job and node on its own ------------------------------------------------

_RANGES = BaseDatabaseOperations.integer_field_ranges  # the portable (32-bit) column ranges


def _valid_jobs(
    jobs: Iterable[JobRecord], positions: Sequence[int]
) -> tuple[list[JobRecord], list[Rejection]]:
    valid: list[JobRecord] = []
    rejected: list[Rejection] = []
    first_at: dict[str, int] = {}
    for index, job in zip(positions, jobs, strict=True):
        problem = _problem_with_job(job)
        if problem is None and job.job_id in first_at:
            problem = ("job_id", f"reported twice (first at index {first_at[job.job_id]})")
        if problem is not None:
            rejected.append(Rejection("job", job.job_id, index, *problem))
            continue
        first_at[job.job_id] = index
        valid.append(job)
    return valid, rejected


def _problem_with_job(job: JobRecord) -> tuple[str, str] | None:
    texts = {
        "job_id": (job.job_id, _max_length(Attempt, "job_id")),
        "name": (job.name, _max_length(Attempt, "name")),
        "partition": (job.partition, _max_length(Attempt, "partition")),
        "reason": (job.reason, 0),  # cut to the column, not refused: it is Slurm's own text
        "comment": (job.comment, COMMENT_MAX_CHARS),
    }
    for field, (value, limit) in texts.items():
        problem = _text_problem(value, limit)
        if problem:
            return field, problem
    if not job.job_id:
        return "job_id", "is empty"
    for field, names in (("nodes", job.nodes), ("excluded_nodes", job.excluded_nodes)):
        for name in names:
            problem = _text_problem(name, _max_length(Node, "name"))
            if problem:
                return field, f"a node name {problem}"
    integers = {
        "restart_count": (job.restart_count, "PositiveIntegerField"),
        "exit_code": (job.exit_code, "IntegerField"),
        "signal": (job.signal, "IntegerField"),
    }
    for field, (number, column) in integers.items():
        low, high = _RANGES[column]
        if number is not None and not low <= number <= high:
            return field, f"is out of range ({low} to {high})"
    return _comment_problem(job)


def _text_problem(value: str, limit: int) -> str | None:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "is not valid Unicode text"
    if limit and len(value) > limit:
        return f"is longer than {limit} characters"
    return None


def _comment_problem(job: JobRecord) -> tuple[str, str] | None:
    if not job.comment.lstrip().startswith(("{", "[")):
        return None  # free text: the loop looks for nothing in it
    try:
        document = json.loads(job.comment)
    except RecursionError:
        return "comment", f"is nested deeper than {COMMENT_MAX_DEPTH} levels"
    except ValueError:
        return None  # not JSON after all: free text
    if _depth(document) > COMMENT_MAX_DEPTH:
        return "comment", f"is nested deeper than {COMMENT_MAX_DEPTH} levels"
    tag = document.get("workload") if isinstance(document, dict) else None
    if tag is not None and not isinstance(tag, str | int | float):
        return "comment", "its workload tag is not a string"
    if tag is not None and len(str(tag)) > _max_length(Workload, "key"):
        return (
            "comment",
            f"its workload tag is longer than {_max_length(Workload, 'key')} characters",
        )
    return None


def _depth(document: object) -> int:
    deepest, stack = 0, [(document, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict | list):
            deepest = max(deepest, depth)
            children = value.values() if isinstance(value, dict) else value
            stack.extend((child, depth + 1) for child in children)
    return deepest


def _valid_nodes(
    nodes: Iterable[NodeRecord], positions: Sequence[int]
) -> tuple[list[NodeRecord], list[Rejection]]:
    valid: list[NodeRecord] = []
    rejected: list[Rejection] = []
    first_at: dict[str, int] = {}
    low, high = _RANGES["PositiveIntegerField"]
    for index, node in zip(positions, nodes, strict=True):
        problem: tuple[str, str] | None = None
        name_problem = _text_problem(node.name, _max_length(Node, "name"))
        if not node.name or name_problem:
            problem = ("name", name_problem or "is empty")
        elif _text_problem(node.reason, 0):
            problem = ("reason", "is not valid Unicode text")
        elif any(_text_problem(p, 0) for p in node.partitions):
            problem = ("partitions", "a partition name is not valid Unicode text")
        elif not low <= node.gpus <= high:
            problem = ("gpus", f"is out of range ({low} to {high})")
        elif node.name in first_at:
            problem = ("name", f"reported twice (first at index {first_at[node.name]})")
        if problem is not None:
            rejected.append(Rejection("node", node.name, index, *problem))
            continue
        first_at[node.name] = index
        valid.append(node)
    return valid, rejected
