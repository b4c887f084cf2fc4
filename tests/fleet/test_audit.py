import hashlib
import json
import threading
from datetime import UTC, datetime
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.db import DatabaseError, connection, connections
from django.db.migrations.executor import MigrationExecutor

from fleet import audit
from fleet.models import AppendOnlyError, AuditChainHead, AuditEntry

pytestmark = pytest.mark.django_db
T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def append(count: int, actor: str = "user:alice") -> list[AuditEntry]:
    return [audit.record(actor, "test.did", payload={"n": n}) for n in range(count)]


def tamper(sql: str, params: list[object]) -> None:
    """Change rows behind the model's back, as someone with database access could."""
    with connection.cursor() as cursor:
        cursor.execute(sql.format(table=AuditEntry._meta.db_table), params)


def test_each_entry_links_to_the_hash_of_the_one_before() -> None:
    first, second, third = append(3)
    assert first.previous_hash == audit.GENESIS_HASH
    assert second.previous_hash == first.entry_hash
    assert third.previous_hash == second.entry_hash
    assert [e.sequence for e in (first, second, third)] == [1, 2, 3]


def test_verify_audit_reports_an_intact_chain(capsys: pytest.CaptureFixture[str]) -> None:
    append(5)
    call_command("verify_audit")
    assert "5 entries verified" in capsys.readouterr().out


def test_verify_audit_names_the_row_whose_payload_was_altered() -> None:
    entries = append(5)
    tamper("UPDATE {table} SET payload = %s WHERE id = %s", ['{"n": 99}', entries[2].pk])
    with pytest.raises(CommandError, match=r"entry #3 .*row was altered"):
        call_command("verify_audit")


def test_verify_audit_notices_a_rewritten_row_with_a_recomputed_hash() -> None:
    entries = append(4)
    forged = AuditEntry.objects.get(pk=entries[1].pk)
    forged.actor = "user:mallory"
    tamper(
        "UPDATE {table} SET actor = %s, entry_hash = %s WHERE id = %s",
        ["user:mallory", audit.entry_hash(forged), forged.pk],
    )  # even with the key, the next row's link gives it away
    with pytest.raises(CommandError, match=r"entry #3 .*link to the previous entry"):
        call_command("verify_audit")


def test_verify_audit_notices_a_deleted_row() -> None:
    entries = append(4)
    tamper("DELETE FROM {table} WHERE id = %s", [entries[1].pk])
    with pytest.raises(CommandError, match=r"entry #2 is missing"):
        call_command("verify_audit")


def test_verify_audit_notices_the_newest_rows_removed() -> None:
    entries = append(3)
    tamper("DELETE FROM {table} WHERE id = %s", [entries[2].pk])
    with pytest.raises(CommandError, match=r"ends at #2 but the head says #3 was written"):
        call_command("verify_audit")


def test_an_entry_cannot_be_updated_through_the_model() -> None:
    (entry,) = append(1)
    entry.actor = "user:mallory"
    with pytest.raises(AppendOnlyError):
        entry.save()


def test_an_entry_cannot_be_deleted_through_the_model() -> None:
    (entry,) = append(1)
    with pytest.raises(AppendOnlyError):
        entry.delete()


def test_the_manager_refuses_bulk_updates_and_deletes() -> None:
    append(2)
    with pytest.raises(AppendOnlyError):
        AuditEntry.objects.filter(verb="test.did").update(actor="x")
    with pytest.raises(AppendOnlyError):
        AuditEntry.objects.all().delete()
    assert AuditEntry.objects.filter(actor="user:alice").count() == 2


@pytest.mark.django_db(transaction=True)
def test_concurrent_writers_never_fork_the_chain() -> None:
    errors: list[BaseException] = []

    def writer(name: str) -> None:
        try:
            append(15, actor=f"worker:{name}")
        except BaseException as exc:  # noqa: BLE001 - surfaced by the assertion below
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=writer, args=(str(i),)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    report = audit.verify_chain()
    assert report.intact, report.problem
    assert report.checked == 60


# --- tampering by someone with SQL access to the tables ------------------------------------


