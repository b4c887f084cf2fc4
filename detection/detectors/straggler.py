"""Straggler detection: a sustained throughput drop against the job's own recent baseline, and
the node whose GPU metrics are a robust outlier among the job's nodes.

Throughput comes from the job's progress lines (its own unit, higher is faster); the node is
named only when its metrics set it apart (median absolute deviation across the job's nodes),
so a slowdown shared by every node names none.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime

from detection.telemetry import MetricSample

from .findings import Evidence, Finding

# Metrics that fall on a slow GPU (clocks, power, SM activity); a throttled GPU shows low values.
OUTLIER_METRICS = ("DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_PROF_SM_ACTIVE")
THROTTLE_METRIC = "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"
# Thermal and power-brake bits of the throttle reasons (not the idle or app-clock bits).
SLOWDOWN_BITS = 0x08 | 0x20 | 0x40 | 0x80


@dataclass(frozen=True)
class StragglerSettings:
    """Per-cluster knobs."""

    baseline_samples: int = 20
    window_samples: int = 5
    drop_fraction: float = 0.20
    outlier_score: float = 3.5


@dataclass(frozen=True)
class ThroughputHistory:
    """Recent throughput reports of one attempt (oldest first), bounded."""

    values: tuple[float, ...] = ()
    times: tuple[datetime, ...] = ()

    def add(self, at: datetime, value: float, settings: StragglerSettings) -> ThroughputHistory:
        keep = settings.baseline_samples + settings.window_samples
        return replace(self, values=(*self.values, value)[-keep:], times=(*self.times, at)[-keep:])


def throughput_drop(
    history: ThroughputHistory, settings: StragglerSettings
) -> tuple[float, float] | None:
    """(baseline, recent) when every one of the last window's reports is below the baseline by
    more than the drop fraction; None otherwise or while there is too little history."""
    window = settings.window_samples
    if len(history.values) < window + max(3, window):
        return None
    baseline = statistics.median(history.values[:-window])
    recent = history.values[-window:]
    if baseline <= 0 or max(recent) >= baseline * (1 - settings.drop_fraction):
        return None
    return baseline, statistics.median(recent)


def outlier_nodes(
    samples: Iterable[MetricSample], nodes: Iterable[str], settings: StragglerSettings
) -> dict[str, str]:
    """Nodes of the job whose GPUs are slow compared with the job's other nodes, with why."""
    per_node = _per_node_means(samples, set(nodes))
    reasons: dict[str, str] = {}
    for metric in OUTLIER_METRICS:
        values = {host: means[metric] for host, means in per_node.items() if metric in means}
        for host, score in _low_outliers(values, settings.outlier_score).items():
            reasons.setdefault(
                host, f"{metric} {values[host]:.0f} is {score:.1f} MADs below the job's nodes"
            )
    for host, means in per_node.items():
        if int(means.get(THROTTLE_METRIC, 0)) & SLOWDOWN_BITS and host in reasons:
            reasons[host] += "; thermal/power throttling reported"
    return reasons


def _per_node_means(
    samples: Iterable[MetricSample], nodes: set[str]
) -> dict[str, dict[str, float]]:
    grouped: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for sample in samples:
        if sample.host in nodes:
            grouped[sample.host][sample.name].append(sample.value)
    return {
        host: {name: (max(v) if name == THROTTLE_METRIC else min(v)) for name, v in metrics.items()}
        for host, metrics in grouped.items()
    }


def _low_outliers(values: dict[str, float], threshold: float) -> dict[str, float]:
    """Hosts whose value is far below the median, in robust z-scores (MAD-based)."""
    if len(values) < 3:
        return {}
    median = statistics.median(values.values())
    mad = statistics.median(abs(v - median) for v in values.values())
    scale = max(mad * 1.4826, abs(median) * 0.02, 1e-9)  # a floor: identical healthy nodes
    return {h: (median - v) / scale for h, v in values.items() if (median - v) / scale > threshold}


def check_straggler(
    job_id: str,
    history: ThroughputHistory,
    samples: Iterable[MetricSample],
    nodes: Iterable[str],
    settings: StragglerSettings,
) -> Finding | None:
    """A straggler finding when throughput has dropped; names outlier nodes if metrics allow."""
    drop = throughput_drop(history, settings)
    if drop is None:
        return None
    baseline, recent = drop
    culprits = outlier_nodes(samples, nodes, settings)
    started = history.times[-settings.window_samples]
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
    return Finding(
        kind="straggler",
        category="straggler",
        job_id=job_id,
        root_cause="straggler:" + (",".join(sorted(culprits)) or "job"),
        first_evidence_at=started,
        summary=f"throughput down {(1 - recent / baseline) * 100:.0f}% from its baseline",
        evidence=tuple(evidence),
        hosts=tuple(sorted(culprits)),
    )
