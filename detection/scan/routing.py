"""Routing lines to the attempts they belong to: a job's lines to the attempt that wrote them,
a node's system-log lines to the attempts that ran on it."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import datetime

from django.db.models import Q

from detection.core.telemetry import LogLine
from fleet.models import Attempt, Cluster

from .common import LATE_LINES, NODE_LINE_SLACK, WHOLE, Shard


def _route_lines(
    cluster: Cluster, lines: Sequence[LogLine], now: datetime, part: Shard = WHOLE
) -> tuple[list[tuple[Attempt, list[LogLine]]], dict[str, list[LogLine]]]:
    """Each job line goes to the attempt of its job that produced it: the last one to start
    at or before the line's time (lines written after an attempt's end, before the next one
    starts, are its late lines). A node's system-log line goes to the attempts that ran on that
    node when it was written. Lines of jobs not reported yet wait in PendingLines. Of all
    that, a shard keeps what goes to its own jobs, and holds its own jobs' waiting lines."""
    job_ids = {line.job_id for line in lines if line.job_id}
    owned = {job_id for job_id in job_ids if part.owns(job_id)}
    attempts_of = _attempts_of_jobs(cluster, owned)
    # Another shard's job's lines are that shard's; only a line of a job nobody has reported
    # yet goes by its host, so of the others' jobs only those with such lines are looked up.
    others = {
        line.job_id for line in lines if line.host and line.job_id and line.job_id not in owned
    }
    others_known = _known_jobs(cluster, others)
    on_host = _attempts_by_host(cluster, now) if any(line.host for line in lines) else {}
    routed: dict[int, list[LogLine]] = defaultdict(list)
    attempts: dict[int, Attempt] = {}
    orphans: dict[str, list[LogLine]] = defaultdict(list)
    for line in lines:
        job_id = line.job_id
        if job_id in attempts_of:
            attempt = attempt_at(attempts_of[job_id], line.at)
            attempts[attempt.pk] = attempt
            routed[attempt.pk].append(line)
            continue
        if job_id and (job_id in others_known or not line.host):
            if job_id in owned:
                orphans[job_id].append(line)
            continue
        targets = _ran_on_host_at(on_host.get(line.host or "", []), line.at)
        if not targets and job_id in owned:
            orphans[job_id].append(line)
        for attempt in targets:
            if part.owns(attempt.job_id):
                attempts[attempt.pk] = attempt
                routed[attempt.pk].append(line)
    return [(attempts[pk], routed[pk]) for pk in routed], orphans


def attempt_at(attempts: Sequence[Attempt], at: datetime) -> Attempt:
    """Of one job's attempts (by attempt index), the one running at ``at``: the last to start
    at or before it. Not "the latest": when Slurm requeues a job itself, its new attempt may be
    recorded (pending) before the old one's last lines are read. Evidence older than every
    start (clocks apart) belongs to the first attempt."""
    chosen = attempts[0]
    for attempt in attempts:
        # Slurm reports start times in whole seconds, cut down: a line of that second counts.
        if attempt.started_at is not None and attempt.started_at <= at:
            chosen = attempt
    return chosen


def _attempts_of_jobs(cluster: Cluster, job_ids: Iterable[str]) -> dict[str, list[Attempt]]:
    found: dict[str, list[Attempt]] = defaultdict(list)
    for attempt in Attempt.objects.filter(cluster=cluster, job_id__in=list(job_ids)).order_by(
        "job_id", "attempt_index"
    ):
        found[attempt.job_id].append(attempt)
    return dict(found)


def _known_jobs(cluster: Cluster, job_ids: set[str]) -> set[str]:
    if not job_ids:
        return set()
    known = Attempt.objects.filter(cluster=cluster, job_id__in=list(job_ids))
    return set(known.values_list("job_id", flat=True).distinct())


def _ran_on_host_at(attempts: Sequence[Attempt], at: datetime) -> list[Attempt]:
    """The attempts a node's line belongs to: those running on the node when it was written,
    else one that had just ended (a line stamped when it was read may trail the end a little).
    A kernel error minutes after an attempt ended is the next job's, not evidence against it."""
    running = [
        a
        for a in attempts
        if (a.started_at or a.first_seen_at) - NODE_LINE_SLACK <= at
        and (a.ended_at is None or at <= a.ended_at)
    ]
    if running:
        return running
    return [a for a in attempts if a.ended_at and a.ended_at < at <= a.ended_at + NODE_LINE_SLACK]


def _attempts_by_host(cluster: Cluster, now: datetime) -> dict[str, list[Attempt]]:
    recent = Attempt.objects.filter(cluster=cluster).filter(
        Q(ended_at__isnull=True) | Q(ended_at__gte=now - LATE_LINES)
    )
    by_host: dict[str, list[Attempt]] = defaultdict(list)
    for attempt in recent:
        for host in attempt.nodes:
            by_host[host].append(attempt)
    return by_host
