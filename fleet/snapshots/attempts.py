"""Recording a chunk of a snapshot's jobs as attempts: new restarts add attempts (closing the
previous one as requeued), running ones are brought up to date, ended ones are history; each
change is audited in one append to the trail."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from fleet import audit
from fleet.core.scheduler import JobRecord

from ..models import Attempt, AuditEntry, Cluster
from .common import _max_length, _save_existing
from .resume import _set_time_to_resume
from .workloads import _refresh_workload_states, _workloads_for, workload_key

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


def _update_attempt(
    attempt: Attempt, job: JobRecord, seen_at: datetime, starting: list[Attempt]
) -> dict[str, Any]:
    """Copy the job onto its attempt; what changed (empty when nothing did)."""
    unchanged = _copied_fields(attempt)
    starts = _copy_job(attempt, job, seen_at)
    # Most running attempts are as they were: compared as values first, and only a changed one
    # pays for its audit payload (``before`` is rebuilt from the values it had).
    if _copied_fields(attempt) == unchanged:
        return {}
    before = _payload_of(dict(zip(COPIED, unchanged, strict=True)), attempt)
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
    return _payload_of({}, attempt)


def _payload_of(values: dict[str, Any], attempt: Attempt) -> dict[str, Any]:
    """The audited fields as JSON values: ``values`` where given, else the attempt's own."""
    fields = {f: values[f] if f in values else getattr(attempt, f) for f in ATTEMPT_FIELDS}
    payload: dict[str, Any] = json.loads(json.dumps(fields, default=_isoformat))
    return payload


# The fields ``_copy_job`` writes: every audited field but the console's own time to resume.
COPIED = tuple(f for f in ATTEMPT_FIELDS if f != "time_to_resume_s")


def _copied_fields(attempt: Attempt) -> tuple[Any, ...]:
    # Lists copied, so a later change to the attempt's own list cannot alter what was kept.
    return tuple(
        list(value) if isinstance(value, list) else value
        for value in (getattr(attempt, f) for f in COPIED)
    )


def _isoformat(value: object) -> str:
    return value.isoformat() if isinstance(value, datetime) else str(value)
