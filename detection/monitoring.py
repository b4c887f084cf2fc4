"""Per-attempt detector state between scans: the progress tracker, the throughput history and
the log lines that matched a signature, kept as JSON on ``AttemptMonitor``. Also the scheduler's
view of an ended attempt as a finding. The decisions are the pure detectors'; this module only
loads, feeds and stores them."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from recovery_console.models import Attempt

from .config import DetectorConfig
from .constants import Role
from .detectors.findings import Evidence, Finding
from .detectors.hang import ProgressTracker, check_hang
from .detectors.straggler import ThroughputHistory, check_straggler
from .models import AttemptMonitor
from .progress import parse_progress
from .telemetry import LogLine

# Lines kept per attempt for diagnosis: the matched lines (repeats beyond a few are only
# counted) and, for exceptions, the traceback lines before them.
MAX_KEPT_LINES = 400
MAX_REPEATS_KEPT = 8
TRACEBACK_LINES = 30

ATTRIBUTION_OF_CATEGORY = {
    "gpu_hardware": "hardware",
    "interconnect_network": "interconnect",
    "filesystem_io": "system_software",
    "application_error": "application",
    "cuda_oom": "application",
    "numerical_divergence": "application",
}


@dataclass(frozen=True)
class Observed:
    new_matches: bool


def load(attempt: Attempt) -> AttemptMonitor:
    """The attempt's monitor: the one already fetched with it (select_related), or the stored
    one, or a new one."""
    try:
        return attempt.monitor
    except AttemptMonitor.DoesNotExist:
        monitor, _ = AttemptMonitor.objects.get_or_create(attempt=attempt)
        return monitor


def observe(monitor: AttemptMonitor, lines: Sequence[LogLine], config: DetectorConfig) -> Observed:
    """Feed an attempt's new lines to its progress tracker and keep the lines that matched."""
    tracker = _tracker(monitor)
    history = _history(monitor)
    for line in lines:
        progress = parse_progress(line.text, config.progress_pattern)
        if progress is None:
            tracker = tracker.observe_line(line.at, line.text)
            continue
        tracker = tracker.observe(line.at, progress, line.text, config.hang.smoothing)
        if progress.throughput is not None and tracker.last_progress_at == line.at:
            history = history.add(line.at, progress.throughput, config.straggler)
    _store_tracker(monitor, tracker)
    _store_history(monitor, history)
    new = _keep_matches(monitor, lines, config)
    monitor.lines_seen += len(lines)
    return Observed(new_matches=new)


def _keep_matches(
    monitor: AttemptMonitor, lines: Sequence[LogLine], config: DetectorConfig
) -> bool:
    scan = config.library.scan([line.text for line in lines], [line.host for line in lines])
    wanted: dict[int, str] = {}
    for finding in scan.findings:
        for number in finding.line_numbers[:MAX_REPEATS_KEPT]:
            wanted[number] = finding.role.value
        if finding.category.value == "application_error":
            start = max(1, finding.first_line - TRACEBACK_LINES)
            for number in range(start, finding.first_line):
                wanted.setdefault(number, "context")
    if not any(role != Role.CONTEXT.value for role in wanted.values()):
        return False
    kept = list(monitor.matched_lines)
    for number in sorted(wanted)[: max(0, MAX_KEPT_LINES - len(kept))]:
        line = lines[number - 1]
        kept.append(
            {
                "seq": monitor.lines_seen + number,
                "at": line.at.isoformat(),
                "host": line.host,
                "text": line.text[:4000],
                "role": wanted[number],
            }
        )
    monitor.matched_lines = kept
    return True


def check(
    monitor: AttemptMonitor,
    attempt: Attempt,
    now: datetime,
    config: DetectorConfig,
    utilisation: list[float],
    samples: Iterable[Any],
) -> tuple[Finding | None, Finding | None]:
    """Run the hang and straggler detectors on a running attempt."""
    tracker = _tracker(monitor, attempt.started_at or attempt.first_seen_at)
    tracker = tracker.observe_gpus(now, utilisation, config.hang)
    _store_tracker(monitor, tracker)
    hang = check_hang(attempt.job_id, tracker, now, config.hang)
    slow = check_straggler(
        attempt.job_id, _history(monitor), samples, attempt.nodes, config.straggler
    )
    return hang, slow


