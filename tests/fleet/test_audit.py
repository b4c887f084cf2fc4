import threading

import pytest
from django.core.management import CommandError, call_command
from django.db import connection, connections

from recovery_console.fleet import audit
from recovery_console.fleet.models import AppendOnlyError, AuditEntry

pytestmark = pytest.mark.django_db


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
    )
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
    with pytest.raises(CommandError, match=r"ends at #2 but #3 was written"):
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
