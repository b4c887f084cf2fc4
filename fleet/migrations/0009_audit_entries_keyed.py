"""Audit entries were hashed with plain SHA-256; from here each is sealed with an HMAC under
``AUDIT_HMAC_KEY`` (set it before running this). The existing trail is checked as it was, then
re-sealed in order, so it verifies under the key, and a last entry records the re-seal: how
many entries, the old head's hash (to compare with anything exported before) and whether the
old chain was intact. A broken old chain is re-sealed too, and that entry names the break."""

from django.db import migrations
from django.utils import timezone

from fleet.audit import GENESIS_HASH, entry_hash, legacy_entry_hash

BATCH = 2000


def reseal(apps, old_hash, new_hash):
    Entry = apps.get_model("recovery_console", "AuditEntry")
    Head = apps.get_model("recovery_console", "AuditChainHead")
    old_previous = new_previous = GENESIS_HASH
    expected, count, problem = 1, 0, None
    while True:
        rows = list(Entry.objects.filter(sequence__gt=expected - 1).order_by("sequence")[:BATCH])
        for row in rows:
            if problem is None:
                problem = _problem(row, expected, old_previous, old_hash)
            old_previous, expected, count = row.entry_hash, row.sequence + 1, count + 1
            row.previous_hash = new_previous
            row.entry_hash = new_previous = new_hash(row)
        Entry.objects.bulk_update(rows, ["previous_hash", "entry_hash"])
        if len(rows) < BATCH:
            break
    head, _ = Head.objects.get_or_create(pk=1)
    if problem is None and (head.last_sequence, head.last_hash) != (expected - 1, old_previous):
        problem = f"the trail ended at #{expected - 1} but the head said #{head.last_sequence}"
    Head.objects.filter(pk=1).update(last_sequence=expected - 1, last_hash=new_previous)
    return count, old_previous, problem, new_previous


def _problem(row, sequence, previous, old_hash):
    if row.sequence != sequence:
        return f"entry #{sequence} was missing (the next row was #{row.sequence})"
    if row.previous_hash != previous or old_hash(row) != row.entry_hash:
        return f"entry #{row.sequence} (row id {row.pk}) did not verify"
    return None


def forward(apps, schema_editor):
    count, old_head, problem, previous = reseal(apps, legacy_entry_hash, entry_hash)
    if not count:
        return  # a new database: nothing to re-seal, nothing to record
    Entry = apps.get_model("recovery_console", "AuditEntry")
    note = Entry(
        sequence=count + 1,
        at=timezone.now(),
        actor="system:migration",
        verb="audit.resealed",
        object_type="",
        object_id="",
        payload={"entries": count, "previous_head_sha256": old_head, "previous_break": problem},
        previous_hash=previous,
    )
    note.entry_hash = entry_hash(note)
    note.save(force_insert=True)
    apps.get_model("recovery_console", "AuditChainHead").objects.filter(pk=1).update(
        last_sequence=note.sequence, last_hash=note.entry_hash
    )


def backward(apps, schema_editor):
    reseal(apps, entry_hash, legacy_entry_hash)


class Migration(migrations.Migration):
    dependencies = [("recovery_console", "0008_attempt_failed_at")]
    operations = [migrations.RunPython(forward, backward)]
