"""Reviewers teach the policy: their corrections propose a rule-table edit, an operator asks for
it, a second person approves it, and the next failure of that kind gets the new action."""

from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from rest_framework.test import APIClient

from fleet import services
from fleet.models import AuditEntry
from recovery_console.console import reviews
from remediation.models import Advice
from remediation.services.advice import advise
from tests.factories import AdviceFactory, AnomalyFactory, AttemptFactory, UserFactory

pytestmark = pytest.mark.django_db
NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
STORE = "c10d_store_error"


@pytest.fixture(autouse=True)
def frozen_time():
    with time_machine.travel(NOW, tick=False) as traveller:
        yield traveller


@pytest.fixture
def cluster():
    return services.create_cluster("user:admin", "research")


def store_failure(cluster, **fields):
    """A lost c10d store on a fresh attempt of its own: what the default table restarts."""
    return AnomalyFactory(
        attempt=AttemptFactory(workload__cluster=cluster, cluster=cluster),
        category="interconnect_network",
        attribution="interconnect",
        signature=STORE,
        root_cause=STORE,
        implicated_hosts=[],
        node_local=False,
        summary="the c10d store could not be reached",
        evidence=[{"source": "log", "text": "DistStoreError: Timed out", "signature": STORE}],
        **fields,
    )


def client_for(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def test_corrections_propose_a_rule_that_a_second_person_approves_and_the_loop_then_uses(
    cluster,
) -> None:
    ray = UserFactory(username="ray", roles=["reviewer"])
    sam = UserFactory(username="sam", roles=["reviewer"])
    alice = UserFactory(username="alice", roles=["operator"])
    bob = UserFactory(username="bob", roles=["approver"])
    for _ in range(3):
        advice = AdviceFactory(
            anomaly=store_failure(cluster), action="restart", category="interconnect_network"
        )
        for reviewer in (ray, sam):
            reviews.label_advice(reviewer, advice, agrees=False, preferred_action="stop")

    listed = client_for(alice).get("/api/v1/clusters/research/rule-proposals/")
    assert listed.status_code == 200
    [proposal] = listed.json()
    assert (proposal["key"], proposal["action"], proposal["chose"], proposal["labels"]) == (
        STORE,
        "stop",
        6,
        6,
    )
    assert proposal["agreement_now"] == 0.0 and proposal["agreement_with_rule"] == 1.0

    # A reviewer cannot ask; an operator asks and the change waits.
    refused = client_for(ray).post("/api/v1/clusters/research/rule-proposals/ask/", {"key": STORE})
    assert refused.status_code == 403
    asked = client_for(alice).post(
        "/api/v1/clusters/research/rule-proposals/ask/", {"key": STORE}, format="json"
    )
    assert asked.status_code == 202, asked.content
    request = asked.json()
    assert request["status"] == "pending"
    cluster.refresh_from_db()
    assert STORE not in (cluster.policy.get("rules") or {})

    # Until it is approved, the same failure is still restarted.
    before = advise(store_failure(cluster), NOW)
    assert (before.action, before.rule) == ("restart", "interconnect_network")

    # Not by the one who asked; then by an approver.
    own = client_for(alice).post(f"/api/v1/policy-requests/{request['id']}/approve/")
    assert own.status_code == 403
    approved = client_for(bob).post(f"/api/v1/policy-requests/{request['id']}/approve/")
    assert approved.status_code == 200, approved.content
    cluster.refresh_from_db()
    assert cluster.policy["rules"][STORE] == "stop"
    verbs = set(AuditEntry.objects.values_list("verb", flat=True))
    assert {"rule_proposal.asked", "policy_request.created", "policy_request.approved"} <= verbs
    # The rule is in place: nothing is proposed any more.
    assert client_for(alice).get("/api/v1/clusters/research/rule-proposals/").json() == []

    # The next failure of that kind is stopped, by the new rule.
    advice = advise(store_failure(cluster), NOW + timedelta(minutes=1))
    assert (advice.action, advice.rule) == ("stop", STORE)


def test_asking_for_a_rule_the_labels_do_not_propose_is_refused(cluster) -> None:
    alice = UserFactory(username="alice", roles=["operator", "reviewer"])
    advice = AdviceFactory(anomaly=store_failure(cluster), action="restart")
    reviews.label_advice(alice, advice, agrees=False, preferred_action="stop")
    answer = client_for(alice).post(
        "/api/v1/clusters/research/rule-proposals/ask/", {"key": STORE}, format="json"
    )
    assert answer.status_code == 409
    assert "propose no rule" in answer.json()["detail"]
    assert not Advice.objects.filter(action="stop").exists()
