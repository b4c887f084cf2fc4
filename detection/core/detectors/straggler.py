"""Straggler detection: a sustained throughput drop against the job's own recent baseline, and
the node whose GPU metrics are a robust outlier among the job's nodes.

Throughput comes from the job's progress lines (its own unit, higher is faster); the node is
named only when its metrics set it apart (median absolute deviation across the job's nodes),
so a slowdown shared by every node names none. A node-local event (a link that went down) dates
a drop that has too short a history for a baseline window: the reports before it are the
baseline (the scan then puts the slowdown on the event's node).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from detection.core.interruption import Confidence, Evidence, HostOrigin, Interruption
from detection.core.scrape import GpuKey, GpuReadings
from detection.core.telemetry import Dcgm
from fleet.core.taxonomy import Attribution, Category, ConfidenceLabel, Kind

# Metrics that fall on a slow GPU (clocks, power, SM activity); a throttled GPU shows low values.
OUTLIER_METRICS = (Dcgm.SM_CLOCK, Dcgm.POWER_USAGE, Dcgm.SM_ACTIVE)
THROTTLE_METRIC = Dcgm.CLOCK_THROTTLE_REASONS
# Thermal and power-brake bits of the throttle reasons (not the idle or app-clock bits).
SLOWDOWN_BITS = 0x08 | 0x20 | 0x40 | 0x80
# A throttled GPU counts when its clock is below this share of the job's fastest GPU.
CLOCK_SHORTFALL = 0.85


@dataclass(frozen=True)
class StragglerSettings:
    """Per-cluster knobs."""

    baseline_samples: int = 20
    window_samples: int = 5
    drop_fraction: float = 0.20
    outlier_score: float = 3.5
    # A node whose GPUs stay throttled (thermal, power brake) this long, clocked well below the
    # job's fastest, slows the job even when it was slow from the start (no baseline to drop
    # from): a job restarted onto a node with a failed fan.
    throttled_seconds: float = 120.0


@dataclass(frozen=True)
class ThroughputHistory:
    """Recent throughput reports of one attempt (oldest first), bounded."""

    values: tuple[float, ...] = ()
    times: tuple[datetime, ...] = ()
    # Since when each of the job's nodes has had a throttled GPU, and why.
    throttled: tuple[tuple[str, datetime, str], ...] = ()
    # The median throughput of the workload's previous attempt: a restart that lands on a
    # degraded node is slow from its first step, with no baseline of its own to drop from.
    prior: float | None = None

    def note_throttled(self, at: datetime, now_throttled: dict[str, str]) -> ThroughputHistory:
        """Keep when each node's throttling began; a node no longer throttled is forgotten."""
        since = {host: (start, why) for host, start, why in self.throttled}
        kept = tuple(
            (host, since.get(host, (at, why))[0], why)
            for host, why in sorted(now_throttled.items())
        )
        return replace(self, throttled=kept)

    def add(self, at: datetime, value: float, settings: StragglerSettings) -> ThroughputHistory:
        return self.add_many([(at, value)], settings)

    def add_many(
        self, points: Sequence[tuple[datetime, float]], settings: StragglerSettings
    ) -> ThroughputHistory:
        """The history after a scan's reports ``(at, value)``, in order, in one copy."""
        if not points:
            return self
        keep = settings.baseline_samples + settings.window_samples
        values = (*self.values, *(value for _, value in points))[-keep:]
        times = (*self.times, *(at for at, _ in points))[-keep:]
        return replace(self, values=values, times=times)


def throughput_drop(
    history: ThroughputHistory, settings: StragglerSettings
) -> tuple[float, float] | None:
    """(baseline, recent) when every one of the last window's reports is below the baseline by
    more than the drop fraction; None otherwise or while there is too little history. The
    baseline is the attempt's own earlier reports, or the previous attempt's when that ran
    faster; the first window of reports (warm-up) is never the recent one."""
    window = settings.window_samples
    if len(history.values) < window + max(3, window):
        return None
    baseline = max(statistics.median(history.values[:-window]), history.prior or 0.0)
    recent = history.values[-window:]
    if baseline <= 0 or max(recent) >= baseline * (1 - settings.drop_fraction):
        return None
    return baseline, statistics.median(recent)


