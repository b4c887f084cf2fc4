"""``check_cluster``: read each telemetry source once, the scheduler once, the controllers'
heartbeats and what the loop made of each job, and hand it to ``core.checkup`` for verdicts.

Nothing is written: cursors stay where the detection loop left them, and no token is issued.
The scheduler is reached as the cluster's scheduler document says (locally, or over SSH with
the key and known_hosts it names under SECRETS_DIR).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from detection.models import Anomaly, SourceCursor
from detection.services import cluster_sources
from detection.sources import SourceUnavailable
from fleet.core.outbound import SecretStore, SecretUnavailable
from fleet.core.registration import ssh_host_problem
from fleet.models import Attempt, Cluster
from fleet.outbound import allowed_hosts, secret_store
from remediation.controller import (
    LocalTransport,
    SlurmClient,
    SlurmCommandError,
    SlurmOutputError,
    SshTransport,
    Transport,
    TransportError,
)
from remediation.core import checkup
from remediation.core.checkup import Finding, Observations

from . import reporters
from .models import Advice

DEFAULT_WINDOW = timedelta(minutes=5)


def check_cluster(
    cluster: Cluster,
    now: datetime,
    *,
    jobs: Iterable[str] = (),
    window: timedelta = DEFAULT_WINDOW,
) -> tuple[Finding, ...]:
    scheduler = read_scheduler(cluster)
    live = ("RUNNING", "PENDING")
    recorded = Attempt.objects.filter(cluster=cluster, state__in=live).values_list("job_id")
    wanted = tuple(jobs) or (
        *(j.job_id for j in scheduler.jobs if j.state in live),
        *(job_id for (job_id,) in recorded[: checkup.MAX_JOBS]),
    )
    seen = Observations(
        cluster=cluster.name,
        mode=cluster.mode,
        now=now,
        window=window,
        scheduler=scheduler,
        sources=read_sources(cluster, now, window),
        heartbeats=heartbeats(cluster, now),
        console_jobs=console_jobs(cluster, wanted),
        jobs_asked=tuple(jobs),
    )
    return checkup.report(seen)


def scheduler_transport(
    document: dict[str, Any], secrets: SecretStore, allowed: Sequence[str] = ()
) -> Transport:
    """How the console reaches the scheduler the document names. Its SSH host is checked
    against ``allowed`` (OUTBOUND_ALLOWED_HOSTS) before every connection, not only when the
    document was saved: the site may have narrowed the list since."""
    env = {"SLURM_CONF": document["slurm_conf"]} if document.get("slurm_conf") else {}
    if document.get("transport", "local") != "ssh":
        return LocalTransport(env)
    ssh = document["ssh"]
    if problem := ssh_host_problem(ssh["host"], allowed):
        raise TransportError(f"{ssh['user']}@{ssh['host']}", problem)
    return SshTransport(
        f"{ssh['user']}@{ssh['host']}",
        identity_file=secrets.path(ssh["key"]),
        known_hosts_file=secrets.path(ssh["known_hosts"]),
        port=int(ssh.get("port", 22)),
        remote_env=env,
    )


def read_scheduler(cluster: Cluster) -> checkup.SchedulerRead:
    if cluster.backend != "slurm":
        return checkup.SchedulerRead(target="run_demo", simulated=True)
    target = "the scheduler"
    conf = cluster.scheduler.get("slurm_conf")
    local = cluster.scheduler.get("transport", "local") == "local"
    if local and conf and not Path(conf).is_file():
        # Said at once: Slurm's commands would first spend half a minute looking for it in DNS.
        return checkup.SchedulerRead(target="local", error=f"slurm_conf {conf} is not a file here")
    try:
        transport = scheduler_transport(cluster.scheduler, secret_store(), allowed_hosts())
        target = transport.target
        slurm = SlurmClient(transport)
        snapshot = slurm.snapshot()
        version = ".".join(map(str, slurm.version))
    except (SecretUnavailable, TransportError, SlurmCommandError, SlurmOutputError) as exc:
        return checkup.SchedulerRead(target=target, error=str(exc))
    found = tuple(checkup.JobSeen(j.job_id, j.state.value, tuple(j.nodes)) for j in snapshot.jobs)
    return checkup.SchedulerRead(target, found, len(snapshot.nodes), version)


def read_sources(
    cluster: Cluster, now: datetime, window: timedelta
) -> tuple[checkup.SourceRead, ...]:
    sources = cluster_sources(cluster)
    loop = {
        c.source: c.last_error for c in SourceCursor.objects.filter(cluster=cluster, healthy=False)
    }
    reads = [
        _read_logs(name, source, now, window, loop.get(name, ""))
        for name, source in sources.logs.items()
    ]
    if sources.metrics is not None:
        reads.append(_read_metrics(sources.metrics, now, window, loop.get("metrics", "")))
    return tuple(reads)


def _read_logs(
    name: str, source: Any, now: datetime, window: timedelta, loop_error: str
) -> checkup.SourceRead:
    try:
        # From no cursor: the source's own first read (files from their start, bounded;
        # Loki and VictoriaLogs an hour back), never the loop's place.
        batch = source.fetch(None, now)
    except (SourceUnavailable, OSError, ValueError) as exc:
        return checkup.SourceRead(name, "logs", error=str(exc), loop_error=loop_error)
    recent = [line for line in batch.lines if line.at >= now - window]
    return checkup.SourceRead(
        name,
        "logs",
        items=len(batch.lines),
        recent=len(recent),
        newest=max((line.at for line in batch.lines), default=None),
        by_job=Counter(line.job_id for line in recent if line.job_id),
        by_host=Counter(line.host for line in recent if line.host),
        loop_error=loop_error,
    )


def _read_metrics(
    source: Any, now: datetime, window: timedelta, loop_error: str
) -> checkup.SourceRead:
    try:
        scrape = source.scrape(now)
    except (SourceUnavailable, OSError, ValueError) as exc:
        return checkup.SourceRead("metrics", "metrics", error=str(exc), loop_error=loop_error)
    recent = [s for s in scrape.samples if s.at >= now - window]
    return checkup.SourceRead(
        "metrics",
        "metrics",
        items=len(scrape.samples),
        recent=len(recent),
        newest=max((s.at for s in scrape.samples), default=None),
        by_job=Counter(s.job_id for s in recent if s.job_id),
        by_host=Counter(s.host for s in recent),
        loop_error=loop_error,
    )


def heartbeats(cluster: Cluster, now: datetime) -> tuple[checkup.Heartbeat, ...]:
    """What ``reporters.health`` knows of each token: the role a heartbeat said (none before
    the first), and when it counts as silent."""
    return tuple(
        checkup.Heartbeat(
            reporter.name,
            reporter.role,
            reporter.last_heartbeat_at,
            {
                "version": reporter.version,
                "transport": reporter.transport,
                "last_error": reporter.last_error,
            },
            silent_after_s=reporter.silent_after_s,
        )
        for reporter in reporters.health([cluster], now)
    )


def console_jobs(cluster: Cluster, job_ids: Iterable[str]) -> dict[str, checkup.ConsoleJob]:
    """The newest attempt the console recorded for each job, with its anomalies and advice."""
    attempts: dict[str, Attempt] = {}
    for attempt in Attempt.objects.filter(cluster=cluster, job_id__in=list(job_ids)).order_by(
        "attempt_index"
    ):
        attempts[attempt.job_id] = attempt
    return {job_id: _console_job(attempt) for job_id, attempt in attempts.items()}


def _console_job(attempt: Attempt) -> checkup.ConsoleJob:
    anomalies = Anomaly.objects.filter(attempt=attempt).order_by("detected_at")
    advice = Advice.objects.filter(attempt=attempt).prefetch_related("milestones")
    return checkup.ConsoleJob(
        attempt.job_id,
        attempt.attempt_index,
        attempt.state,
        tuple(f"{a.kind} {a.category}" for a in anomalies),
        tuple(
            checkup.AdviceSeen(
                a.pk, a.action, a.state, a.enforce, tuple(m.action for m in a.milestones.all())
            )
            for a in advice
        ),
    )
