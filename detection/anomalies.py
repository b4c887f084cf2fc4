"""Anomalies: each detected interruption of an attempt, stored once and sharpened as evidence
arrives. The only writer of ``Anomaly`` rows; each write records its audit entry and tells the
pages showing it, after the commit."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from detection.core.interruption import Interruption
from recovery_console.fleet import audit, events, services
from recovery_console.fleet.core.taxonomy import Kind
from recovery_console.fleet.models import Attempt

from .models import Anomaly, AnomalyFamily

ACTOR = "system:detection"
MAX_EVIDENCE_KEPT = 50


class Recorded(StrEnum):
    """What recording an interruption did to the attempt's anomaly."""

    NEW = "new"
    SHARPENED = "sharpened"
    UNCHANGED = "unchanged"


def family_of(interruption: Interruption) -> AnomalyFamily:
    """A slowdown is its own family; crashes and hangs are the attempt's interruption."""
    if interruption.kind is Kind.STRAGGLER:
        return AnomalyFamily.STRAGGLER
    return AnomalyFamily.INTERRUPTION


def record_interruption(
    attempt: Attempt, interruption: Interruption, now: datetime
) -> tuple[Anomaly, Recorded]:
    """Create the attempt's anomaly of this family, or merge new evidence into it.

    The diagnosis kept is the stronger one: more confident, or naming hosts where the other
    named none (a hang seen in the log, then the Xid that caused it in the metrics). Call it
    inside the transaction that advances what was read."""
    family = family_of(interruption)
    found = _fields_of(interruption)
    evidence = [item.to_record() for item in interruption.evidence]
    first = interruption.first_evidence_at or now
    # The fleet keeps the earliest failure evidence of each attempt (time to resume runs from it).
    services.note_failure(attempt, first)
    anomaly = Anomaly.objects.select_for_update().filter(attempt=attempt, family=family).first()
    if anomaly is None:
        anomaly = _create(attempt, family, found, evidence, first, now, interruption.occurrences)
        return anomaly, Recorded.NEW
    return anomaly, _merge(anomaly, found, evidence, first, now, interruption.occurrences)


def _fields_of(interruption: Interruption) -> dict[str, Any]:
    return {
        "kind": interruption.kind.value,
        "category": interruption.category.value,
        "attribution": interruption.attribution.value,
        "confidence": interruption.confidence.value,
        "confidence_label": interruption.confidence.label.value,
        "implicated_hosts": sorted(interruption.hosts),
        "root_cause": interruption.root_cause[:200],
        "summary": interruption.summary[:500],
        "explanation": interruption.explanation,
        "signature": interruption.signature[:64],
        "node_local": interruption.node_local,
        "host_origins": [list(pair) for pair in interruption.host_origins],
        "pci_ids": list(interruption.pci_ids),
        "detail": interruption.detail[:500],
    }


def _create(
    attempt: Attempt,
    family: str,
    found: dict[str, Any],
    evidence: list[dict[str, Any]],
    first_evidence_at: datetime,
    now: datetime,
    occurrences: int,
) -> Anomaly:
    anomaly = Anomaly.objects.create(
        cluster_id=attempt.cluster_id,
        workload_id=attempt.workload_id,
        attempt=attempt,
        family=family,
        evidence=evidence,
        occurrences=max(occurrences, 1),
        first_evidence_at=first_evidence_at,
        detected_at=now,
        updated_at=now,
        **found,
    )
    audit.record(
        ACTOR,
        "anomaly.detected",
        anomaly,
        cluster=attempt.cluster,
        workload=attempt.workload,
        attempt=attempt,
        payload={
            **found,
            "first_evidence_at": first_evidence_at.isoformat(),
            "detected_at": now.isoformat(),
        },
    )
    events.send_anomaly(attempt.cluster_id, attempt.workload_id, anomaly.pk)
    return anomaly


def _merge(
    anomaly: Anomaly,
    found: dict[str, Any],
    evidence: list[dict[str, Any]],
    first_evidence_at: datetime,
    now: datetime,
    occurrences: int,
) -> Recorded:
    sharper = _is_sharper(found, anomaly)
    known = {(e.get("source"), e.get("text")) for e in anomaly.evidence}
    added = [e for e in evidence if (e.get("source"), e.get("text")) not in known]
    if not sharper and not added:
        if occurrences > anomaly.occurrences:
            Anomaly.objects.filter(pk=anomaly.pk).update(occurrences=occurrences)
        return Recorded.UNCHANGED
    before = {k: getattr(anomaly, k) for k in found}
    if sharper:
        for name, value in found.items():
            setattr(anomaly, name, value)
    anomaly.evidence = (anomaly.evidence + added)[:MAX_EVIDENCE_KEPT]
    anomaly.first_evidence_at = min(anomaly.first_evidence_at, first_evidence_at)
    anomaly.occurrences = max(anomaly.occurrences, occurrences)
    anomaly.updated_at = now
    anomaly.save()
    changed = {
        k: {"from": before[k], "to": getattr(anomaly, k)}
        for k in found
        if before[k] != getattr(anomaly, k)
    }
    if not changed:
        # Only new evidence: kept, but nothing a reader of the trail needs to hear about.
        return Recorded.UNCHANGED
    audit.record(
        ACTOR,
        "anomaly.sharpened",
        anomaly,
        cluster=anomaly.cluster,
        workload=anomaly.workload,
        attempt=anomaly.attempt,
        payload=changed,
    )
    events.send_anomaly(anomaly.cluster_id, anomaly.workload_id, anomaly.pk)
    return Recorded.SHARPENED


def _is_sharper(found: dict[str, Any], anomaly: Anomaly) -> bool:
    if found["implicated_hosts"] and not anomaly.implicated_hosts and found["confidence"] >= 0.5:
        return True
    if anomaly.implicated_hosts and not found["implicated_hosts"]:
        return False
    return bool(found["confidence"] > anomaly.confidence)
