"""Anomalies: each detected interruption of an attempt, stored once and sharpened as evidence
arrives. The only writer of ``Anomaly`` rows; each write records its audit entry and tells the
pages showing it, after the commit."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime
from enum import StrEnum
from typing import Any

from django.db import transaction

from detection.core.interruption import Interruption
from detection.core.lifecycle import Successor, healthy_because
from fleet import audit, events, services
from fleet.core.taxonomy import Kind
from fleet.models import Attempt, Workload

from .models import Anomaly, AnomalyFamily, AnomalyOutcome, AnomalyState, AttemptMonitor

ACTOR = "system:detection"
MAX_EVIDENCE_KEPT = 50


class Recorded(StrEnum):
    """What recording an interruption did to the attempt's anomaly."""

    NEW = "new"
    SHARPENED = "sharpened"
    UNCHANGED = "unchanged"
    # Printed by the teardown of an attempt our own controller ended: not a failure.
    OUR_TEARDOWN = "our_teardown"


def family_of(interruption: Interruption) -> AnomalyFamily:
    """A slowdown is its own family; crashes and hangs are the attempt's interruption."""
    if interruption.kind is Kind.STRAGGLER:
        return AnomalyFamily.STRAGGLER
    return AnomalyFamily.INTERRUPTION


def record_interruption(
    attempt: Attempt, interruption: Interruption, now: datetime
) -> tuple[Anomaly | None, Recorded]:
    """Create the attempt's anomaly of this family, or merge new evidence into it.

    The diagnosis kept is the stronger one: more confident, or naming hosts where the other
    named none (a hang seen in the log, then the Xid that caused it in the metrics). Evidence
    from after our own controller requeued or cancelled the attempt is its teardown (SIGTERM,
    srun's "Terminated", a cancelled step): recorded nowhere (``Recorded.OUR_TEARDOWN``). Call
    it inside the transaction that advances what was read."""
    family = family_of(interruption)
    found = _fields_of(interruption)
    evidence = [item.to_record() for item in interruption.evidence]
    first = interruption.first_evidence_at or now
    # Shards of a scan may record on one attempt at once (its logs in its own shard, the
    # scheduler's word in shard 0): the attempt's row lock makes them take turns.
    ended_by_us = (
        Attempt.objects.select_for_update()
        .filter(pk=attempt.pk)
        .values_list("ended_by_us_at", flat=True)
        .first()
    )
    if ended_by_us is not None and first >= ended_by_us:
        return None, Recorded.OUR_TEARDOWN
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


# --- the end of an interruption ------------------------------------------------------------


def resolve_settled(cluster_id: int, now: datetime) -> int:
    """Resolve each open anomaly whose interruption is over, with its outcome: its run was
    stopped (on advice, or its job cancelled) or completed, or an attempt after it ran healthy
    (``core.lifecycle``). Judged on the anomaly's own lineage, not the workload's newest
    attempt: a cancelled job of the same name still in the queue says nothing of this one.
    A handful of queries however many anomalies are open; only those resolved are written."""
    open_rows: list[dict[str, Any]] = [
        dict(row)
        for row in Anomaly.objects.filter(cluster_id=cluster_id, state=AnomalyState.OPEN).values(
            "pk", "workload_id", "attempt_id", "family", "detected_at"
        )
    ]
    if not open_rows:
        return 0
    workload_ids = {row["workload_id"] for row in open_rows}
    stops = {
        pk: (at, reason)
        for pk, at, reason in Workload.objects.filter(
            pk__in=workload_ids, stopped_at__isnull=False
        ).values_list("pk", "stopped_at", "stopped_reason")
    }
    attempts = _attempts_from(open_rows, workload_ids)
    steps = dict(
        AttemptMonitor.objects.filter(attempt_id__in=[a.pk for a in attempts.values()]).values_list(
            "attempt_id", "last_step"
        )
    )
    interrupted = {r["attempt_id"] for r in open_rows if r["family"] == AnomalyFamily.INTERRUPTION}
    by_workload: dict[int, list[Attempt]] = defaultdict(list)
    for attempt in attempts.values():
        by_workload[attempt.workload_id].append(attempt)
    outcomes: dict[int, tuple[str, str]] = {}
    for row in open_rows:
        failed = attempts[row["attempt_id"]]
        latest = _last_after(failed, by_workload[row["workload_id"]])
        stopped_at, reason = stops.get(row["workload_id"], (None, ""))
        if stopped_at is not None and latest.first_seen_at <= stopped_at:
            outcomes[row["pk"]] = (AnomalyOutcome.STOPPED, reason)  # stopped on advice
            continue
        found = _outcome(failed, latest, steps, interrupted, now)
        if found is not None:
            outcomes[row["pk"]] = found
    return _resolve(outcomes, now)