def scheduler_finding(
    attempt: Attempt, unhealthy_nodes: set[str]
) -> tuple[Finding, tuple[float, str]]:
    """What the scheduler's final state of an attempt says, and how sure that is."""
    at = attempt.ended_at or attempt.first_seen_at
    state = attempt.state
    hosts: tuple[str, ...] = ()
    category, confidence = "node_or_process_failure", (0.4, "hypothesis")
    if state == "NODE_FAIL":
        hosts = tuple(sorted(set(attempt.nodes) & unhealthy_nodes))
        confidence = (0.7, "supported") if hosts else confidence
    elif state == "PREEMPTED":
        category = "benign"
    text = f"Slurm: job {attempt.job_id} ended {state}" + (
        f" ({attempt.reason})" if attempt.reason else ""
    )
    if attempt.exit_code is not None:
        text += f", exit code {attempt.exit_code}"
    finding = Finding(
        kind="crash",
        category=category,
        job_id=attempt.job_id,
        root_cause=f"slurm:{state}",
        first_evidence_at=at,
        summary=text,
        evidence=(
            Evidence(at=at, source="scheduler", text=text, signature=f"slurm_{state.lower()}"),
        ),
        hosts=hosts,
    )
    return finding, confidence


def attribution_of(finding: Finding) -> str:
    """The attribution a detector's finding implies (logs carry their own)."""
    if finding.root_cause.startswith("slurm:"):
        state = finding.root_cause.split(":", 1)[1]
        if state in {"TIMEOUT", "PREEMPTED"}:
            return "scheduler"
        if state == "OUT_OF_MEMORY":
            return "application"
        return "hardware" if finding.hosts else "none"
    if finding.category == "node_or_process_failure":
        return "hardware" if finding.hosts else "none"
    return ATTRIBUTION_OF_CATEGORY.get(finding.category, "none")


def _tracker(monitor: AttemptMonitor, started_at: datetime | None = None) -> ProgressTracker:
    data = monitor.progress or {}
    # Derived from the attempt each time: a job seen pending starts its grace when it runs.
    start = started_at or monitor.attempt.started_at or monitor.attempt.first_seen_at
    return ProgressTracker(
        started_at=start,
        last_step=data.get("last_step"),
        last_progress_at=_time(data.get("last_progress_at")),
        interval_seconds=data.get("interval_seconds"),
        reports=data.get("reports", 0),
        checkpoint_since=_time(data.get("checkpoint_since")),
        gpus_idle_since=_time(data.get("gpus_idle_since")),
        last_line=data.get("last_line", ""),
    )


def _store_tracker(monitor: AttemptMonitor, tracker: ProgressTracker) -> None:
    monitor.progress = {
        "last_step": tracker.last_step,
        "last_progress_at": _iso(tracker.last_progress_at),
        "interval_seconds": tracker.interval_seconds,
        "reports": tracker.reports,
        "checkpoint_since": _iso(tracker.checkpoint_since),
        "gpus_idle_since": _iso(tracker.gpus_idle_since),
        "last_line": tracker.last_line,
    }
    monitor.last_step = tracker.last_step
    monitor.last_progress_at = tracker.last_progress_at


def _history(monitor: AttemptMonitor) -> ThroughputHistory:
    data = monitor.throughput or {}
    times = tuple(datetime.fromisoformat(t) for t in data.get("times", ()))
    return ThroughputHistory(values=tuple(data.get("values", ())), times=times)


def _store_history(monitor: AttemptMonitor, history: ThroughputHistory) -> None:
    monitor.throughput = {
        "values": list(history.values),
        "times": [t.isoformat() for t in history.times],
    }


def _time(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None
