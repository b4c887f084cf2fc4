"""Weakening the approval gate takes two people: a change of its thresholds, or any change of
the policy or allowlist of a cluster in action mode, waits as a request until a second person
with the approver role approves it. Other monitor-mode changes apply at once."""

import pytest
from django.test import Client

from fleet.models import AuditEntry, Cluster, ClusterMode
from recovery_console.console import reviews
from recovery_console.console.models import PolicyChangeRequest
from tests.console.api.conftest import advice_on
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db
WEAK_GATE = {"policy": {"approval_min_agreement": 0, "approval_min_labelled": 1}}


def patch(api, who, body):
    return api(who).patch("/api/v1/clusters/research/", body, format="json")


def test_weakening_the_gate_alone_is_not_applied_until_a_second_person_approves(
    api, cluster, people
) -> None:
    response = patch(api, "olga", WEAK_GATE)
    assert response.status_code == 202
    body = response.json()
    assert (body["status"], body["requested_by"], body["changes"]) == (
        "pending",
        "olga",
        WEAK_GATE,
    )
    assert body["why"] == ["it changes the approval gate for action mode"]
    cluster.refresh_from_db()
    assert cluster.policy == {}

    # The tester's path: one label, and the cluster still cannot enter action mode.
    reviews.label_advice(people["rita"], advice_on(cluster), agrees=True, preferred_action="")
    asked = api("olga").post("/api/v1/clusters/research/request-action-mode/", {}, format="json")
    approved = api("bob").post(f"/api/v1/mode-requests/{asked.json()['id']}/approve/")
    assert approved.status_code == 409
    assert "threshold" in approved.json()["detail"]
    assert Cluster.objects.get().mode == ClusterMode.MONITOR

    decided = api("bob").post(f"/api/v1/policy-requests/{body['id']}/approve/")
    assert (decided.status_code, decided.json()["status"]) == (200, "approved")
    assert Cluster.objects.get().policy == WEAK_GATE["policy"]
    verbs = list(AuditEntry.objects.order_by("sequence").values_list("verb", "actor"))
    assert ("policy_request.created", "user:olga") in verbs
    assert ("policy_request.approved", "user:bob") in verbs
    assert ("cluster.settings_changed", "user:bob") in verbs


def test_the_requester_cannot_approve_their_own_change(api, cluster, people) -> None:
    erin = Client()
    erin.force_login(UserFactory(username="erin", roles=["operator", "approver"]))
    asked = erin.patch("/api/v1/clusters/research/", WEAK_GATE, content_type="application/json")
    assert asked.status_code == 202
    own = erin.post(f"/api/v1/policy-requests/{asked.json()['id']}/approve/")
    assert own.status_code == 409
    assert "a second person" in own.json()["detail"]
    assert Cluster.objects.get().policy == {}
    assert AuditEntry.objects.filter(verb="policy_request.approval_refused").exists()
    other = api("dave").post(f"/api/v1/policy-requests/{asked.json()['id']}/approve/")
    assert other.status_code == 200
    assert Cluster.objects.get().policy == WEAK_GATE["policy"]


def test_only_approvers_approve_a_settings_change(api, cluster) -> None:
    asked = patch(api, "olga", WEAK_GATE).json()
    response = api("alice").post(f"/api/v1/policy-requests/{asked['id']}/approve/")
    assert response.status_code == 403
    assert Cluster.objects.get().policy == {}


def test_a_monitor_mode_change_that_leaves_the_gate_alone_applies_at_once(api, cluster) -> None:
    body = {"policy": {"drain_after_strikes": 5, "approval_window_days": 28}}
    response = patch(api, "olga", body)
    assert response.status_code == 200
    assert response.json()["policy"] == {"drain_after_strikes": 5, "approval_window_days": 28}
    assert not PolicyChangeRequest.objects.exists()


@pytest.mark.parametrize(
    "body", [{"policy": {"drain_after_strikes": 5}}, {"partitions_allowlist": ["gpu"]}]
)
def test_in_action_mode_any_policy_or_allowlist_change_waits_for_approval(
    api, cluster, body
) -> None:
    cluster.mode = ClusterMode.ACTION
    cluster.save()
    response = patch(api, "olga", body)
    assert response.status_code == 202
    assert "is in action mode" in response.json()["why"][0]
    cluster.refresh_from_db()
    assert (cluster.policy, cluster.partitions_allowlist) == ({}, [])


def test_an_invalid_gate_change_is_a_400_and_no_request(api, cluster) -> None:
    response = patch(api, "olga", {"policy": {"approval_min_agreement": "all"}})
    assert response.status_code == 400
    assert "policy" in response.json()
    assert not PolicyChangeRequest.objects.exists()


def test_one_pending_change_at_a_time(api, cluster) -> None:
    patch(api, "olga", WEAK_GATE)
    second = patch(api, "olga", {"policy": {"approval_min_labelled": 2}})
    assert second.status_code == 409
    assert "already waiting" in second.json()["detail"]


def test_approval_is_refused_when_the_policy_moved_since(api, cluster) -> None:
    asked = patch(api, "olga", WEAK_GATE).json()
    assert patch(api, "olga", {"policy": {"drain_after_strikes": 5}}).status_code == 200
    response = api("bob").post(f"/api/v1/policy-requests/{asked['id']}/approve/")
    assert response.status_code == 409
    assert "changed since this request" in response.json()["detail"]
    assert Cluster.objects.get().policy == {"drain_after_strikes": 5}


def test_the_settings_page_cannot_weaken_the_gate_alone(cluster, people) -> None:
    client = Client()
    client.force_login(people["olga"])
    form = {
        "partitions_allowlist": "",
        "policy": '{"approval_min_agreement": 0, "approval_min_labelled": 1}',
        "signatures": "",
        "progress_pattern": "",
        "hang": "",
        "straggler": "",
        "poll_seconds": "5",
        "scan_shards": "1",
    }
    response = client.post("/clusters/research/settings/", form)
    assert response.status_code == 302
    assert Cluster.objects.get().policy == {}
    assert PolicyChangeRequest.objects.get().status == "pending"
    page = client.get("/clusters/research/mode/").content.decode()
    assert 'id="pending-policy-request"' in page
