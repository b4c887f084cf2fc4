"""The Advisor API as a controller uses it: token scoping, replays and stale generations."""

from datetime import UTC, datetime

import pytest
from rest_framework.test import APIClient

from fleet.models import Attempt, AuditEntry, ClusterMode, Node
from remediation import services
from remediation.models import Advice, Milestone
from tests.remediation.conftest import T0, anomaly_on, running_attempt

pytestmark = pytest.mark.django_db


@pytest.fixture
def controller(cluster) -> APIClient:
    client = APIClient()
    secret = services.issue_controller_token("user:alice", cluster, "ctl").secret
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    return client


@pytest.fixture
def dispatched(cluster) -> Advice:
    cluster.mode = ClusterMode.ACTION
    cluster.save()
    anomaly_on(running_attempt(cluster))
    services.advise_cluster(cluster, T0)
    return Advice.objects.get()


SNAPSHOT = {
    "taken_at": "2026-11-29T12:00:00Z",
    "jobs": [
        {
            "job_id": "77_3",
            "name": "sweep",
            "state": "RUNNING",
            "partition": "gpu",
            "nodes": ["n3", "n4"],
            "restart_count": 0,
            "comment": '{"workload": "sweep"}',
            "start_time": "2026-11-29T11:59:00Z",
        }
    ],
    "nodes": [{"name": "n3", "state": "ALLOCATED", "gpus": 8, "partitions": ["gpu"]}],
}


def test_a_snapshot_is_recorded_and_its_replay_changes_nothing(cluster, controller) -> None:
    first = controller.post("/api/v1/advisor/research/snapshots", SNAPSHOT, format="json")
    again = controller.post("/api/v1/advisor/research/snapshots", SNAPSHOT, format="json")
    assert (first.status_code, first.json()) == (
        200,
        {"new_attempts": 1, "changed_attempts": 0, "changed_nodes": 0, "rejected": []},
    )
    assert (again.status_code, again.json()) == (
        200,
        {"new_attempts": 0, "changed_attempts": 0, "changed_nodes": 0, "rejected": []},
    )
    workload = Attempt.objects.get(job_id="77_3").workload
    assert (workload.key, workload.array.key) == ("sweep[3]", "sweep[]")  # a run of its own


def test_a_malformed_job_is_rejected_with_the_reason_and_records_nothing(
    cluster, controller
) -> None:
    bad = {
        **SNAPSHOT,
        "jobs": [{**SNAPSHOT["jobs"][0], "state": "EXPLODED", "job_id": "77; rm -rf /"}],
    }
    response = controller.post("/api/v1/advisor/research/snapshots", bad, format="json")
    assert response.status_code == 200
    (rejected,) = response.json()["rejected"]
    assert (rejected["kind"], rejected["index"]) == ("job", 0)
    assert rejected["field"] in {"state", "job_id"}
    assert not Attempt.objects.filter(job_id__startswith="77").exists()


def test_a_malformed_envelope_is_refused_naming_the_field(cluster, controller) -> None:
    response = controller.post(
        "/api/v1/advisor/research/snapshots", {**SNAPSHOT, "taken_at": "soon"}, format="json"
    )
    assert response.status_code == 400
    assert set(response.json()) == {"taken_at"}


def test_a_token_for_one_cluster_gets_403_on_another(cluster, controller) -> None:
    from fleet import services as console

    console.create_cluster("user:alice", "other")
    response = controller.get("/api/v1/advisor/other/advice?active=true")
    assert response.status_code == 403
    assert response.json()["detail"] == "this controller token belongs to another cluster"


def test_no_or_a_bad_token_is_refused(cluster) -> None:
    client = APIClient()
    assert client.get("/api/v1/advisor/research/advice").status_code in (401, 403)
    client.credentials(HTTP_AUTHORIZATION="Bearer rcc_not-a-token")
    response = client.get("/api/v1/advisor/research/advice")
    assert (response.status_code, response.json()["detail"]) == (
        401,
        "unknown or revoked controller token",
    )


def test_active_advice_carries_generation_desired_state_and_exclusions(
    dispatched, controller
) -> None:
    response = controller.get("/api/v1/advisor/research/advice?active=true")
    assert response.status_code == 200
    (advice,) = response.json()["results"]
    assert advice | {"decided_at": None} == advice | {
        "id": dispatched.pk,
        "generation": 1,
        "job_id": "100",
        "attempt_index": 0,
        "partition": "gpu",
        "action": "restart_excluding_node",
        "desired_state": "running_excluding",
        "exclude_nodes": ["n2"],
        "drain_nodes": [],
        "drain_reason": "",
        "enforce": True,
        "state": "dispatched",
        "decided_at": None,
    }


def test_monitor_mode_advice_is_published_with_enforce_false(cluster, controller) -> None:
    anomaly_on(running_attempt(cluster))
    services.advise_cluster(cluster, T0)
    (advice,) = controller.get("/api/v1/advisor/research/advice").json()["results"]
    assert (advice["enforce"], advice["state"]) == (False, "proposed")
    response = controller.put(
        f"/api/v1/advisor/research/advice/{advice['id']}/reconciliation",
        {"observed_generation": 1, "disposition": "pending"},
        format="json",
    )
    assert response.status_code == 403