def slowed_after_node_event(
    history: ThroughputHistory, settings: StragglerSettings, event_at: datetime | None
) -> tuple[float, float, datetime] | None:
    """(baseline, recent, first slow report) when every report since a node-local event (a
    link of one of the job's nodes went down) ran slower than before it by more than the drop
    fraction; None otherwise.

    The reports before the event (or the previous attempt's, when faster) are the baseline, so
    a link that came back slower soon after start-up is seen without a full baseline window:
    the event says when the job slowed. At least a window of reports after it keeps a short
    dip from counting."""
    if event_at is None:
        return None
    reports = list(zip(history.times, history.values, strict=True))
    before = [value for at, value in reports if at < event_at]
    after = [(at, value) for at, value in reports if at >= event_at]
    if len(after) < settings.window_samples or not (before or history.prior):
        return None
    baseline = max(statistics.median(before) if before else 0.0, history.prior or 0.0)
    if baseline <= 0 or max(value for _, value in after) >= baseline * (1 - settings.drop_fraction):
        return None
    recent = statistics.median(value for _, value in after[-settings.window_samples :])
    return baseline, recent, after[0][0]


def outlier_nodes(
    gpus: GpuReadings, nodes: Iterable[str], settings: StragglerSettings
) -> dict[str, str]:
    """Nodes of the job holding a GPU that is slow compared with the job's other GPUs, with
    why. GPUs, not nodes, are compared, so a two-node job still has a crowd to compare with."""
    per_gpu = _on(gpus, nodes)
    reasons: dict[str, str] = {}
    for metric in OUTLIER_METRICS:
        values = {key: readings[metric] for key, readings in per_gpu.items() if metric in readings}
        for (host, gpu), score in sorted(_low_outliers(values, settings.outlier_score).items()):
            reasons.setdefault(
                host,
                f"GPU {gpu} {metric} {values[(host, gpu)]:.0f} is {score:.1f} MADs below "
                "the job's other GPUs",
            )
    for (host, _gpu), why in _throttled(per_gpu).items():
        reasons[host] = f"{reasons[host]}; {why}" if host in reasons else why
    return reasons


def _throttled(per_gpu: dict[GpuKey, dict[str, float]]) -> dict[GpuKey, str]:
    """GPUs reporting thermal or power slowdown while clocked well below the job's fastest GPU:
    the evidence that still works when a whole node of a two-node job is slow."""
    clocks = [r[Dcgm.SM_CLOCK] for r in per_gpu.values() if Dcgm.SM_CLOCK in r]
    fastest = max(clocks, default=0.0)
    found: dict[GpuKey, str] = {}
    for (host, gpu), readings in sorted(per_gpu.items()):
        bits = int(readings.get(THROTTLE_METRIC, 0)) & SLOWDOWN_BITS
        clock = readings.get(Dcgm.SM_CLOCK, fastest)
        if bits and clock < fastest * CLOCK_SHORTFALL and host not in {h for h, _ in found}:
            found[(host, gpu)] = (
                f"GPU {gpu} reports thermal/power slowdown (reasons 0x{bits:x}) at "
                f"{clock:.0f} MHz, against {fastest:.0f} MHz on the job's fastest GPU"
            )
    return found


def _on(gpus: GpuReadings, nodes: Iterable[str]) -> GpuReadings:
    wanted = set(nodes)
    return {key: gauges for key, gauges in gpus.items() if key[0] in wanted}


def _low_outliers(values: dict[GpuKey, float], threshold: float) -> dict[GpuKey, float]:
    """GPUs whose value is far below the median, in robust z-scores (MAD-based)."""
    if len(values) < 3:
        return {}
    median = statistics.median(values.values())
    mad = statistics.median(abs(v - median) for v in values.values())
    scale = max(mad * 1.4826, abs(median) * 0.02, 1e-9)  # a floor: identical healthy GPUs
    return {k: (median - v) / scale for k, v in values.items() if (median - v) / scale > threshold}


