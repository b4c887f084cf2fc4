"""Scoring the loop against the simulator's ground truth. Pure functions over plain records.

Matching rule: an injected fault and a stored anomaly match when they concern the same Slurm
job id and the same attempt (the job's restart count when the fault struck) and the same family
(a slowdown fault matches the attempt's straggler anomaly; a crash or hang fault its interruption
anomaly). An attempt has at most one anomaly per family, so each anomaly matches at most the
faults of its attempt and family. A fault with no anomaly is missed; an anomaly with no fault
is a false positive.

Only faults old enough to have run their course are scored: those that began at least
``settle`` before the end of the run. Anomalies of later faults are left out too; an anomaly
that matches no fault is scored when its first evidence is older than that cut-off.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

KINDS = ("crash", "hang", "straggler")
# Of false stops, the worst: the truth was the hardware's or the network's fault.
NOT_THE_JOBS_FAULT = frozenset({"hardware", "interconnect"})
# Extra labels for the confusion matrix, in parentheses so no category can clash.
MISSED = "(missed)"
NO_FAULT = "(no fault)"


@dataclass(frozen=True)
class Fault:
    """An injected fault, as the simulator recorded it."""

    fault_id: str
    job_id: str
    attempt: int
    kind: str
    category: str
    attribution: str
    hosts: tuple[str, ...]
    at: datetime
    entry: str
    # An application error in the workload itself: it comes back after every restart.
    unfixable: bool = False


@dataclass(frozen=True)
class Detected:
    """A stored anomaly with its advice and when the advice was carried out."""

    anomaly_id: int
    job_id: str
    attempt: int
    family: str  # interruption | straggler
    kind: str
    category: str
    attribution: str
    hosts: tuple[str, ...]
    first_evidence_at: datetime
    detected_at: datetime
    action: str | None = None
    executed_at: datetime | None = None
    # Wall seconds from the anomaly's row being written to the controller reporting its last
    # step: the processing time the lock-stepped simulated clock does not show.
    action_wall_s: float | None = None


@dataclass(frozen=True)
class Scored:
    """The faults and anomalies within the scoring window, matched."""

    pairs: tuple[tuple[Fault, Detected | None], ...]
    false_positives: tuple[Detected, ...]
    detected: tuple[Detected, ...]

    @property
    def matched(self) -> list[tuple[Fault, Detected]]:
        return [(fault, found) for fault, found in self.pairs if found is not None]


def family_of(kind: str) -> str:
    return "straggler" if kind == "straggler" else "interruption"


def score(faults: Iterable[Fault], detected: Iterable[Detected], cutoff: datetime) -> Scored:
    """Match every fault to its anomaly, then keep what lies within the scoring window."""
    by_key = {(d.job_id, d.attempt, d.family): d for d in detected}
    pairs = [(f, by_key.get((f.job_id, f.attempt, family_of(f.kind)))) for f in faults]
    scored_pairs = tuple((f, d) for f, d in pairs if f.at <= cutoff)
    # An anomaly of a fault outside the window is neither a hit nor a false positive.
    matched_any = {id(d) for _, d in pairs if d is not None}
    matched_scored = {id(d) for _, d in scored_pairs if d is not None}
    false_positives = tuple(
        d for d in by_key.values() if id(d) not in matched_any and d.first_evidence_at <= cutoff
    )
    kept = tuple(d for d in by_key.values() if id(d) in matched_scored) + false_positives
    return Scored(scored_pairs, false_positives, kept)


def detection(scored: Scored) -> dict[str, float | int | None]:
    """Precision, recall and F1 of the anomalies against the faults."""
    faults = len(scored.pairs)
    found = len(scored.matched)
    anomalies = len(scored.detected)
    # Precision counts anomalies, recall faults: several faults of one attempt share one.
    true_anomalies = anomalies - len(scored.false_positives)
    precision = ratio(true_anomalies, anomalies)
    recall = ratio(found, faults)
    return {
        "precision": precision,
        "recall": recall,
        "f1": f1(precision, recall),
        "faults": faults,
        "detected_faults": found,
        "anomalies": anomalies,
        "false_positives": len(scored.false_positives),
    }


def f1(precision: float | None, recall: float | None) -> float | None:
    if precision is None or recall is None:
        return None
    if precision + recall == 0:
        return 0.0
    return round(2 * precision * recall / (precision + recall), 4)


def ratio(part: float, whole: float) -> float | None:
    """``part / whole`` to four places; None (JSON null) when there is nothing to divide."""
    return round(part / whole, 4) if whole else None


def latencies_by_kind(scored: Scored, *, from_evidence: bool = False) -> dict[str, list[float]]:
    """Seconds from the fault's start (or the anomaly's own first evidence) to the anomaly
    being stored, per kind of the injected fault."""
    out: dict[str, list[float]] = {kind: [] for kind in KINDS}
    for fault, found in scored.matched:
        start = found.first_evidence_at if from_evidence else fault.at
        out.setdefault(fault.kind, []).append((found.detected_at - start).total_seconds())
    return out


def action_latencies(scored: Scored) -> list[float]:
    """Seconds from each anomaly being stored to its advice having been carried out."""
    return [
        (d.executed_at - d.detected_at).total_seconds()
        for d in scored.detected
        if d.executed_at is not None
    ]


def action_wall_latencies(scored: Scored) -> list[float]:
    return [d.action_wall_s for d in scored.detected if d.action_wall_s is not None]


def attribution(scored: Scored) -> dict[str, float | None]:
    """Of the detected faults, the share whose category (and whose attribution) is right."""
    pairs = scored.matched
    return {
        "category": ratio(sum(f.category == d.category for f, d in pairs), len(pairs)),
        "attribution": ratio(sum(f.attribution == d.attribution for f, d in pairs), len(pairs)),
    }


def hosts(scored: Scored) -> dict[str, float | int | None]:
    """Implicated hosts of the detected faults, counted over all of them (micro-averaged)."""
    named = truth = right = 0
    for fault, found in scored.matched:
        named += len(found.hosts)
        truth += len(fault.hosts)
        right += len(set(found.hosts) & set(fault.hosts))
    return {
        "precision": ratio(right, named),
        "recall": ratio(right, truth),
        "named": named,
        "implicated": truth,
    }


def stops(scored: Scored) -> dict[str, int]:
    """False stops (a stop advised for a fault a restart would fix, or for no fault at all; of
    them, those on the hardware's or the network's fault) and missed stops (a fault that comes
    back after every restart, per the catalogue, that was not stopped)."""
    # Stopping a job a restart would save throws the run away; stopping it for its node's
    # fault is the worst case of that.
    wrongly = [
        fault for fault, found in scored.matched if found.action == "stop" and not fault.unfixable
    ]
    unprompted = sum(1 for found in scored.false_positives if found.action == "stop")
    missed = sum(
        1
        for fault, found in scored.pairs
        if fault.unfixable and (found is None or found.action != "stop")
    )
    unfixable = sum(1 for fault, _ in scored.pairs if fault.unfixable)
    advised = sum(1 for d in scored.detected if d.action == "stop")
    return {
        "false": len(wrongly) + unprompted,
        "false_on_hardware_or_network": sum(
            1 for fault in wrongly if fault.attribution in NOT_THE_JOBS_FAULT
        ),
        "missed": missed,
        "unfixable_faults": unfixable,
        "advised": advised,
    }


def confusion(scored: Scored) -> dict[str, object]:
    """Counts of (true category, detected category); missed faults and false positives too."""
    counts: Counter[tuple[str, str]] = Counter()
    for fault, found in scored.pairs:
        counts[(fault.category, found.category if found else MISSED)] += 1
    for found in scored.false_positives:
        counts[(NO_FAULT, found.category)] += 1
    truth = sorted({t for t, _ in counts} - {NO_FAULT}) + [NO_FAULT]
    detected = sorted({d for _, d in counts} - {MISSED}) + [MISSED]
    return {
        "truth": truth,
        "detected": detected,
        "counts": [[counts[(t, d)] for d in detected] for t in truth],
    }


def _repeat_key(fault: Fault) -> tuple[str, tuple[str, ...]]:
    # A fault that blames no host is keyed by its job: a bug in the code repeats there.
    return (fault.entry, fault.hosts or (fault.job_id,))


def repeats(faults: Sequence[Fault]) -> int:
    """Faults that strike the same host the same way as an earlier fault did: a defect left on a
    node (or in the workload) coming back because nothing took it out of service."""
    return len(faults) - len(_first_occurrences(faults))


def _first_occurrences(faults: Sequence[Fault]) -> set[str]:
    seen: set[tuple[str, tuple[str, ...]]] = set()
    first: set[str] = set()
    for fault in sorted(faults, key=lambda f: f.at):
        if _repeat_key(fault) not in seen:
            first.add(fault.fault_id)
        seen.add(_repeat_key(fault))
    return first


def first_occurrences(scored: Scored) -> Scored:
    """The scored faults that are not repeats of an earlier one, with their anomalies."""
    first = _first_occurrences([fault for fault, _ in scored.pairs])
    pairs = tuple((fault, found) for fault, found in scored.pairs if fault.fault_id in first)
    kept = tuple(found for _, found in pairs if found is not None)
    # False positives stay as they are: they are no fault's repeat.
    return Scored(pairs, scored.false_positives, kept + scored.false_positives)


def recall_by_kind(scored: Scored) -> dict[str, float | None]:
    return {
        kind: ratio(
            sum(1 for f, d in scored.pairs if f.kind == kind and d is not None),
            sum(1 for f, _ in scored.pairs if f.kind == kind),
        )
        for kind in KINDS
    }


def missed_entries(scored: Scored) -> dict[str, int]:
    """The catalogue entries of the faults nothing detected, most often missed first."""
    return dict(Counter(f.entry for f, d in scored.pairs if d is None).most_common())


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0–100) with linear interpolation between closest ranks."""
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def summary(values: Sequence[float]) -> dict[str, float | int | None]:
    """p50, p95, max, mean and count, rounded to 0.1 s; nulls when there are no values."""
    if not values:
        return {"p50": None, "p95": None, "max": None, "mean": None, "n": 0}
    return {
        "p50": round(percentile(values, 50), 1),
        "p95": round(percentile(values, 95), 1),
        "max": round(max(values), 1),
        "mean": round(sum(values) / len(values), 1),
        "n": len(values),
    }


def effective_training_time(progress: Iterable[tuple[float, float]]) -> float | None:
    """Productive GPU time over wall GPU time, summed over workloads: (productive, wall) pairs."""
    productive = wall = 0.0
    for done, spent in progress:
        productive += done
        wall += spent
    # Summed before dividing, so big workloads weigh more than small ones.
    return ratio(productive, wall)
