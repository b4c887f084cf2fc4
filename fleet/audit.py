"""The append-only, hash-chained audit trail: appending rows, verifying the chain, anchors.

Each entry is sealed with an HMAC (``settings.AUDIT_HMAC_KEY``, kept outside the database), so
someone who can write the table but not read the key cannot re-hash a changed row. What the
key cannot show (the newest rows removed and the head rewound, or the table emptied) an
*anchor* shows: the head's sequence and hash, exported periodically outside the database and
checked by ``verify_audit --anchor``.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Model
from django.db.models.signals import post_save
from django.utils import timezone

from .models import Attempt, AuditChainHead, AuditEntry, Cluster, Workload

GENESIS_HASH = "0" * 64
logger = logging.getLogger(__name__)


def entry(
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
    """An entry not yet in the trail; ``append`` numbers, seals and stores it."""
    return AuditEntry(
        at=at,  # type: ignore[misc]  # None until ``append`` stamps it
        actor=actor,
        cluster=cluster,
        workload=workload,
        attempt=attempt,
        verb=verb,
        object_type=(obj._meta.model_name or "") if obj is not None else "",
        object_id=str(obj.pk) if obj is not None else "",
        # A JSON round trip now, so the hash covers exactly what the database returns.
        payload=json.loads(json.dumps(payload or {}, default=str)),
    )


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
    new = entry(
        actor,
        verb,
        obj,
        cluster=cluster,
        workload=workload,
        attempt=attempt,
        payload=payload,
        at=at,
    )
    return append([new])[0]


def append(entries: Sequence[AuditEntry]) -> Sequence[AuditEntry]:
    """Append entries in one insert and one head update. Call it last in the caller's
    transaction: the head stays locked until the commit, and every writer waits for it."""
    if not entries:
        return entries
    now = timezone.now()
    with transaction.atomic():
        head = _locked_head()
        sequence, previous = head.last_sequence, head.last_hash
        for new in entries:
            sequence += 1
            new.sequence, new.previous_hash = sequence, previous
            new.at = new.at or now
            new.entry_hash = previous = entry_hash(new)
        AuditEntry.objects.bulk_create(entries)
        AuditChainHead.objects.filter(pk=head.pk).update(last_sequence=sequence, last_hash=previous)
        # bulk_create sends no signal; whatever hangs off new entries (notifications) still hears.
        for new in entries:
            post_save.send(AuditEntry, instance=new, created=True, raw=False, using="default")
    return entries


def _locked_head() -> AuditChainHead:
    # The head row comes from a migration; recreate it if the table was emptied. Create it
    # before locking: a locking read of a missing row takes a gap lock and deadlocks writers.
    if not AuditChainHead.objects.filter(pk=1).exists():
        AuditChainHead.objects.get_or_create(pk=1)
    return AuditChainHead.objects.select_for_update().get(pk=1)


def entry_content(entry: Any) -> bytes:
    """The canonical bytes an entry's hash covers (its content and the previous hash)."""
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
    return canonical.encode()


def entry_hash(entry: Any, key: str | None = None) -> str:
    """HMAC-SHA256 of the entry's content under the audit key (the setting by default)."""
    secret = (settings.AUDIT_HMAC_KEY if key is None else key).encode()
    return hmac.new(secret, entry_content(entry), hashlib.sha256).hexdigest()


def legacy_entry_hash(entry: Any) -> str:
    """The plain SHA-256 entries had before they were keyed (migration 0009 re-seals them)."""
    return hashlib.sha256(entry_content(entry)).hexdigest()


# --- verifying ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Anchor:
    """The head as it was at one moment, kept outside the database."""

    sequence: int
    hash: str
    exported_at: str = ""


@dataclass(frozen=True)
class ChainReport:
    """The outcome of verifying the chain: how many rows were checked and the first break."""

    checked: int
    broken_sequence: int | None = None
    broken_entry_id: int | None = None
    problem: str = ""
    anchors_checked: int = 0

    @property
    def intact(self) -> bool:
        return self.broken_sequence is None


def verify_chain(batch_size: int = 2000, anchors: Sequence[Anchor] = ()) -> ChainReport:
    """Walk the trail in order and name the first row whose content, link or number is wrong,
    then check that the trail ends at its head and holds every anchor."""
    by_sequence = {a.sequence: a for a in anchors}
    expected_previous, expected_sequence, checked = GENESIS_HASH, 1, 0
    # One snapshot for the head and the rows: a write committing meanwhile is in neither.
    with _consistent_read():
        head = AuditChainHead.objects.filter(pk=1).first()
        for row in _entries_in_order(batch_size):
            problem = _problem_with(row, expected_sequence, expected_previous)
            anchor = by_sequence.get(row.sequence)
            if not problem and anchor is not None and anchor.hash != row.entry_hash:
                problem = (
                    f"it does not match the anchor exported {anchor.exported_at or '(no date)'}"
                    " (the trail was re-hashed from here or earlier)"
                )
            if problem:
                return ChainReport(checked, row.sequence, row.pk, problem)
            expected_previous, expected_sequence = row.entry_hash, row.sequence + 1
            checked += 1
    last = expected_sequence - 1
    if head is not None and (head.last_sequence, head.last_hash) != (last, expected_previous):
        return ChainReport(
            checked,
            expected_sequence,
            None,
            f"the trail ends at #{last} but the head says #{head.last_sequence} was written",
        )
    beyond = [a for a in anchors if a.sequence > last]
    if beyond:
        latest = max(beyond, key=lambda a: a.sequence)
        return ChainReport(
            checked,
            last + 1,
            None,
            f"the trail ends at #{last} but the anchor exported "
            f"{latest.exported_at or '(no date)'} says #{latest.sequence} was written "
            "(entries were removed)",
        )
    return ChainReport(checked, anchors_checked=len(anchors))


