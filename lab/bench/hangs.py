"""Hang latency by step time: how long after a job's last progress line its hang is stored.

For each step time a cluster runs the measured job (Megatron-style progress lines every
``step`` seconds) beside two busy jobs (every 2 s, so the silence is the job's, not a telemetry
gap), through the real scan (in-process log source, the cluster's detector settings) every poll
interval of simulated time, until the measured job's hang anomaly is stored. A second run per
step time shows a visible checkpoint save that never ends: it waits for the checkpoint grace.

The target (DESIGN.md §5) is max(5 × step time, 60 s) + one poll.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from detection.core.telemetry import LogLine
from detection.models import Anomaly
from detection.scan import scan_cluster
from detection.services import detection_settings_of
from detection.sources.config import ClusterSources
from detection.sources.memory import MemoryLogSource
from fleet import services
from fleet.core.scheduler import ClusterSnapshot, JobRecord, JobState

START = datetime(2026, 1, 5, 8, 0, tzinfo=UTC)
STEP_TIMES_S = (1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
QUICK_STEP_TIMES_S = (2.0, 30.0, 120.0)
POLL_S = 5.0
BUSY_STEP_S = 2.0
# Progress reports before the job falls silent: enough for the smoothed interval to settle.
REPORTS = 30
PROGRESS = " iteration {n:8d}/  100000 | elapsed time per iteration (ms): {ms:.1f} | lm loss: 2.1 |"
SAVING = "saving checkpoint at iteration {n:7d} to /lustre/ckpt/gpt in torch_dist format"

Tick = Callable[[float], None]


def measure_hang_latency(quick: bool, tick: Tick) -> dict[str, Any]:
    """Per step time: the latency, the silence the detector allowed, the target, whether met."""
    steps = QUICK_STEP_TIMES_S if quick else STEP_TIMES_S
    rows = []
    for n, step in enumerate(steps):
        row = {"step_s": step, **_one_run(f"bench-hang-{n}", step, saving=False)}
        # A quick run shows the save's grace once: each such run waits out twenty minutes.
        if not quick or n == 0:
            saving = _one_run(f"bench-hang-save-{n}", step, saving=True)
            row["during_checkpoint_save_s"] = saving["latency_s"]
        rows.append(row)
        tick((n + 1) / len(steps))
    return {
        "poll_s": POLL_S,
        "rule": "max(5 x step time, 60 s) + one poll",
        "by_step_time": rows,
        "all_met": all(row["met"] for row in rows),
    }


def _one_run(name: str, step: float, *, saving: bool) -> dict[str, Any]:
    cluster = services.create_cluster("system:bench", name, telemetry={"metrics": {"type": "none"}})
    jobs = [_job(f"{name}-{n}") for n in range(3)]
    services.record_snapshot("controller:bench", cluster, ClusterSnapshot(START, tuple(jobs), ()))
    source = MemoryLogSource()
    sources = ClusterSources(logs={"job-logs": source})
    settings = detection_settings_of(cluster).detector_config().hang
    measured, busy = jobs[0].job_id, [j.job_id for j in jobs[1:]]
    last = START + timedelta(seconds=step * REPORTS)
    source.push(_progress(measured, step, START, last))
    if saving:
        source.push([LogLine(last + timedelta(seconds=1), SAVING.format(n=REPORTS), measured)])
    # Scanning starts shortly before the job falls silent: what came before is its history.
    now = busy_until = last - timedelta(seconds=2 * POLL_S)
    deadline = last + timedelta(seconds=settings.checkpoint_grace_seconds + 20 * step + 600)
    while now < deadline:
        now += timedelta(seconds=POLL_S)
        source.push(_busy(busy, busy_until, now))
        busy_until = now
        scan_cluster(cluster, now, sources)
        if Anomaly.objects.filter(cluster=cluster, attempt__job_id=measured).exists():
            break
    anomaly = Anomaly.objects.filter(cluster=cluster, attempt__job_id=measured).first()
    latency = (anomaly.detected_at - last).total_seconds() if anomaly else None
    target = max(5 * step, 60.0) + POLL_S
    return {
        "latency_s": latency,
        "target_s": target,
        "met": latency is not None and latency <= target,
    }


def _job(job_id: str) -> JobRecord:
    return JobRecord(
        job_id=job_id,
        name=job_id,
        state=JobState.RUNNING,
        partition="gpu",
        nodes=(f"{job_id}-node",),
        start_time=START,
    )


def _progress(job_id: str, step: float, start: datetime, end: datetime) -> list[LogLine]:
    count = int((end - start).total_seconds() // step)
    return [
        LogLine(
            start + timedelta(seconds=step * (n + 1)),
            PROGRESS.format(n=n + 1, ms=step * 1000),
            job_id,
        )
        for n in range(count)
    ]


def _busy(job_ids: list[str], since: datetime, until: datetime) -> list[LogLine]:
    lines: list[LogLine] = []
    at = since + timedelta(seconds=BUSY_STEP_S)
    while at <= until:
        n = int((at - START).total_seconds() // BUSY_STEP_S)
        lines.extend(LogLine(at, PROGRESS.format(n=n, ms=2000.0), job) for job in job_ids)
        at += timedelta(seconds=BUSY_STEP_S)
    return lines
