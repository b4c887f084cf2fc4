"""The workload each job's attempts belong to (by the comment's tag or the job's name, an array
task's under its array's), created when new; and each workload's state, taken from its newest
attempt (an array's from its tasks)."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.db.models import F, Window
from django.db.models.functions import RowNumber

from fleet.core.scheduler import JobRecord, array_task_of

from ..models import Attempt, Cluster, Workload, WorkloadState
from .common import _max_length


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


def _comment_document(comment: str) -> dict[str, Any]:
    try:
        document = json.loads(comment) if comment.lstrip().startswith("{") else {}
    except (ValueError, RecursionError):
        return {}
    return document if isinstance(document, dict) else {}


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
