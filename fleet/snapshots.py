"""Recording a scheduler snapshot: nodes, workloads and attempts brought up to date in bulk.

Everything in a snapshot is hostile input (a job's name and comment are the user's): each job
and node is checked on its own, and one that does not fit is rejected, named in the result and
in the audit trail, while the rest is recorded. Jobs are written in chunks, each its own short
transaction with a few queries and one append to the audit trail, so a large snapshot never
holds the trail's head (every writer's lock) for long.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from django.db import connection, transaction
from django.db.backends.base.operations import BaseDatabaseOperations
from django.db.models import F, Q, Window
from django.db.models.functions import RowNumber

from fleet import audit, events
from fleet.core.scheduler import (
    ClusterSnapshot,
    JobRecord,
    NodeRecord,
    array_task_of,
)

from .models import Attempt, AuditEntry, Cluster, Node, Workload, WorkloadState

# Jobs per transaction: a few hundred keep each one well under a second.
CHUNK = 400
# A comment is the user's; the loop reads a couple of keys from it, never a deep document.
COMMENT_MAX_CHARS = 10_000
COMMENT_MAX_DEPTH = 8
# A lost node's attempts are looked for this long after it was lost (see _note_lost_nodes).
LOST_NODE_RECENT = timedelta(minutes=10)
# Rejections listed in the audit entry (the count is always there).
AUDITED_REJECTIONS = 100

# What an attempt's audit entries compare and record: a change to any of these is audited.
ATTEMPT_FIELDS = (
    "time_to_resume_s",
    "name",
    "partition",
    "state",
    "nodes",
    "excluded_nodes",
    "submitted_at",
    "started_at",
    "ended_at",
    "exit_code",
    "signal",
    "reason",
    "comment",
)


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


@dataclass(frozen=True)
class SnapshotResult:
    """What recording one scheduler snapshot changed, and what it refused."""

    new_attempts: int = 0
    changed_attempts: int = 0
    changed_nodes: int = 0
    rejected: tuple[Rejection, ...] = ()


def workload_key(job: JobRecord) -> str:
    """Attempts belong to the workload named by the comment's ``workload`` tag (JSON), or else
    by the job name, which is how sites resubmit the same run. Each array task is a run of its
    own, ``"<name>[<task>]"``: its siblings share the name, never the budget."""
    task = array_task_of(job.job_id)
    if task is None:
        return _run_key(job)
    return _with_suffix(_run_key(job), f"[{task[1]}]")


def array_key(job: JobRecord) -> str | None:
    """The key of the row standing for the array an array task belongs to (``"<name>[]"``)."""
    return None if array_task_of(job.job_id) is None else _with_suffix(_run_key(job), "[]")


def _run_key(job: JobRecord) -> str:
    tag = _comment_document(job.comment).get("workload")
    if tag:
        return str(tag)
    task = array_task_of(job.job_id)
    return job.name or f"job-{task[0] if task else job.job_id}"


def _with_suffix(key: str, suffix: str) -> str:
    return key[: _max_length(Workload, "key") - len(suffix)] + suffix


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


def _note_lost_nodes(cluster: Cluster, nodes: Sequence[NodeRecord], seen_at: datetime) -> None:
    """A node the scheduler lost ended the attempts running on it when it died, not when
    Slurm said so: their failure is noted from then (time to resume starts there). Only
    recent losses: a node down for days is not looked up again at every snapshot."""
    lost: dict[str, datetime] = {}
    for node in nodes:
        if node.lost_at is not None and seen_at - node.lost_at <= LOST_NODE_RECENT:
            lost[node.name] = node.lost_at
    if not lost:
        return
    overlapping = Attempt.objects.filter(
        cluster=cluster, started_at__lte=max(lost.values())
    ).filter(Q(ended_at__isnull=True) | Q(ended_at__gte=min(lost.values())))
    for pk, names, started, ended in overlapping.values_list(
        "pk", "nodes", "started_at", "ended_at"
    ):
        # Within the attempt's run: a node lost before it began or after it ended did not end it.
        window = (started or seen_at, ended or seen_at)  # started_at__lte: never None here
        died = [lost[n] for n in names if n in lost and window[0] <= lost[n] <= window[1]]
        if died:
            # As detection's ``note_failure``: the earliest wins, nothing else is rewritten.
            Attempt.objects.filter(pk=pk).filter(
                Q(failed_at__isnull=True) | Q(failed_at__gt=min(died))
            ).update(failed_at=min(died))


def _chunks(items: Sequence[JobRecord], size: int) -> Iterator[Sequence[JobRecord]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


# --- checking each job and node on its own ------------------------------------------------

_RANGES = BaseDatabaseOperations.integer_field_ranges  # the portable (32-bit) column ranges


def _max_length(model: type[Attempt] | type[Node] | type[Workload], field: str) -> int:
    return int(getattr(model._meta.get_field(field), "max_length", 0) or 0)


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


def _comment_document(comment: str) -> dict[str, Any]:
    try:
        document = json.loads(comment) if comment.lstrip().startswith("{") else {}
    except (ValueError, RecursionError):
        return {}
    return document if isinstance(document, dict) else {}


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


# --- writing ------------------------------------------------------------------------------


def _record_jobs(
    actor: str, cluster: Cluster, jobs: Sequence[JobRecord], seen_at: datetime
) -> tuple[int, int, set[int]]:
    """One chunk of jobs in one transaction: a handful of queries however many jobs."""
    # Locked, so an attempt another writer ends meanwhile is not rewritten (attempts are history).
    known: dict[str, list[Attempt]] = defaultdict(list)
    for attempt in Attempt.objects.select_for_update().filter(
        cluster=cluster, job_id__in=[job.job_id for job in jobs]
    ):
        known[attempt.job_id].append(attempt)
    updated: list[tuple[Attempt, dict[str, Any]]] = []  # with the changes its entry records
    closed: list[tuple[Attempt, dict[str, Any]]] = []
    created: list[tuple[Attempt, JobRecord]] = []
    starting: list[Attempt] = []  # attempts that start running now: time to resume is due
    for job in jobs:
        attempts = known[job.job_id]
        current = next((a for a in attempts if a.attempt_index == job.restart_count), None)
        if current is not None:
            if current.ended_at is None:  # an ended attempt is history: left alone
                changes = _update_attempt(current, job, seen_at, starting)
                if changes:
                    updated.append((current, changes))
            continue
        if any(a.attempt_index > job.restart_count for a in attempts):
            continue  # a stale report: it cannot reopen or add to what came after
        for earlier in attempts:
            if earlier.ended_at is None:
                # The console's own state: Slurm never reports it; the higher restart count
                # implies it.
                earlier.state, earlier.ended_at = "REQUEUED", seen_at
                closed.append((earlier, {"state": "REQUEUED", "requeued_as": job.restart_count}))
        attempt = Attempt(cluster=cluster, job_id=job.job_id, first_seen_at=seen_at)
        attempt.attempt_index = job.restart_count
        if _copy_job(attempt, job, seen_at):
            starting.append(attempt)
        created.append((attempt, job))

    workloads = _workloads_for(cluster, [job for _, job in created], seen_at)
    for attempt, job in created:
        attempt.workload = workloads[workload_key(job)]
    _set_time_to_resume(starting, [a for a, _ in [*updated, *closed] if a.ended_at])
    for attempt, changes in updated:
        if attempt.time_to_resume_s is not None and "time_to_resume_s" not in changes:
            changes["time_to_resume_s"] = {"from": None, "to": attempt.time_to_resume_s}
    _save_existing(Attempt, [a for a, _ in [*updated, *closed]], ATTEMPT_FIELDS)
    if created:
        Attempt.objects.bulk_create([a for a, _ in created], ignore_conflicts=True)
        _fill_in_pks(cluster, [a for a, _ in created])
    touched = _refresh_workload_states([a for a, _ in [*updated, *created]], seen_at)
    entries = [_observed(actor, cluster, attempt) for attempt, _ in created]
    entries += [_changed(actor, cluster, attempt, changes) for attempt, changes in updated]
    entries += [
        _changed(actor, cluster, attempt, payload, ended=True) for attempt, payload in closed
    ]
    # Last: the trail's head stays locked from here to the commit, so the lock is short.
    audit.append(entries)
    return len(created), len(updated), touched


def _save_existing(
    model: type[Attempt] | type[Node], rows: Sequence[Any], fields: Sequence[str]
) -> None:
    """Rows that exist, written in one INSERT .. ON DUPLICATE KEY UPDATE (ON CONFLICT on
    SQLite) per chunk: ``bulk_update`` builds a CASE per row and field, which for a few
    thousand rows costs tens of seconds of Python."""
    if not rows:
        return
    target = ["id"] if connection.features.supports_update_conflicts_with_target else None
    model.objects.bulk_create(
        rows, update_conflicts=True, update_fields=list(fields), unique_fields=target
    )


def _update_attempt(
    attempt: Attempt, job: JobRecord, seen_at: datetime, starting: list[Attempt]
) -> dict[str, Any]:
    """Copy the job onto its attempt; what changed (empty when nothing did)."""
    before = _attempt_payload(attempt)
    starts = _copy_job(attempt, job, seen_at)
    after = _attempt_payload(attempt)
    if before == after:
        return {}
    if starts:
        starting.append(attempt)
    return {k: {"from": before[k], "to": after[k]} for k in after if before[k] != after[k]}


def _copy_job(attempt: Attempt, job: JobRecord, seen_at: datetime) -> bool:
    """Copy what the scheduler reported; True when the attempt starts running now."""
    starts_running = attempt.state != "RUNNING" and job.state == "RUNNING"
    attempt.name = job.name
    attempt.partition = job.partition
    attempt.state = job.state.value
    attempt.nodes = list(job.nodes)
    attempt.excluded_nodes = list(job.excluded_nodes)
    attempt.submitted_at = job.submit_time
    attempt.started_at = job.start_time
    attempt.exit_code = job.exit_code
    attempt.signal = job.signal
    attempt.reason = job.reason[: _max_length(Attempt, "reason")]
    attempt.comment = job.comment
    if job.is_terminal:
        # No end time reported: when we saw it ended is the best bound we have.
        attempt.ended_at = job.end_time or seen_at
    # Once, when the attempt starts running: not a query per running attempt per snapshot.
    return starts_running and attempt.time_to_resume_s is None and job.start_time is not None


def _workloads_for(
    cluster: Cluster, jobs: Sequence[JobRecord], seen_at: datetime
) -> dict[str, Workload]:
    """The workload of each job by key, created when new; an array task's under its array's."""
    arrays = _get_or_create_workloads(
        cluster, {key: {"is_array": True} for job in jobs if (key := array_key(job))}, seen_at
    )
    wanted: dict[str, dict[str, Any]] = {}
    for job in jobs:  # in the order reported
        parent = array_key(job)
        wanted.setdefault(workload_key(job), {"array": arrays[parent]} if parent else {})
    return _get_or_create_workloads(cluster, wanted, seen_at)


def _get_or_create_workloads(
    cluster: Cluster, wanted: dict[str, dict[str, Any]], seen_at: datetime
) -> dict[str, Workload]:
    """Workloads by key; those missing are created with the fields given for them."""
    if not wanted:
        return {}
    keys = list(wanted)
    found = {w.key: w for w in Workload.objects.filter(cluster=cluster, key__in=keys)}
    missing = [key for key in keys if key not in found]
    if missing:
        Workload.objects.bulk_create(
            [
                Workload(
                    cluster=cluster, key=key, created_at=seen_at, updated_at=seen_at, **wanted[key]
                )
                for key in missing
            ],
            ignore_conflicts=True,
        )
        found |= {w.key: w for w in Workload.objects.filter(cluster=cluster, key__in=missing)}
    # A key the database's collation equates with one stored already ("LLaMA", "llama"):
    # that workload, as a lookup by key would find it.
    for key in keys:
        if key not in found:
            found[key] = Workload.objects.get(cluster=cluster, key=key)
    return found


def _fill_in_pks(cluster: Cluster, attempts: Sequence[Attempt]) -> None:
    """Not every database returns the ids of a bulk insert (MySQL does not)."""
    if all(a.pk is not None for a in attempts):
        return
    ids = {
        (job_id, index): pk
        for pk, job_id, index in Attempt.objects.filter(
            cluster=cluster, job_id__in=[a.job_id for a in attempts]
        ).values_list("pk", "job_id", "attempt_index")
    }
    for attempt in attempts:
        attempt.pk = ids[(attempt.job_id, attempt.attempt_index)]


def _set_time_to_resume(starting: Sequence[Attempt], ended_now: Sequence[Attempt]) -> None:
    """From the failure of each workload's previous attempt (its first evidence of failure, or
    its end) to the attempt running; none for a first attempt or after a clean end.
    ``ended_now`` are this chunk's attempts that ended and are not yet saved."""
    workload_ids = {a.workload_id for a in starting if a.workload_id is not None}
    if not workload_ids:
        return
    latest_failures = (
        Attempt.objects.filter(workload_id__in=workload_ids, ended_at__isnull=False)
        .exclude(state="COMPLETED")
        .annotate(
            rank=Window(RowNumber(), partition_by=F("workload_id"), order_by=F("ended_at").desc())
        )
        .filter(rank=1)
    )
    previous: dict[int, Attempt] = {a.workload_id: a for a in latest_failures}
    for attempt in ended_now:
        stored = previous.get(attempt.workload_id)
        if attempt.state != "COMPLETED" and (stored is None or _ended(stored) < _ended(attempt)):
            previous[attempt.workload_id] = attempt
    for attempt in starting:
        failed = previous.get(attempt.workload_id)
        started = attempt.started_at
        # An attempt that ended after this one started is not the failure it recovers from.
        if failed is None or failed.ended_at is None or started is None:
            continue
        if failed.ended_at > started:
            continue
        # Detection's first evidence often precedes the scheduler's end by minutes (a hang).
        failed_at = min(filter(None, (failed.failed_at, failed.ended_at)))
        attempt.time_to_resume_s = max(0.0, (started - failed_at).total_seconds())


