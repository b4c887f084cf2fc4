"""Reading the console API: who may, what each resource says, and cursor pagination."""

import pytest

from fleet import services
from fleet.core.scheduler import ClusterSnapshot, NodeRecord, NodeState
from remediation.models import NodeHealth
from tests.console.api.conftest import T0, advice_on
from tests.factories import JobRecordFactory

pytestmark = pytest.mark.django_db

LISTS = [
    "/api/v1/clusters/",
    "/api/v1/workloads/",
    "/api/v1/attempts/",
    "/api/v1/anomalies/",
    "/api/v1/advice/",
    "/api/v1/reviews/",
    "/api/v1/mode-requests/",
    "/api/v1/nodes/",
    "/api/v1/audit-entries/",
    "/api/v1/notification-channels/",
]


@pytest.mark.parametrize("url", LISTS)
def test_anonymous_clients_must_authenticate(api, url) -> None:
    response = api(None).get(url)
    assert response.status_code == 401
    assert response.json() == {"detail": "Authentication credentials were not provided."}
    assert response["WWW-Authenticate"] == "Token"


@pytest.mark.parametrize("url", LISTS)
def test_a_user_without_a_role_reads_nothing(api, url) -> None:
    response = api("nobody").get(url)
    assert response.status_code == 403
    assert response.json() == {"detail": "this needs the viewer role"}


@pytest.mark.parametrize("url", LISTS)
@pytest.mark.parametrize("who", ["carol", "olga", "rita", "bob", "root"])
def test_every_role_reads_every_list(api, cluster, url, who) -> None:
    response = api(who).get(url)
    assert response.status_code == 200
    assert set(response.json()) == {"next", "previous", "results"}


def test_a_cluster_is_addressed_by_name(api, cluster) -> None:
    response = api("carol").get("/api/v1/clusters/research/")
    assert response.status_code == 200
    body = response.json()
    assert body["name"] == "research"
    assert body["mode"] == "monitor"
    assert body["policy"] == {}
    assert body["partitions_allowlist"] == []


def test_workloads_attempts_and_anomalies_carry_their_cluster_and_links(api, cluster) -> None:
    advice = advice_on(cluster)
    carol = api("carol")
    workload = carol.get("/api/v1/workloads/").json()["results"][0]
    assert (workload["id"], workload["cluster"], workload["state"]) == (
        advice.workload_id,
        "research",
        "running",
    )
    attempt = carol.get(f"/api/v1/attempts/{advice.attempt_id}/").json()
    assert (attempt["workload"], attempt["job_id"], attempt["nodes"]) == (
        advice.workload_id,
        advice.attempt.job_id,
        ["n1", "n2"],
    )
    anomaly = carol.get(f"/api/v1/anomalies/{advice.anomaly_id}/").json()
    assert (anomaly["kind"], anomaly["category"], anomaly["detection_latency_seconds"]) == (
        "crash",
        "gpu_hardware",
        4.0,
    )
    body = carol.get(f"/api/v1/advice/{advice.pk}/").json()
    assert (body["action"], body["exclude_nodes"], body["state"], body["anomaly"]) == (
        "restart_excluding_node",
        ["n2"],
        "proposed",
        advice.anomaly_id,
    )


def test_nodes_carry_their_health(api, cluster) -> None:
    nodes = (
        NodeRecord("n1", NodeState.IDLE, gpus=8, partitions=("gpu",)),
        NodeRecord("n2", NodeState.DRAINED, reason="xid", gpus=8, partitions=("gpu",)),
    )
    services.record_snapshot("test", cluster, ClusterSnapshot(T0, (), nodes))
    NodeHealth.objects.create(
        cluster=cluster, name="n2", state="drained", strikes=[{"anomaly": 1}], drained_at=T0
    )
    results = api("carol").get("/api/v1/nodes/").json()["results"]
    by_name = {n["name"]: n for n in results}
    assert by_name["n1"]["health"] is None
    assert by_name["n2"]["state"] == "DRAINED"
    assert by_name["n2"]["health"]["state"] == "drained"
    assert by_name["n2"]["health"]["strikes"] == [{"anomaly": 1}]
    one = api("carol").get(f"/api/v1/nodes/{by_name['n2']['id']}/").json()
    assert one["health"]["state"] == "drained"


def test_lists_are_cursor_paginated_without_gaps_or_repeats(api, cluster) -> None:
    jobs = tuple(JobRecordFactory(job_id=str(100 + n), name=f"run-{n}") for n in range(7))
    services.record_snapshot("test", cluster, ClusterSnapshot(T0, jobs, ()))
    carol = api("carol")
    page = carol.get("/api/v1/workloads/", {"page_size": 3}).json()
    seen = [w["key"] for w in page["results"]]
    assert page["previous"] is None
    while page["next"]:
        page = carol.get(page["next"]).json()
        seen += [w["key"] for w in page["results"]]
    assert seen == [f"run-{n}" for n in reversed(range(7))]


def test_a_bad_cursor_is_a_404_not_a_crash(api, cluster) -> None:
    response = api("carol").get("/api/v1/workloads/", {"cursor": "not-a-cursor"})
    assert response.status_code == 404
    assert response.json() == {"detail": "Invalid cursor"}