def test_reconciliation_claims_converges_and_is_idempotent(dispatched, controller) -> None:
    url = f"/api/v1/advisor/research/advice/{dispatched.pk}/reconciliation"
    claim = controller.put(url, {"observed_generation": 1, "disposition": "pending"}, format="json")
    assert (claim.status_code, claim.json()["state"]) == (200, "claimed")
    stale = controller.put(
        url, {"observed_generation": 2, "disposition": "converged"}, format="json"
    )
    assert stale.status_code == 409 and "generation 1" in stale.json()["detail"]
    done = controller.put(
        url,
        {"observed_generation": 1, "disposition": "converged", "reason": "requeued"},
        format="json",
    )
    replay = controller.put(
        url,
        {"observed_generation": 1, "disposition": "converged", "reason": "requeued"},
        format="json",
    )
    assert done.json()["state"] == replay.json()["state"] == "executed"


def test_a_second_controller_gets_409_on_a_claimed_advice(cluster, dispatched, controller) -> None:
    url = f"/api/v1/advisor/research/advice/{dispatched.pk}/reconciliation"
    controller.put(url, {"observed_generation": 1, "disposition": "pending"}, format="json")
    rival = APIClient()
    secret = services.issue_controller_token("user:alice", cluster, "rival").secret
    rival.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    response = rival.put(url, {"observed_generation": 1, "disposition": "pending"}, format="json")
    assert (response.status_code, response.json()["detail"]) == (
        409,
        "another controller claimed this advice",
    )


def test_a_replayed_milestone_is_recorded_once(dispatched, controller) -> None:
    body = {
        "advice": dispatched.pk,
        "idempotency_key": "adv-1-g1-requeue_hold",
        "action": "requeue_hold",
        "at": "2026-11-29T12:00:05Z",
    }
    first = controller.post("/api/v1/advisor/research/milestones", body, format="json")
    again = controller.post("/api/v1/advisor/research/milestones", body, format="json")
    assert (first.status_code, again.status_code) == (201, 200)
    assert Milestone.objects.get().at == datetime(2026, 11, 29, 12, 0, 5, tzinfo=UTC)


def test_a_drain_milestone_marks_the_node_drained(dispatched, controller) -> None:
    body = {
        "advice": dispatched.pk,
        "idempotency_key": "drain-n2",
        "action": "drain_node",
        "at": "2026-11-29T12:00:05Z",
        "detail": {"node": "n2"},
    }
    assert (
        controller.post("/api/v1/advisor/research/milestones", body, format="json").status_code
        == 201
    )
    from remediation.models import NodeHealth

    assert NodeHealth.objects.get(name="n2").state == "drained"


def test_a_release_of_our_drain_is_carried_into_slurm_once_and_audited(
    cluster, dispatched, controller
) -> None:
    ours = "recovery-console advice 1: gpu_hardware: Xid 79 on n2"
    body = {
        "advice": dispatched.pk,
        "idempotency_key": "drain-n2",
        "action": "drain_node",
        "at": "2026-11-29T12:00:05Z",
        "detail": {"node": "n2", "reason": ours},
    }
    controller.post("/api/v1/advisor/research/milestones", body, format="json")
    url = "/api/v1/advisor/research/node-resumes"
    assert controller.get(url).json() == []  # drained, not released: nothing to resume
    services.release_node("user:bob", cluster, "n2", "GPU reseated, dcgmi diag passed")
    (asked,) = controller.get(url).json()
    assert (asked["node"], asked["reason"]) == ("n2", ours)
    report = {"node": "n2", "requested_at": asked["requested_at"], "outcome": "resumed"}
    assert controller.post(url, report, format="json").status_code == 204
    assert controller.post(url, report, format="json").status_code == 204  # a replay
    assert controller.get(url).json() == []
    (entry,) = AuditEntry.objects.filter(verb="node.resumed")
    assert entry.payload["outcome"] == "resumed" and entry.actor == "controller:research/ctl"


def test_a_release_of_a_persons_drain_asks_nothing_of_slurm(
    cluster, dispatched, controller
) -> None:
    body = {
        "advice": dispatched.pk,
        "idempotency_key": "drain-n2",
        "action": "drain_node",
        "at": "2026-11-29T12:00:05Z",
        "detail": {"node": "n2", "left_alone": "swapping the HCA"},
    }
    controller.post("/api/v1/advisor/research/milestones", body, format="json")
    health = services.release_node("user:bob", cluster, "n2", "HCA swapped")
    assert health.resume_requested_at is None
    assert controller.get("/api/v1/advisor/research/node-resumes").json() == []


def test_the_heartbeat_is_kept_for_the_console_and_the_watchdog(cluster, controller) -> None:
    response = controller.post(
        "/api/v1/advisor/research/heartbeat", {"transport": "ssh"}, format="json"
    )
    assert (response.status_code, response.json()) == (
        200,
        {"snapshot_age_s": None, "hold_timeouts": {"default": 300.0, "partitions": {}}},
    )
    token = cluster.controller_tokens.get()
    assert token.last_heartbeat_at is not None and token.heartbeat["transport"] == "ssh"
    assert token.heartbeat["role"] == "controller"
    assert Node.objects.filter(cluster=cluster).exists()


def test_an_address_sending_wrong_controller_tokens_is_refused_for_a_while(
    cluster, controller, settings
) -> None:
    settings.TOKEN_FAILURE_LIMIT = 3
    guesser = APIClient()
    guesser.credentials(HTTP_AUTHORIZATION="Bearer rcc_guess")
    for _ in range(3):
        assert guesser.get("/api/v1/advisor/research/advice").status_code == 401
    refused = controller.get("/api/v1/advisor/research/advice")  # the same address
    assert refused.status_code == 429
    assert refused.json() == {"detail": "Too many invalid tokens from this address."}
    elsewhere = controller.get("/api/v1/advisor/research/advice", REMOTE_ADDR="10.0.0.9")
    assert elsewhere.status_code == 200