def _ended(attempt: Attempt) -> datetime:
    return attempt.ended_at or datetime.min.replace(tzinfo=UTC)


# Any other state (failed, timed out, node fail, preempted, requeued) is an interruption.
_WORKLOAD_STATE_OF_JOB = {
    "PENDING": WorkloadState.PENDING,
    "RUNNING": WorkloadState.RUNNING,
    "COMPLETING": WorkloadState.RUNNING,
    "COMPLETED": WorkloadState.COMPLETED,
    "CANCELLED": WorkloadState.STOPPED,
}


def _refresh_workload_states(changed: Sequence[Attempt], seen_at: datetime) -> set[int]:
    """Each workload takes the state of its newest attempt, when that one changed now."""
    changed_ids = {a.pk for a in changed}
    workload_ids = {a.workload_id for a in changed}
    if not workload_ids:
        return set()
    newest = (
        Attempt.objects.filter(workload_id__in=workload_ids)
        .annotate(
            rank=Window(
                RowNumber(),
                partition_by=F("workload_id"),
                # Attempts first seen together: the one recorded first, as it always was.
                order_by=(F("first_seen_at").desc(), F("attempt_index").desc(), F("pk").asc()),
            )
        )
        .filter(rank=1)
        .values_list("workload_id", "pk", "state", "first_seen_at")
    )
    stopped: dict[int, datetime] = {
        pk: at
        for pk, at in Workload.objects.filter(
            pk__in=workload_ids, stopped_at__isnull=False
        ).values_list("pk", "stopped_at")
        if at is not None
    }
    by_state: dict[str, list[int]] = defaultdict(list)
    for workload_id, pk, state, first_seen_at in newest:
        if pk not in changed_ids:
            continue
        if workload_id in stopped and first_seen_at <= stopped[workload_id]:
            continue  # stopped on advice: the stopped run's attempts do not reopen it
        by_state[_WORKLOAD_STATE_OF_JOB.get(state, WorkloadState.INTERRUPTED)].append(workload_id)
    for state, ids in by_state.items():
        # A resubmission after a stop on advice starts afresh: the stop's reason goes.
        Workload.objects.filter(pk__in=ids).update(
            state=state, updated_at=seen_at, stopped_at=None, stopped_reason=""
        )
    return workload_ids | _refresh_array_states(workload_ids, seen_at)


