"""The Advisor API's snapshot endpoint: one bad job or node is named back, the rest recorded."""

import json

import pytest
from rest_framework.test import APIClient

from fleet import services
from fleet.models import Attempt, AuditEntry, Node
from remediation.services import issue_controller_token

pytestmark = pytest.mark.django_db
URL = "/api/v1/advisor/research/snapshots"


@pytest.fixture
def controller() -> APIClient:
    cluster = services.create_cluster("user:alice", "research")
    client = APIClient()
    secret = issue_controller_token("user:alice", cluster, "ctl").secret
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    return client


def job(job_id: str, **fields: object) -> dict[str, object]:
    return {"job_id": job_id, "name": f"run-{job_id}", "state": "RUNNING", **fields}


BAD_JOBS = {
    "name": job("10", name="n" * 201),
    "partition": job("11", partition="p" * 65),
    "reason": job("12", reason="bad \ud800 text"),
    "comment": job("13", comment='{"a": ' * 3000 + "1" + "}" * 3000),
    "comment ": job("14", comment='{"workload": "' + "w" * 201 + '"}'),
    "exit_code": job("15", exit_code=2**31),
    "signal": job("16", signal=-(2**31) - 1),
    "restart_count": job("17", restart_count=2**32),
    "nodes": job("18", nodes=["x" * 129]),
    "state": job("19", state="EXPLODED"),
    "job_id": job("1"),  # the good job 1 again
    "job_id ": job("\ud800"),
    "": "not a job",
}


def test_bad_jobs_and_nodes_are_named_back_and_the_good_ones_recorded(controller) -> None:
    good = [job("1"), job("2", comment='{"workload": "llama"}'), job("3")]
    nodes = [
        {"name": "gpu-1", "state": "IDLE", "gpus": 8},
        {"name": "gpu-2", "state": "IDLE", "gpus": 2**31},
        {"name": "gpu-1", "state": "DOWN"},
    ]
    snapshot = {
        "taken_at": "2026-12-01T12:00:00Z",
        "jobs": good + list(BAD_JOBS.values()),
        "nodes": nodes,
    }
    # Sent as a controller would: lone surrogates escaped in the JSON text.
    response = controller.post(URL, json.dumps(snapshot), content_type="application/json")

    assert response.status_code == 200, response.content[:500]
    body = response.json()
    assert (body["new_attempts"], body["changed_nodes"]) == (3, 1)
    assert sorted(Attempt.objects.values_list("job_id", flat=True)) == ["1", "2", "3"]
    assert list(Node.objects.values_list("name", "state")) == [("gpu-1", "IDLE")]
    named = [(r["kind"], r["index"], r["field"]) for r in body["rejected"]]
    expected_jobs = {("job", 3 + n, field.strip()) for n, field in enumerate(BAD_JOBS)}
    assert set(named) == expected_jobs | {("node", 1, "gpus"), ("node", 2, "name")}
    assert {r["id"] for r in body["rejected"] if r["kind"] == "job"} >= {"10", "13", "17"}
    assert all(r["problem"] for r in body["rejected"])
    audited = AuditEntry.objects.get(verb="snapshot.rejected")
    assert audited.payload["count"] == len(named)


MALFORMED = [
    {"jobs": [None, 5, "x"], "nodes": [None, 5, "x"]},
    {"jobs": [job("1", nodes="abc"), job("2", nodes=None), job("3", name=["x"])]},
    {"jobs": [job("1", start_time="0001-01-01T00:00:00+01:00"), job("2", held="maybe")]},
    {"jobs": [job("1", exit_code=1.5), job("2", exit_code="1e400"), job("3", comment={})]},
    {"jobs": [job("1", name="a\x00b"), job("2", comment='{"workload": 1e999}')]},
    {"jobs": [job("1", comment='{"workload": ' + "1" * 300 + "}")]},
    {"nodes": [{"name": "x", "state": "IDLE", "partitions": ["p" * 70]}]},
    {"nodes": [{"name": "x", "state": "IDLE", "reason": "r" * 300}, {"name": "", "state": "IDLE"}]},
]


@pytest.mark.parametrize("case", MALFORMED)
def test_no_malformed_job_or_node_gets_a_500(controller, case) -> None:
    snapshot = {"taken_at": "2026-12-01T12:00:00Z", "jobs": [], "nodes": [], **case}
    response = controller.post(URL, json.dumps(snapshot), content_type="application/json")
    assert response.status_code == 200, response.content[:300]
    assert set(response.json()) >= {"new_attempts", "rejected"}


def test_a_bad_envelope_is_still_a_400_naming_the_field(controller) -> None:
    response = controller.post(
        URL, {"taken_at": "2026-12-01T12:00:00Z", "jobs": "x", "nodes": []}, format="json"
    )
    assert response.status_code == 400
    assert set(response.json()) == {"jobs"}


def test_a_snapshot_posted_again_gets_the_same_verdicts_and_a_changed_job_is_checked_anew(
    controller,
) -> None:
    """Items as they were in the previous snapshot reuse its verdicts: the same rejections at
    their new positions, and a job that changed is checked again."""

    def post(jobs: list[object]) -> dict:
        snapshot = {"taken_at": "2026-12-01T12:00:00Z", "jobs": jobs, "nodes": []}
        response = controller.post(URL, json.dumps(snapshot), content_type="application/json")
        assert response.status_code == 200, response.content[:500]
        return response.json()

    def rejected(body: dict) -> list[tuple[str, int, str]]:
        return [(r["id"], r["index"], r["field"]) for r in body["rejected"]]

    first = post([job("1"), job("15", exit_code=2**31), job("2")])
    again = post([job("15", exit_code=2**31), job("1"), job("2")])
    fixed = post([job("1"), job("15", exit_code=3), job("2", state="EXPLODED")])
    assert rejected(first) == [("15", 1, "exit_code")]
    assert rejected(again) == [("15", 0, "exit_code")]
    assert rejected(fixed) == [("2", 2, "state")]
    assert Attempt.objects.get(job_id="15").exit_code == 3