def _attempts_from(rows: list[dict[str, Any]], workload_ids: set[int]) -> dict[int, Attempt]:
    """The interrupted attempts and every attempt of their workloads seen since the oldest."""
    since = Attempt.objects.filter(pk__in=[r["attempt_id"] for r in rows]).order_by("first_seen_at")
    oldest = since.values_list("first_seen_at", flat=True).first()
    found = Attempt.objects.filter(workload_id__in=workload_ids, first_seen_at__gte=oldest).only(
        "workload_id", "job_id", "attempt_index", "first_seen_at", "state", "started_at"
    )
    return {a.pk: a for a in found}


def _last_after(failed: Attempt, attempts: list[Attempt]) -> Attempt:
    """The newest attempt that came after ``failed`` in its lineage (seen later, or a requeue
    of the same job); ``failed`` itself when none has."""
    after = [
        a
        for a in attempts
        if a.first_seen_at > failed.first_seen_at
        or (a.job_id == failed.job_id and a.attempt_index > failed.attempt_index)
    ]
    return max(after, key=lambda a: (a.first_seen_at, a.attempt_index), default=failed)


def _outcome(
    failed: Attempt,
    latest: Attempt,
    steps: dict[int, int | None],
    interrupted: set[int],
    now: datetime,
) -> tuple[str, str] | None:
    label = f"job {latest.job_id}#{latest.attempt_index}"
    if latest.state == "CANCELLED":
        return AnomalyOutcome.STOPPED, f"{label} was cancelled"
    if latest.pk == failed.pk:
        if latest.state == "COMPLETED":  # a slowdown, say, of a run that then finished
            return AnomalyOutcome.COMPLETED, f"{label} completed"
        return None  # nothing came after the interrupted attempt yet
    successor = Successor(
        label=label,
        state=latest.state,
        started_at=latest.started_at,
        last_step=steps.get(latest.pk),
        interrupted=latest.pk in interrupted,
    )
    why = healthy_because(successor, steps.get(failed.pk), now)
    return (AnomalyOutcome.RECOVERED, why) if why else None


def _resolve(outcomes: dict[int, tuple[str, str]], now: datetime) -> int:
    if not outcomes:
        return 0
    resolved = 0
    with transaction.atomic():
        # Locked and re-read: a scan sharpening one meanwhile keeps its evidence, and an
        # anomaly resolved by another worker is not resolved twice.
        rows = Anomaly.objects.select_for_update().filter(
            pk__in=list(outcomes), state=AnomalyState.OPEN
        )
        entries = []
        touched: dict[int, set[int]] = defaultdict(set)
        for anomaly in rows.order_by("pk"):
            outcome, why = outcomes[anomaly.pk]
            anomaly.state, anomaly.outcome, anomaly.resolved_at = (
                AnomalyState.RESOLVED,
                outcome,
                now,
            )
            anomaly.resolution = why[: Anomaly._meta.get_field("resolution").max_length]
            anomaly.save(update_fields=["state", "outcome", "resolution", "resolved_at"])
            entry = audit.entry(
                ACTOR,
                "anomaly.resolved",
                anomaly,
                payload={"outcome": outcome, "resolution": anomaly.resolution},
            )
            entry.cluster_id, entry.workload_id = anomaly.cluster_id, anomaly.workload_id
            entry.attempt_id = anomaly.attempt_id
            entries.append(entry)
            touched[anomaly.cluster_id].add(anomaly.workload_id)
            resolved += 1
        audit.append(entries)
        for cluster_id, workload_ids in touched.items():
            events.send_workloads_changed(cluster_id, sorted(workload_ids))
    return resolved