# An array is what its busiest task is: running while any runs, interrupted while any is.
_ARRAY_STATE_ORDER = (
    WorkloadState.RUNNING,
    WorkloadState.PENDING,
    WorkloadState.INTERRUPTED,
    WorkloadState.STOPPED,
    WorkloadState.COMPLETED,
)


def _refresh_array_states(task_ids: set[int], seen_at: datetime) -> set[int]:
    """The arrays whose tasks changed take their state from their tasks; their ids."""
    array_ids = set(
        Workload.objects.filter(pk__in=task_ids, array__isnull=False).values_list(
            "array_id", flat=True
        )
    )
    if not array_ids:
        return set()
    states: dict[int, set[str]] = defaultdict(set)
    for array_id, state in Workload.objects.filter(array_id__in=array_ids).values_list(
        "array_id", "state"
    ):
        states[array_id].add(state)
    by_state: dict[str, list[int]] = defaultdict(list)
    for array_id, seen in states.items():
        by_state[next(s for s in _ARRAY_STATE_ORDER if s in seen)].append(array_id)
    for state, ids in by_state.items():
        Workload.objects.filter(pk__in=ids).update(state=state, updated_at=seen_at)
    return array_ids


def _observed(actor: str, cluster: Cluster, attempt: Attempt) -> AuditEntry:
    return _entry(actor, "attempt.observed", cluster, attempt, _attempt_payload(attempt))


