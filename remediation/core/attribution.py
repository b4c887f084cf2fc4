"""Attribution: from an anomaly's evidence and the scheduler's view, the incident the policy
decides on, and an explanation a person can check.

Pure Python. Detection has already told initiating lines from cascades and mapped ranks to hosts
(``detection.diagnosis``); attribution keeps only nodes the attempt actually ran on, adds what the
scheduler knows (a node it marked down under a NODE_FAIL), and says how sure it is.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from .incident import Incident

CONFIDENCE_WORDS = {
    "established": "the log establishes it",
    "supported": "the evidence supports it",
    "hypothesis": "it is only a hypothesis",
}


@dataclass(frozen=True)
class AnomalyView:
    """The parts of a stored anomaly attribution reads."""

    kind: str
    category: str
    attribution: str
    confidence_label: str
    hosts: tuple[str, ...]
    root_cause: str
    summary: str
    evidence: Sequence[Mapping[str, object]]


@dataclass(frozen=True)
class Attribution:
    incident: Incident
    explanation: str
    outside_hosts: tuple[str, ...] = ()


def attribute(
    anomaly: AnomalyView,
    attempt_nodes: Sequence[str],
    unhealthy_nodes: Iterable[str] = (),
    partition: str = "",
    step: int | None = None,
) -> Attribution:
    """The incident to decide on: hosts limited to the attempt's nodes, with the scheduler's word
    on a node failure, and a paragraph saying what happened, on which evidence and how sure."""
    # Before the scheduler has reported where the attempt ran (it can fail within a second of
    # starting), the evidence's own hosts stand; once it has, only the attempt's nodes count.
    nodes = set(attempt_nodes) or set(anomaly.hosts)
    hosts = tuple(sorted(h for h in anomaly.hosts if h in nodes))
    outside = tuple(sorted(h for h in anomaly.hosts if h not in nodes))
    label, attribution = anomaly.confidence_label, anomaly.attribution
    down = sorted(nodes & set(unhealthy_nodes))
    if not hosts and anomaly.category == "node_or_process_failure" and len(down) == 1:
        hosts, attribution = (down[0],), "hardware"
        label = "supported" if label == "hypothesis" else label
    incident = Incident(
        kind=anomaly.kind,
        category=anomaly.category,
        attribution=attribution,
        confidence_label=label,
        hosts=hosts,
        root_cause=anomaly.root_cause,
        partition=partition,
        step=step,
    )
    return Attribution(incident, _explain(anomaly, incident, outside, down), outside)


def _explain(
    anomaly: AnomalyView, incident: Incident, outside: tuple[str, ...], down: list[str]
) -> str:
    parts = [
        f"{anomaly.kind.capitalize()} attributed to {incident.attribution} "
        f"({incident.category.replace('_', ' ')}): {anomaly.summary.rstrip('.')}."
    ]
    first = next(iter(anomaly.evidence), None)
    if first is not None:
        where = f" on {first['host']}" if first.get("host") else ""
        parts.append(
            f'First evidence ({first.get("source", "log")}{where}): "{first.get("text", "")}".'
        )
    if incident.hosts:
        parts.append(f"Implicated: {', '.join(incident.hosts)}.")
    elif down:
        parts.append(
            f"The scheduler reports {', '.join(down)} unhealthy, "
            "but nothing ties one node to this failure."
        )
    else:
        parts.append("No node is implicated.")
    if outside:
        parts.append(f"Also named but not part of this attempt: {', '.join(outside)}.")
    words = CONFIDENCE_WORDS.get(incident.confidence_label, "")
    parts.append(f"Confidence: {incident.confidence_label} ({words}).")
    return " ".join(parts)
