"""The append-only, hash-chained audit trail: appending a row and verifying the chain."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.db import transaction
from django.db.models import Model
from django.utils import timezone

from .models import Attempt, AuditChainHead, AuditEntry, Cluster, Workload

GENESIS_HASH = "0" * 64


def record(
    actor: str,
    verb: str,
    obj: Model | None = None,
    *,
    cluster: Cluster | None = None,
    workload: Workload | None = None,
    attempt: Attempt | None = None,
    payload: dict[str, Any] | None = None,
    at: datetime | None = None,
) -> AuditEntry:
    """Append one entry. Runs inside the caller's transaction, so the entry commits (or rolls
    back) with the change it describes."""
    with transaction.atomic():
        head = _locked_head()
        entry = AuditEntry(
            sequence=head.last_sequence + 1,
            at=at or timezone.now(),
            actor=actor,
            cluster=cluster,
            workload=workload,
            attempt=attempt,
            verb=verb,
            object_type=(obj._meta.model_name or "") if obj is not None else "",
            object_id=str(obj.pk) if obj is not None else "",
            # A JSON round trip now, so the hash covers exactly what the database returns.
            payload=json.loads(json.dumps(payload or {}, default=str)),
            previous_hash=head.last_hash,
        )
        entry.entry_hash = entry_hash(entry)
        entry.save(force_insert=True)
        AuditChainHead.objects.filter(pk=head.pk).update(
            last_sequence=entry.sequence, last_hash=entry.entry_hash
        )
    return entry


def _locked_head() -> AuditChainHead:
    # The head row comes from a migration; recreate it if the table was emptied. Create it
    # before locking: a locking read of a missing row takes a gap lock and deadlocks writers.
    if not AuditChainHead.objects.filter(pk=1).exists():
        AuditChainHead.objects.get_or_create(pk=1)
    return AuditChainHead.objects.select_for_update().get(pk=1)


def entry_hash(entry: AuditEntry) -> str:
    """SHA-256 over the entry's content and the previous entry's hash."""
    content = {
        "sequence": entry.sequence,
        "at": entry.at.astimezone(UTC).isoformat(timespec="microseconds"),
        "actor": entry.actor,
        "cluster": entry.cluster_id,
        "workload": entry.workload_id,
        "attempt": entry.attempt_id,
        "verb": entry.verb,
        "object_type": entry.object_type,
        "object_id": entry.object_id,
        "payload": entry.payload,
        "previous_hash": entry.previous_hash,
    }
    canonical = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


@dataclass(frozen=True)
class ChainReport:
    """The outcome of verifying the chain: how many rows were checked and the first break."""

    checked: int
    broken_sequence: int | None = None
    broken_entry_id: int | None = None
    problem: str = ""

    @property
    def intact(self) -> bool:
        return self.broken_sequence is None


def verify_chain(batch_size: int = 2000) -> ChainReport:
    """Walk the trail in order and name the first row whose content, link or number is wrong."""
    expected_previous, expected_sequence, checked = GENESIS_HASH, 1, 0
    for entry in _entries_in_order(batch_size):
        problem = _problem_with(entry, expected_sequence, expected_previous)
        if problem:
            return ChainReport(checked, entry.sequence, entry.pk, problem)
        expected_previous, expected_sequence = entry.entry_hash, entry.sequence + 1
        checked += 1
    head = AuditChainHead.objects.filter(pk=1).first()
    if head is not None and head.last_sequence != expected_sequence - 1:
        return ChainReport(
            checked,
            expected_sequence,
            None,
            f"the trail ends at #{expected_sequence - 1} but #{head.last_sequence} was written",
        )
    return ChainReport(checked)


def _problem_with(entry: AuditEntry, sequence: int, previous: str) -> str:
    if entry.sequence != sequence:
        return f"entry #{sequence} is missing (the next row is #{entry.sequence})"
    if entry.previous_hash != previous:
        return "its link to the previous entry does not match (a row before it was changed)"
    if entry_hash(entry) != entry.entry_hash:
        return "its content does not match its hash (the row was altered)"
    return ""


def _entries_in_order(batch_size: int) -> Iterator[AuditEntry]:
    # Keyset pagination: constant memory and no long-running cursor on a large trail.
    last = 0
    while True:
        batch = list(AuditEntry.objects.filter(sequence__gt=last).order_by("sequence")[:batch_size])
        yield from batch
        if len(batch) < batch_size:
            return
        last = batch[-1].sequence