def _changed(
    actor: str, cluster: Cluster, attempt: Attempt, payload: dict[str, Any], ended: bool = False
) -> AuditEntry:
    verb = "attempt.ended" if ended or attempt.ended_at else "attempt.changed"
    return _entry(actor, verb, cluster, attempt, payload)


def _entry(
    actor: str, verb: str, cluster: Cluster, attempt: Attempt, payload: dict[str, Any]
) -> AuditEntry:
    entry = audit.entry(actor, verb, attempt, cluster=cluster, attempt=attempt, payload=payload)
    entry.workload_id = attempt.workload_id  # by id: loading each workload costs a query
    return entry


def _attempt_payload(attempt: Attempt) -> dict[str, Any]:
    payload: dict[str, Any] = json.loads(
        json.dumps({f: getattr(attempt, f) for f in ATTEMPT_FIELDS}, default=_isoformat)
    )
    return payload


def _isoformat(value: object) -> str:
    return value.isoformat() if isinstance(value, datetime) else str(value)


def _record_nodes(
    actor: str, cluster: Cluster, reported: Sequence[NodeRecord], seen_at: datetime
) -> tuple[int, list[str]]:
    """Nodes written in bulk; the count changed, and the names refused as another's."""
    known = {n.name: n for n in Node.objects.filter(cluster=cluster)}
    new: list[tuple[Node, str]] = []
    changed: list[tuple[Node, str]] = []
    for record in reported:
        node = known.get(record.name) or Node(cluster=cluster, name=record.name)
        before = (node.state, node.reason, node.gpus, node.partitions)
        after = (record.state.value, record.reason[:255], record.gpus, list(record.partitions))
        # Unchanged nodes are skipped: a snapshot every few seconds must not flood the trail.
        if node.pk is not None and before == after:
            continue
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
