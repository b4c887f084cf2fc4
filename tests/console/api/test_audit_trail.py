"""The audit trail over the API: JSON pages, CSV export and the chain's status."""

import csv
import io
import json

import pytest
from django.db import connection

from fleet import audit
from fleet.models import AuditEntry

pytestmark = pytest.mark.django_db


def append(count: int, verb: str = "test.did", actor: str = "user:alice") -> None:
    for n in range(count):
        audit.record(actor, verb, payload={"n": n})


def read_csv(response) -> list[dict[str, str]]:
    text = b"".join(response.streaming_content).decode()
    return list(csv.DictReader(io.StringIO(text)))


def test_the_trail_is_served_newest_first(api, cluster) -> None:
    append(3)
    response = api("carol").get("/api/v1/audit-entries/", {"verb": "test.did"})
    assert response.status_code == 200
    results = response.json()["results"]
    assert [e["payload"] for e in results] == [{"n": 2}, {"n": 1}, {"n": 0}]
    first = results[-1]
    assert first["actor"] == "user:alice"
    assert len(first["entry_hash"]) == 64


def test_the_trail_streams_as_csv_with_the_same_filters(api, cluster) -> None:
    append(3)
    append(2, verb="other.thing")
    response = api("carol").get("/api/v1/audit-entries/", {"format": "csv", "verb": "test.did"})
    assert response.status_code == 200
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    assert response["Content-Disposition"] == 'attachment; filename="audit-trail.csv"'
    rows = read_csv(response)
    assert [json.loads(r["payload"]) for r in rows] == [{"n": 2}, {"n": 1}, {"n": 0}]
    assert set(rows[0]) >= {"sequence", "at", "actor", "verb", "entry_hash", "previous_hash"}


def test_csv_is_also_negotiated_by_the_accept_header(api, cluster) -> None:
    append(1)
    response = api("carol").get("/api/v1/audit-entries/", HTTP_ACCEPT="text/csv")
    assert response.status_code == 200
    assert [r["verb"] for r in read_csv(response)] == ["test.did", "cluster.created"]


def test_csv_starts_at_the_cursor_of_a_json_page(api, cluster) -> None:
    append(5)
    carol = api("carol")
    page = carol.get("/api/v1/audit-entries/", {"verb": "test.did", "page_size": 2}).json()
    cursor = page["next"].split("cursor=")[1].split("&")[0]
    response = carol.get(
        "/api/v1/audit-entries/", {"verb": "test.did", "format": "csv", "cursor": cursor}
    )
    assert [json.loads(r["payload"]) for r in read_csv(response)] == [{"n": 2}, {"n": 1}, {"n": 0}]


def test_csv_streams_a_long_trail_in_batches(api, cluster) -> None:
    append(2500)
    response = api("carol").get("/api/v1/audit-entries/", {"format": "csv", "verb": "test.did"})
    sequences = [int(r["sequence"]) for r in read_csv(response)]
    assert len(sequences) == 2500
    assert sequences == sorted(sequences, reverse=True)


def test_csv_cells_that_look_like_formulas_are_defused(api, cluster) -> None:
    audit.record("=HYPERLINK(evil)", "test.did")
    response = api("carol").get("/api/v1/audit-entries/", {"format": "csv", "verb": "test.did"})
    assert read_csv(response)[0]["actor"] == "'=HYPERLINK(evil)"


def test_a_refused_csv_request_gets_an_error_not_the_trail(api, cluster) -> None:
    append(1)
    response = api("nobody").get("/api/v1/audit-entries/", {"format": "csv"})
    assert response.status_code == 403
    # A refusal is JSON whatever the export asked for: a CSV of it would read as data.
    assert response["Content-Type"] == "application/json"
    assert response.json() == {"detail": "this needs the viewer role"}


def test_the_chain_status_says_intact(api, cluster) -> None:
    append(3)
    response = api("carol").get("/api/v1/audit-entries/chain/")
    assert response.status_code == 200
    assert response.json() == {
        "intact": True,
        "checked": AuditEntry.objects.count(),
        "broken_sequence": None,
        "broken_entry_id": None,
        "problem": "",
    }


def test_the_chain_status_names_the_first_altered_entry(api, cluster) -> None:
    append(3)
    victim = AuditEntry.objects.get(verb="test.did", payload__n=1)
    with connection.cursor() as cursor:
        table = AuditEntry._meta.db_table
        cursor.execute(f"UPDATE {table} SET actor = %s WHERE id = %s", ["user:mallory", victim.pk])  # noqa: S608
    body = api("carol").get("/api/v1/audit-entries/chain/").json()
    assert (body["intact"], body["broken_sequence"], body["broken_entry_id"]) == (
        False,
        victim.sequence,
        victim.pk,
    )
    assert body["problem"] == "its content does not match its hash (the row was altered)"


def test_anonymous_clients_cannot_see_the_chain(api) -> None:
    response = api(None).get("/api/v1/audit-entries/chain/")
    assert response.status_code == 401