@contextmanager
def _consistent_read() -> Iterator[None]:
    outermost = not connection.in_atomic_block
    with transaction.atomic():
        # Django runs MySQL at READ COMMITTED, where each query sees a new snapshot; REPEATABLE
        # READ gives the whole walk the one taken at its first read. SQLite's is already one.
        if outermost and connection.vendor == "mysql":
            with connection.cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        yield


def _problem_with(row: AuditEntry, sequence: int, previous: str) -> str:
    if row.sequence != sequence:
        return f"entry #{sequence} is missing (the next row is #{row.sequence})"
    if row.previous_hash != previous:
        return "its link to the previous entry does not match (a row before it was changed)"
    if not hmac.compare_digest(entry_hash(row), row.entry_hash):
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


# --- anchors ------------------------------------------------------------------------------


class AnchorError(Exception):
    """No anchor could be exported or read."""


def current_anchor() -> Anchor:
    """The head, once its own entry checks out (an anchor of a forged head proves nothing)."""
    with _consistent_read():
        head = AuditChainHead.objects.filter(pk=1).first()
        sequence, last_hash = (head.last_sequence, head.last_hash) if head else (0, GENESIS_HASH)
        row = AuditEntry.objects.filter(sequence=sequence).first()
    if sequence and (row is None or row.entry_hash != last_hash or entry_hash(row) != last_hash):
        raise AnchorError(f"the head (#{sequence}) does not match its entry: run verify_audit")
    return Anchor(sequence, last_hash, timezone.now().isoformat(timespec="seconds"))


def export_anchor(path: str | os.PathLike[str] | None) -> Anchor:
    """Append the current anchor to ``path`` (JSON lines), if given, and to the log."""
    anchor = current_anchor()
    line = json.dumps(
        {"sequence": anchor.sequence, "hash": anchor.hash, "exported_at": anchor.exported_at}
    )
    if path:
        try:
            with Path(path).open("a", encoding="utf-8") as out:
                out.write(line + "\n")
                out.flush()
                os.fsync(out.fileno())
        except OSError as exc:
            raise AnchorError(f"cannot write the anchor to {path}: {exc}") from exc
    # The log is shipped elsewhere too: a second copy out of the database's reach.
    logger.info("audit anchor %s", line)
    return anchor


def read_anchors(path: str | os.PathLike[str]) -> list[Anchor]:
    """The anchors in a file ``export_anchor`` wrote; a line that is not one is refused."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise AnchorError(f"cannot read the anchor file {path}: {exc}") from exc
    return [_anchor_of(line, n, path) for n, line in enumerate(lines, 1) if line.strip()]


def _anchor_of(line: str, n: int, path: object) -> Anchor:
    try:
        data = json.loads(line)
        anchor = Anchor(int(data["sequence"]), str(data["hash"]), str(data.get("exported_at", "")))
    except (ValueError, TypeError, KeyError) as exc:
        raise AnchorError(f"{path} line {n} is not an anchor: {exc}") from exc
    if anchor.sequence < 0 or len(anchor.hash) != 64:
        raise AnchorError(f"{path} line {n} is not an anchor (sequence or hash out of shape)")
    return anchor


# --- the database's own refusal -----------------------------------------------------------

AUDIT_TABLE = "recovery_console_auditentry"
# MySQL/MariaDB only: the database itself refuses to change or remove a row, whichever
# client asks (SQLite has no users to keep apart; the model refuses there).
APPEND_ONLY_TRIGGERS = {
    f"{AUDIT_TABLE}_no_update": "UPDATE",
    f"{AUDIT_TABLE}_no_delete": "DELETE",
}


def install_append_only_triggers(execute: Any, vendor: str) -> None:
    if vendor != "mysql":
        return
    for name, event in APPEND_ONLY_TRIGGERS.items():
        execute(
            f"CREATE TRIGGER {name} BEFORE {event} ON {AUDIT_TABLE} FOR EACH ROW "
            f"SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'audit entries are append-only: "
            f"{event} refused'"
        )


def drop_append_only_triggers(execute: Any, vendor: str) -> None:
    if vendor != "mysql":
        return
    for name in APPEND_ONLY_TRIGGERS:
        execute(f"DROP TRIGGER IF EXISTS {name}")