def rehash_from(sequence: int, actor: str, seal) -> None:  # type: ignore[no-untyped-def]
    """Change one row, then re-hash it and every row after it with ``seal`` and move the
    head along: what someone who can write the tables and knows the algorithm can do."""
    previous = (
        AuditEntry.objects.get(sequence=sequence - 1).entry_hash
        if sequence > 1
        else (audit.GENESIS_HASH)
    )
    for row in AuditEntry.objects.filter(sequence__gte=sequence).order_by("sequence"):
        if row.sequence == sequence:
            row.actor = actor
        row.previous_hash = previous
        row.entry_hash = previous = seal(row)
        tamper(
            "UPDATE {table} SET actor = %s, previous_hash = %s, entry_hash = %s WHERE id = %s",
            [row.actor, row.previous_hash, row.entry_hash, row.pk],
        )
    set_head(row.sequence, previous)


def set_head(sequence: int, last_hash: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {AuditChainHead._meta.db_table} SET last_sequence = %s, last_hash = %s",  # noqa: S608
            [sequence, last_hash],
        )


def truncate_after(sequence: int) -> None:
    """Delete the newest rows and rewind the head to the last one kept."""
    tamper("DELETE FROM {table} WHERE sequence > %s", [sequence])
    kept = AuditEntry.objects.filter(sequence=sequence).first()
    set_head(sequence, kept.entry_hash if kept else audit.GENESIS_HASH)


def plain_sha256(row: AuditEntry) -> str:
    return hashlib.sha256(audit.entry_content(row)).hexdigest()


def test_a_row_changed_and_the_trail_rehashed_without_the_key_is_caught() -> None:
    append(6)
    rehash_from(3, "user:mallory", plain_sha256)
    with pytest.raises(CommandError, match=r"entry #3 .*content does not match its hash"):
        call_command("verify_audit")


def test_a_rehash_with_a_guessed_key_is_caught() -> None:
    append(4)
    rehash_from(2, "user:mallory", lambda row: audit.entry_hash(row, key="guessed"))
    with pytest.raises(CommandError, match=r"entry #2 .*content does not match its hash"):
        call_command("verify_audit")


@pytest.fixture
def anchor_file(tmp_path: Path) -> Path:
    return tmp_path / "audit-anchors.jsonl"


def test_the_anchor_catches_the_newest_rows_removed_and_the_head_rewound(anchor_file) -> None:
    append(5)
    call_command("export_audit_anchor", file=str(anchor_file))
    append(2)
    truncate_after(3)
    call_command("verify_audit")  # the chain alone cannot tell: it is intact up to its head
    with pytest.raises(CommandError, match=r"ends at #3 but the anchor .* says #5 was written"):
        call_command("verify_audit", anchor=str(anchor_file))


def test_the_anchor_catches_an_emptied_trail(anchor_file) -> None:
    append(3)
    call_command("export_audit_anchor", file=str(anchor_file))
    truncate_after(0)
    with pytest.raises(CommandError, match=r"ends at #0 but the anchor .* says #3 was written"):
        call_command("verify_audit", anchor=str(anchor_file))


def test_the_anchor_catches_a_rehash_even_with_the_key(anchor_file) -> None:
    append(5)
    call_command("export_audit_anchor", file=str(anchor_file))
    rehash_from(2, "user:mallory", audit.entry_hash)
    with pytest.raises(CommandError, match=r"entry #5 .*does not match the anchor"):
        call_command("verify_audit", anchor=str(anchor_file))


def test_anchors_accumulate_and_an_intact_trail_matches_them_all(anchor_file, capsys) -> None:
    append(2)
    call_command("export_audit_anchor", file=str(anchor_file))
    append(3)
    call_command("export_audit_anchor", file=str(anchor_file))
    lines = [json.loads(line) for line in anchor_file.read_text().splitlines()]
    assert [line["sequence"] for line in lines] == [2, 5]
    call_command("verify_audit", anchor=str(anchor_file))
    assert "5 entries verified, 2 anchors matched" in capsys.readouterr().out


def test_a_head_that_does_not_match_its_entry_gets_no_anchor(anchor_file) -> None:
    append(3)
    set_head(3, "f" * 64)
    with pytest.raises(CommandError, match=r"head \(#3\) does not match its entry"):
        call_command("export_audit_anchor", file=str(anchor_file))
    assert not anchor_file.exists()


def test_a_malformed_anchor_file_is_refused_naming_the_line(anchor_file) -> None:
    anchor_file.write_text('{"sequence": 1, "hash": "' + "a" * 64 + '"}\nnot json\n')
    with pytest.raises(CommandError, match=r"line 2 is not an anchor"):
        call_command("verify_audit", anchor=str(anchor_file))


