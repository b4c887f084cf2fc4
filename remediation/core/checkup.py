"""``check_cluster``'s verdicts: from what one read of each part saw to findings an operator
reads top to bottom, in the order they troubleshoot: can we reach the scheduler, are the
controller and watchdog alive, is each telemetry source delivering, and then for each job: is
it visible, is its signal arriving, is advice produced, was it acted on.

Plain Python over frozen records; the caller reads the scheduler, the sources and the rows.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Literal

Status = Literal["ok", "warning", "problem", "info"]
# A controller polls every few seconds: a minute of silence means it is not running.
HEARTBEAT_STALE = timedelta(seconds=60)
MAX_JOBS = 20


@dataclass(frozen=True)
class Finding:
    """One line of the report: a stage, how it stands, what was seen and what to do."""

    stage: str
    status: Status
    summary: str
    details: tuple[str, ...] = ()


@dataclass(frozen=True)
class JobSeen:
    job_id: str
    state: str
    nodes: tuple[str, ...] = ()


@dataclass(frozen=True)
class SchedulerRead:
    """One read of the scheduler (``error`` set: it failed). A simulated cluster's scheduler
    runs inside ``run_demo`` and is not read here (``simulated``)."""

    target: str
    jobs: tuple[JobSeen, ...] = ()
    nodes: int = 0
    version: str = ""
    error: str = ""
    simulated: bool = False


@dataclass(frozen=True)
class SourceRead:
    """One read of a log source (or a metrics scrape): what it held for the window."""

    name: str
    kind: Literal["logs", "metrics"]
    error: str = ""
    items: int = 0  # lines, or samples
    recent: int = 0  # of those, dated within the window
    newest: datetime | None = None
    by_job: Mapping[str, int] = field(default_factory=dict)
    by_host: Mapping[str, int] = field(default_factory=dict)
    loop_error: str = ""  # what the detection loop's own last read of it said


@dataclass(frozen=True)
class Heartbeat:
    name: str
    role: str  # controller or watchdog, as its heartbeat said; "" for a token never used
    at: datetime | None
    info: Mapping[str, str] = field(default_factory=dict)
    # When the console counts it as silent (``reporters.silent_after_s``: six of its cycles).
    silent_after_s: float = HEARTBEAT_STALE.total_seconds()


@dataclass(frozen=True)
class AdviceSeen:
    id: int
    action: str
    state: str
    enforce: bool
    steps: tuple[str, ...] = ()


@dataclass(frozen=True)
class ConsoleJob:
    """A job as the console recorded it (from the controller's snapshots), with what the loop
    made of it."""

    job_id: str
    attempt_index: int
    state: str
    anomalies: tuple[str, ...] = ()
    advice: tuple[AdviceSeen, ...] = ()


@dataclass(frozen=True)
class Observations:
    cluster: str
    mode: str
    now: datetime
    window: timedelta
    scheduler: SchedulerRead
    sources: tuple[SourceRead, ...]
    heartbeats: tuple[Heartbeat, ...]
    console_jobs: Mapping[str, ConsoleJob]
    jobs_asked: tuple[str, ...] = ()


def report(seen: Observations) -> tuple[Finding, ...]:
    return (
        _scheduler(seen),
        *_heartbeats(seen),
        *_sources(seen),
        *(finding for job in _jobs_to_check(seen) for finding in _job(seen, job)),
    )


def worst(findings: tuple[Finding, ...]) -> Status:
    for status in ("problem", "warning"):
        if any(f.status == status for f in findings):
            return status
    return "ok"


def _scheduler(seen: Observations) -> Finding:
    read = seen.scheduler
    if read.simulated:
        return Finding("scheduler", "info", "simulated: its scheduler runs inside run_demo")
    if read.error:
        return Finding(
            "scheduler",
            "problem",
            f"cannot read Slurm on {read.target}: {read.error}",
            (
                "check the scheduler document (transport, ssh, slurm_conf) and that squeue works "
                "there as the console's user",
            ),
        )
    running = sum(1 for job in read.jobs if job.state == "RUNNING")
    version = f"Slurm {read.version}, " if read.version else ""
    summary = f"{version}{len(read.jobs)} jobs ({running} running), {read.nodes} nodes"
    return Finding("scheduler", "ok", f"read on {read.target}: {summary}")


def _heartbeats(seen: Observations) -> list[Finding]:
    findings = []
    for role in ("controller", "watchdog"):
        beats = [b for b in seen.heartbeats if b.role == role]
        findings.append(_heartbeat(seen, role, beats))
    return findings


def _heartbeat(seen: Observations, role: str, beats: list[Heartbeat]) -> Finding:
    start = (
        f"on the head node: python -m remediation.controller {role} --url URL --token-file FILE,"
        f" with a token from issue_controller_token --cluster {seen.cluster}"
    )
    unused = [b for b in seen.heartbeats if b.at is None]
    if seen.scheduler.simulated and not any(b.at for b in beats):
        return Finding(role, "info", f"run_demo runs the simulated cluster's {role} in-process")
    heard = [b for b in beats if b.at is not None]
    if not heard and not unused:
        return Finding(role, "warning", f"no {role} token is issued", (start,))
    if not heard:
        # A token says what it is only in its heartbeats: one never used may be either.
        never = f"never used: {', '.join(b.name for b in unused)}"
        return Finding(role, "warning", f"no {role} has sent a heartbeat yet", (never, start))
    at, latest = max(((b.at, b) for b in heard if b.at is not None), key=lambda pair: pair[0])
    age = (seen.now - at).total_seconds()
    extra = tuple(f"{k}: {v}" for k, v in sorted(latest.info.items()) if v)
    status: Status = "ok" if age <= latest.silent_after_s else "problem"
    summary = f"{latest.name}: last heartbeat {_ago(age)}"
    if status == "problem":
        extra = (*extra, f"silent for more than {latest.silent_after_s:g} s: is it running?")
    return Finding(role, status, summary, extra)


def _sources(seen: Observations) -> list[Finding]:
    if not any(s.kind == "logs" for s in seen.sources):
        hint = "set telemetry.logs (files, loki or victorialogs): configure_cluster --logs ..."
        findings = [Finding("logs", "problem", "no log source is configured", (hint,))]
    else:
        findings = []
    return findings + [_source(seen, source) for source in seen.sources]


def _source(seen: Observations, source: SourceRead) -> Finding:
    stage = source.name if source.name == source.kind else f"{source.kind} {source.name}"
    said = f"the detection loop's last read said: {source.loop_error}"
    loop = (said,) if source.loop_error else ()
    if source.error:
        return Finding(stage, "problem", f"cannot be read: {source.error}", loop)
    unit = "lines" if source.kind == "logs" else "samples"
    minutes = f"{seen.window.total_seconds() / 60:g} min"
    newest = f", newest {_ago((seen.now - source.newest).total_seconds())}" if source.newest else ""
    summary = f"{source.items} {unit} read, {source.recent} from the last {minutes}{newest}"
    if source.recent == 0:
        why = "nothing recent: is the shipper or exporter running, and the path or query right?"
        return Finding(stage, "warning", summary, (why, *loop))
    return Finding(stage, "warning" if loop else "ok", summary, loop)


def _jobs_to_check(seen: Observations) -> list[str]:
    if seen.jobs_asked:
        return list(seen.jobs_asked)
    live = [j.job_id for j in seen.scheduler.jobs if j.state in ("RUNNING", "PENDING")]
    if not live and (seen.scheduler.error or seen.scheduler.simulated):
        live = [j.job_id for j in seen.console_jobs.values() if j.state in ("RUNNING", "PENDING")]
    return live[:MAX_JOBS]


def _job(seen: Observations, job_id: str) -> list[Finding]:
    stage = f"job {job_id}"
    in_slurm = next((j for j in seen.scheduler.jobs if j.job_id == job_id), None)
    recorded = seen.console_jobs.get(job_id)
    findings = [_visible(seen, stage, in_slurm, recorded)]
    if in_slurm is None and recorded is None:
        return findings
    nodes = in_slurm.nodes if in_slurm else ()
    findings.append(_signal(seen, stage, job_id, nodes))
    if recorded is not None:
        findings.extend(_advice(seen, stage, recorded))
    return findings


def _visible(
    seen: Observations, stage: str, in_slurm: JobSeen | None, recorded: ConsoleJob | None
) -> Finding:
    scheduler_read = not (seen.scheduler.error or seen.scheduler.simulated)
    if in_slurm is None and recorded is None:
        return Finding(f"{stage}: visible", "problem", "neither Slurm nor the console knows it")
    if recorded is None:
        return Finding(
            f"{stage}: visible",
            "problem",
            f"Slurm shows it ({in_slurm.state if in_slurm else '?'}) but the console has not "
            "recorded it",
            (
                "the controller reports what Slurm shows: is the controller "
                "(python -m remediation.controller controller) running?",
            ),
        )
    where = f"Slurm: {in_slurm.state}, " if in_slurm else ""
    if scheduler_read and in_slurm is None:
        where = "Slurm no longer shows it, "
    summary = f"{where}console: attempt {recorded.attempt_index}, {recorded.state}"
    return Finding(f"{stage}: visible", "ok", summary)


def _signal(seen: Observations, stage: str, job_id: str, nodes: tuple[str, ...]) -> Finding:
    parts: list[str] = []
    quiet: list[str] = []
    for source in seen.sources:
        count = source.by_job.get(job_id, 0) + sum(source.by_host.get(n, 0) for n in nodes)
        unit = "lines" if source.kind == "logs" else "samples"
        (parts if count else quiet).append(f"{source.name}: {count} {unit}")
    logs_arriving = any(
        source.by_job.get(job_id) for source in seen.sources if source.kind == "logs"
    )
    summary = "; ".join(parts + quiet) or "no source is configured"
    if logs_arriving:
        return Finding(f"{stage}: signal", "ok", summary)
    hint = "no line of this job's own output was read: check the path, pattern or job label"
    return Finding(f"{stage}: signal", "warning", summary, (hint,))


def _advice(seen: Observations, stage: str, job: ConsoleJob) -> list[Finding]:
    if not job.anomalies:
        return [Finding(f"{stage}: advice", "info", "no anomaly detected, so no advice is due")]
    findings = []
    anomalies = ", ".join(job.anomalies)
    if not job.advice:
        findings.append(
            Finding(
                f"{stage}: advice",
                "problem",
                f"anomalies ({anomalies}) but no advice yet",
                ("is the Celery worker (and beat) running?",),
            )
        )
    for advice in job.advice:
        findings.append(
            Finding(f"{stage}: advice", "ok", f"#{advice.id} {advice.action} ({advice.state})")
        )
        findings.append(_acted(seen, stage, advice))
    return findings


def _acted(seen: Observations, stage: str, advice: AdviceSeen) -> Finding:
    if not advice.enforce:
        why = "monitor mode" if seen.mode == "monitor" else "not enforced (partition allowlist)"
        return Finding(f"{stage}: acted on", "info", f"{why}: published for review, not acted on")
    if advice.steps:
        return Finding(f"{stage}: acted on", "ok", "steps taken: " + ", ".join(advice.steps))
    return Finding(
        f"{stage}: acted on",
        "warning",
        f"enforced, no step reported yet ({advice.state})",
        ("the controller carries advice out: check its heartbeat and log",),
    )


def _ago(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 120:
        return f"{seconds:.0f} s ago"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min ago"
    return f"{seconds / 3600:.1f} h ago"