def throttled_nodes(gpus: GpuReadings, nodes: Iterable[str]) -> dict[str, str]:
    """The job's nodes with a GPU reporting thermal or power slowdown well below the job's
    fastest GPU, with why."""
    return {host: why for (host, _gpu), why in _throttled(_on(gpus, nodes)).items()}


def _throttled_for_long(
    job_id: str, history: ThroughputHistory, settings: StragglerSettings, now: datetime | None
) -> Interruption | None:
    if now is None:
        return None
    long = [
        (host, since, why)
        for host, since, why in history.throttled
        if (now - since).total_seconds() >= settings.throttled_seconds
    ]
    if not long:
        return None
    hosts = tuple(host for host, _, _ in long)
    started = min(since for _, since, _ in long)
    summary = (
        f"GPUs of {', '.join(hosts)} throttled for more than {settings.throttled_seconds:.0f} s"
    )
    return Interruption(
        kind=Kind.STRAGGLER,
        category=Category.STRAGGLER,
        # The GPUs themselves report the slowdown (thermal, power brake): the hardware's.
        attribution=Attribution.HARDWARE,
        confidence=Confidence(0.6, ConfidenceLabel.SUPPORTED),
        root_cause="straggler:" + ",".join(hosts),
        summary=summary,
        explanation=summary,
        hosts=hosts,
        evidence=tuple(
            Evidence(at=since, source="metrics", text=why, host=host, signature="gpu_outlier")
            for host, since, why in long
        ),
        signature="gpu_throttled",
        node_local=True,
        host_origins=tuple((host, HostOrigin.DETECTOR) for host in hosts),
        first_evidence_at=started,
        job_id=job_id,
    )


def check_straggler(
    job_id: str,
    history: ThroughputHistory,
    gpus: GpuReadings,
    nodes: Iterable[str],
    settings: StragglerSettings,
    now: datetime | None = None,
    node_event_at: datetime | None = None,
) -> Interruption | None:
    """A slowdown when throughput has dropped (naming outlier nodes if metrics allow), or has
    been lower ever since a node-local event at ``node_event_at``, or when a node's GPUs have
    stayed throttled well below the job's fastest."""
    drop = throughput_drop(history, settings)
    if drop is not None:
        baseline, recent = drop
        started = history.times[-settings.window_samples]
    else:
        after_event = slowed_after_node_event(history, settings, node_event_at)
        if after_event is None:
            return _throttled_for_long(job_id, history, settings, now)
        baseline, recent, started = after_event
    culprits = outlier_nodes(gpus, nodes, settings)
    evidence = [
        Evidence(
            at=started,
            source="log",
            signature="throughput_drop",
            text=f"throughput {recent:.3g} against a baseline of {baseline:.3g} "
            f"({(1 - recent / baseline) * 100:.0f}% lower)",
        )
    ]
    evidence += [
        Evidence(at=started, source="metrics", text=why, host=host, signature="gpu_outlier")
        for host, why in sorted(culprits.items())
    ]
    summary = f"throughput down {(1 - recent / baseline) * 100:.0f}% from its baseline"
    return Interruption(
        kind=Kind.STRAGGLER,
        category=Category.STRAGGLER,
        # Outlier GPUs (slow clocks, throttle reasons) put it on their node's hardware; a
        # slowdown every node shares is no one's yet.
        attribution=Attribution.HARDWARE if culprits else Attribution.NONE,
        confidence=Confidence(0.6, ConfidenceLabel.SUPPORTED),
        root_cause="straggler:" + (",".join(sorted(culprits)) or "job"),
        summary=summary,
        explanation=summary,
        hosts=tuple(sorted(culprits)),
        evidence=tuple(evidence),
        signature="throughput_drop",
        # Named outliers are node-local evidence (their own GPUs are slow); a slowdown with no
        # outlier is the job's, and is only reported.
        node_local=bool(culprits),
        host_origins=tuple((host, HostOrigin.DETECTOR) for host in sorted(culprits)),
        first_evidence_at=started,
        job_id=job_id,
    )