@pytest.mark.skipif(
    connection.vendor == "sqlite", reason="the in-memory test database locks tables"
)
@pytest.mark.django_db(transaction=True)
def test_verifying_while_others_write_gives_no_false_alarm() -> None:
    append(20)
    done = threading.Event()
    errors: list[BaseException] = []

    def writer() -> None:
        try:
            while not done.is_set():
                audit.record("worker:loop", "test.did", payload={"n": 1})
        except BaseException as exc:  # noqa: BLE001 - surfaced by the assertion below
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=writer) for _ in range(2)]
    for thread in threads:
        thread.start()
    try:
        reports = [audit.verify_chain(batch_size=7) for _ in range(40)]
    finally:
        done.set()
        for thread in threads:
            thread.join()
    assert errors == []
    assert [r.problem for r in reports if not r.intact] == []
    assert audit.verify_chain().intact


@pytest.mark.skipif(connection.vendor != "mysql", reason="the triggers are MySQL/MariaDB only")
@pytest.mark.django_db(transaction=True)
def test_the_database_refuses_to_update_or_delete_an_entry() -> None:
    (entry,) = append(1)
    with connection.cursor() as cursor:
        audit.install_append_only_triggers(cursor.execute, connection.vendor)
    try:
        for sql in (
            "UPDATE {table} SET actor = 'x' WHERE id = %s",
            "DELETE FROM {table} WHERE id = %s",
        ):
            with pytest.raises(DatabaseError, match="append-only"):
                tamper(sql, [entry.pk])
        assert AuditEntry.objects.get().actor == "user:alice"
        audit.record("user:alice", "test.did")  # appending still works
    finally:
        with connection.cursor() as cursor:
            audit.drop_append_only_triggers(cursor.execute, connection.vendor)


@pytest.mark.skipif(connection.vendor != "mysql", reason="the triggers are MySQL/MariaDB only")
@pytest.mark.django_db(transaction=True)
def test_the_migrations_install_the_triggers() -> None:
    executor = MigrationExecutor(connection)
    executor.migrate([("recovery_console", "0009_audit_entries_keyed")])
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT trigger_name FROM information_schema.triggers WHERE event_object_table = %s",
            [AuditEntry._meta.db_table],
        )
        assert {row[0] for row in cursor.fetchall()} == set(audit.APPEND_ONLY_TRIGGERS)


@pytest.mark.django_db(transaction=True)
def test_entries_written_before_the_key_are_resealed_and_verify() -> None:
    executor = MigrationExecutor(connection)
    executor.migrate([("recovery_console", "0008_attempt_failed_at")])
    apps = executor.loader.project_state([("recovery_console", "0008_attempt_failed_at")]).apps
    Entry = apps.get_model("recovery_console", "AuditEntry")
    previous = audit.GENESIS_HASH
    for n in range(1, 4):  # as the previous release wrote them: plain SHA-256
        row = Entry(
            sequence=n,
            at=T0,
            actor="user:old",
            verb="old.did",
            object_type="",
            object_id="",
            payload={"n": n},
            previous_hash=previous,
        )
        row.entry_hash = previous = plain_sha256(row)
        row.save()
    set_head(3, previous)
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())

    report = audit.verify_chain()
    assert report.intact, report.problem
    note = AuditEntry.objects.get(sequence=4)
    assert (note.verb, note.payload["entries"], note.payload["previous_break"]) == (
        "audit.resealed",
        3,
        None,
    )
    assert note.payload["previous_head_sha256"] == previous


def test_beat_exports_an_anchor_to_the_configured_file(anchor_file, settings, caplog) -> None:
    from django_celery_beat.models import PeriodicTask

    from fleet.tasks import export_audit_anchor

    assert PeriodicTask.objects.filter(task="recovery_console.export_audit_anchor").exists()
    settings.AUDIT_ANCHOR_FILE = str(anchor_file)
    (*_, last) = append(3)
    with caplog.at_level("INFO", logger="fleet.audit"):
        assert export_audit_anchor.delay().get() == "audit anchor #3"
    assert json.loads(anchor_file.read_text())["hash"] == last.entry_hash
    assert last.entry_hash in caplog.text
