"""Diagnosing an attempt from the log lines its monitor kept: its failures, and the node-local
events that explain a hang or a slowdown."""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import Any

from detection.core.config import DetectorConfig
from detection.core.constants import DEFAULT_GPUS_PER_NODE, Role
from detection.core.context import DiagnosisContext
from detection.core.diagnosis import diagnose_lines
from detection.core.interruption import Evidence, HostOrigin, Interruption
from fleet.models import Attempt, Node

from ..anomalies import record_interruption
from ..models import AttemptMonitor
from .common import ScanSummary


def _diagnose_from_logs(
    attempt: Attempt,
    monitor: AttemptMonitor,
    now: datetime,
    config: DetectorConfig,
    summary: ScanSummary,
) -> None:
    found, evidence = _diagnose_kept(attempt, monitor, config)
    if not found.is_failure:
        return
    found = dataclasses.replace(
        found,
        first_evidence_at=min((e.at for e in evidence if e.at), default=now),
        occurrences=sum(
            1 for entry in monitor.matched_lines if entry.get("role") != Role.CONTEXT.value
        ),
    )
    summary.count(record_interruption(attempt, found, now))


def _explained_hang(
    attempt: Attempt, monitor: AttemptMonitor, hang: Interruption, config: DetectorConfig
) -> Interruption:
    """A silent job whose kept lines show a node-local event first (a link of one of its nodes
    went down) hangs because of that node: the hang is attributed to it."""
    if not monitor.matched_lines:
        return hang
    found, evidence = _diagnose_kept(attempt, monitor, config, silent=True)
    if not (found.is_failure and found.node_local and found.hosts):
        return hang
    return dataclasses.replace(
        found,
        kind=hang.kind,
        summary=f"{hang.summary}, after {found.summary[:1].lower()}{found.summary[1:]}",
        evidence=(*evidence, *hang.evidence),
        first_evidence_at=min(
            [e.at for e in evidence if e.at] + [hang.first_evidence_at or attempt.first_seen_at]
        ),
        job_id=hang.job_id,
    )


def _explained_slowdown(
    attempt: Attempt, monitor: AttemptMonitor, slow: Interruption, config: DetectorConfig
) -> Interruption:
    """A whole-job slowdown after a node-local event on one of its nodes (a link that flapped
    and came back at a lower rate, a CPU lockup) is that node's. With events on several nodes
    it stays the job's: the fabric, not a node, is then the likelier cause."""
    kept = monitor.matched_lines
    if slow.hosts or not kept:
        return slow
    scan = config.library.scan([entry["text"] for entry in kept], [entry["host"] for entry in kept])
    events = [g for g in scan.groups if g.role is Role.CONTEXT and g.implicates_node]
    hosts = {host for g in events for host in g.hosts} & set(attempt.nodes)
    if len(hosts) != 1:
        return slow
    (host,) = hosts
    event = next(g for g in events if host in g.hosts)
    line = kept[event.first_line - 1]
    return dataclasses.replace(
        slow,
        attribution=event.attribution,
        root_cause=f"straggler:{host}",
        summary=f"{slow.summary}, after an event on {host}: {event.description.rstrip('.')}",
        hosts=(host,),
        node_local=True,
        host_origins=((host, HostOrigin.STREAM),),
        evidence=(
            Evidence(
                at=datetime.fromisoformat(line["at"]),
                source="log",
                text=line["text"],
                host=host,
                signature=event.signature,
            ),
            *slow.evidence,
        ),
    )


def _diagnose_kept(
    attempt: Attempt, monitor: AttemptMonitor, config: DetectorConfig, *, silent: bool = False
) -> tuple[Interruption, tuple[Evidence, ...]]:
    """The diagnosis of the attempt's kept lines, its evidence numbered as the lines really
    were (the diagnosis numbers them within the kept excerpt)."""
    kept = monitor.matched_lines
    context = DiagnosisContext(nodes=tuple(attempt.nodes), tasks_per_node=_tasks_per_node(attempt))
    found = diagnose_lines(
        [entry["text"] for entry in kept],
        context,
        library=config.library,
        host_hints=[entry.get("host") for entry in kept],
        silent=silent,
    )
    evidence = tuple(
        _log_evidence(kept[item.line - 1], item.signature)
        for item in found.evidence
        if item.line is not None
    )
    return dataclasses.replace(found, evidence=evidence), evidence


def _log_evidence(entry: dict[str, Any], signature: str) -> Evidence:
    return Evidence(
        text=entry["text"],
        signature=signature,
        at=datetime.fromisoformat(entry["at"]),
        host=entry.get("host"),
        line=entry["seq"],
    )


def _tasks_per_node(attempt: Attempt) -> int:
    gpus = Node.objects.filter(
        cluster_id=attempt.cluster_id, name__in=attempt.nodes[:1]
    ).values_list("gpus", flat=True)
    return next(iter(gpus), 0) or DEFAULT_GPUS_PER_NODE
