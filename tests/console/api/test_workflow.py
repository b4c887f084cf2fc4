"""The API's verbs, by role: labelling advice, the mode-approval workflow, cluster settings and
releasing nodes. Each answer is checked for its status and its body."""

import pytest
from django.contrib.auth import get_user_model

from fleet.models import AuditEntry, Cluster, ClusterMode
from recovery_console.console import approval, reviews
from recovery_console.console.models import ModeChangeRequest, Review
from remediation.models import NodeHealth
from tests.console.api.conftest import T0, advice_on
from tests.factories import NodeFactory

pytestmark = pytest.mark.django_db


def labelled(cluster, people, count: int, agreeing: bool = True) -> None:
    for _ in range(count):
        preferred = "" if agreeing else "restart"
        reviews.label_advice(
            people["rita"], advice_on(cluster), agrees=agreeing, preferred_action=preferred
        )


# --- labelling -------------------------------------------------------------------------------


def test_a_reviewer_labels_advice(api, cluster) -> None:
    advice = advice_on(cluster, action="restart")
    response = api("rita").post(
        f"/api/v1/advice/{advice.pk}/label/",
        {"agrees": False, "preferred_action": "stop", "comment": "bad config"},
        format="json",
    )
    assert response.status_code == 200
    body = response.json()
    assert {k: body[k] for k in ("advice", "reviewer", "agrees", "preferred_action")} == {
        "advice": advice.pk,
        "reviewer": "rita",
        "agrees": False,
        "preferred_action": "stop",
    }
    assert body["comment"] == "bad config"
    assert Review.objects.get().reviewer.username == "rita"


def test_agreeing_needs_no_preferred_action(api, cluster) -> None:
    advice = advice_on(cluster, action="restart")
    response = api("rita").post(f"/api/v1/advice/{advice.pk}/label/", {"agrees": True})
    assert response.status_code == 200
    assert response.json()["preferred_action"] == "restart"


def test_disagreeing_must_name_an_action(api, cluster) -> None:
    advice = advice_on(cluster)
    response = api("rita").post(f"/api/v1/advice/{advice.pk}/label/", {"agrees": False})
    assert response.status_code == 400
    assert response.json() == {"preferred_action": ["name the action you would have taken"]}


def test_agreeing_while_naming_another_action_is_a_400(api, cluster) -> None:
    advice = advice_on(cluster, action="restart")
    response = api("rita").post(
        f"/api/v1/advice/{advice.pk}/label/", {"agrees": True, "preferred_action": "stop"}
    )
    assert response.status_code == 400
    assert "contradiction" in response.json()["preferred_action"][0]


@pytest.mark.parametrize("who", ["carol", "olga", "dave"])
def test_only_reviewers_label(api, cluster, who) -> None:
    advice = advice_on(cluster)
    response = api(who).post(f"/api/v1/advice/{advice.pk}/label/", {"agrees": True})
    assert response.status_code == 403
    assert response.json() == {"detail": "this needs the reviewer role"}
    assert not Review.objects.exists()


def test_the_agreement_is_served_per_cluster_with_its_days(api, cluster, people) -> None:
    labelled(cluster, people, 3)
    response = api("carol").get("/api/v1/clusters/research/agreement/")
    assert response.status_code == 200
    body = response.json()
    assert {k: body[k] for k in ("agreed", "labelled", "rate", "met", "min_labelled")} == {
        "agreed": 3,
        "labelled": 3,
        "rate": 1.0,
        "met": False,
        "min_labelled": 50,
    }
    assert body["shortfall"].startswith("only 3 advices were labelled")
    assert len(body["by_day"]) == 28
    assert body["by_day"][-1]["labelled"] == 3


# --- requesting, approving, rejecting --------------------------------------------------------


def test_an_operator_requests_action_mode(api, cluster, people) -> None:
    labelled(cluster, people, 2)
    response = api("olga").post(
        "/api/v1/clusters/research/request-action-mode/", {"note": "canary"}, format="json"
    )
    assert response.status_code == 201
    body = response.json()
    assert {k: body[k] for k in ("cluster", "requested_by", "status", "labelled", "note")} == {
        "cluster": "research",
        "requested_by": "olga",
        "status": "pending",
        "labelled": 2,
        "note": "canary",
    }
    assert body["agreement_rate"] == 1.0
    assert body["decided_by"] is None


@pytest.mark.parametrize("who", ["carol", "rita", "dave"])
def test_only_operators_request_action_mode(api, cluster, who) -> None:
    response = api(who).post("/api/v1/clusters/research/request-action-mode/")
    assert response.status_code == 403
    assert response.json() == {"detail": "this needs the operator role"}


def test_a_second_request_is_a_conflict(api, cluster) -> None:
    api("olga").post("/api/v1/clusters/research/request-action-mode/")
    response = api("alice").post("/api/v1/clusters/research/request-action-mode/")
    assert response.status_code == 409
    assert "already pending" in response.json()["detail"]


def test_an_approver_approves_and_the_cluster_acts(api, cluster, people) -> None:
    labelled(cluster, people, 50)
    request = approval.request_action_mode(people["olga"], cluster)
    response = api("bob").post(f"/api/v1/mode-requests/{request.pk}/approve/")
    assert response.status_code == 200
    body = response.json()
    assert (body["status"], body["decided_by"], body["requested_by"]) == ("approved", "bob", "olga")
    assert Cluster.objects.get().mode == "action"
    assert api("carol").get("/api/v1/clusters/research/").json()["mode"] == "action"


def test_an_operator_cannot_approve(api, cluster, people) -> None:
    labelled(cluster, people, 50)
    request = approval.request_action_mode(people["alice"], cluster)
    response = api("olga").post(f"/api/v1/mode-requests/{request.pk}/approve/")
    assert response.status_code == 403
    assert response.json() == {"detail": "this needs the approver role"}
    assert ModeChangeRequest.objects.get().status == "pending"


def test_an_approver_cannot_approve_their_own_request(api, cluster, people) -> None:
    people["bob"].groups.add(*people["olga"].groups.all())  # bob is an operator too now
    labelled(cluster, people, 50)
    request = approval.request_action_mode(get_user_model().objects.get(username="bob"), cluster)
    response = api("bob").post(f"/api/v1/mode-requests/{request.pk}/approve/")
    assert response.status_code == 409
    assert response.json() == {
        "detail": "you asked for this change yourself: a second person with the approver role"
        " must approve it"
    }
    assert Cluster.objects.get().mode == "monitor"


def test_approval_below_the_threshold_is_a_conflict_with_the_reason(api, cluster, people) -> None:
    labelled(cluster, people, 10)
    request = approval.request_action_mode(people["olga"], cluster)
    response = api("bob").post(f"/api/v1/mode-requests/{request.pk}/approve/")
    assert response.status_code == 409
    assert response.json() == {
        "detail": "the agreement is below the policy's threshold: only 10 advices were labelled"
        " in the last 28 days; at least 50 are needed"
    }
    assert Cluster.objects.get().mode == "monitor"


def test_an_approver_rejects_with_a_reason(api, cluster, people) -> None:
    request = approval.request_action_mode(people["olga"], cluster)
    missing = api("bob").post(f"/api/v1/mode-requests/{request.pk}/reject/", {})
    assert missing.status_code == 400
    assert missing.json() == {"reason": ["This field is required."]}
    response = api("bob").post(
        f"/api/v1/mode-requests/{request.pk}/reject/", {"reason": "after the holidays"}
    )
    assert response.status_code == 200
    assert (response.json()["status"], response.json()["decision_note"]) == (
        "rejected",
        "after the holidays",
    )


def test_a_viewer_cannot_reject(api, cluster, people) -> None:
    request = approval.request_action_mode(people["olga"], cluster)
    response = api("carol").post(f"/api/v1/mode-requests/{request.pk}/reject/", {"reason": "no"})
    assert response.status_code == 403
    assert response.json() == {
        "detail": "rejecting a request for action mode needs the approver role"
    }


def test_mode_requests_are_listed_for_viewers(api, cluster, people) -> None:
    approval.request_action_mode(people["olga"], cluster)
    response = api("carol").get("/api/v1/mode-requests/", {"status": "pending"})
    assert response.status_code == 200
    assert [r["requested_by"] for r in response.json()["results"]] == ["olga"]


def test_an_operator_returns_the_cluster_to_monitor_mode_at_once(api, cluster) -> None:
    Cluster.objects.filter(pk=cluster.pk).update(mode=ClusterMode.ACTION)
    refused = api("bob").post("/api/v1/clusters/research/return-to-monitor/")
    assert refused.status_code == 403
    response = api("olga").post(
        "/api/v1/clusters/research/return-to-monitor/", {"reason": "canary misbehaved"}
    )
    assert response.status_code == 200
    assert response.json()["mode"] == "monitor"
    entry = AuditEntry.objects.get(verb="cluster.mode_changed")
    assert (entry.actor, entry.payload["reason"]) == ("user:olga", "canary misbehaved")


# --- cluster settings ------------------------------------------------------------------------


def test_an_operator_changes_the_policy(api, cluster) -> None:
    response = api("olga").patch(
        "/api/v1/clusters/research/",
        {"policy": {"max_restarts_per_workload": 4}, "partitions_allowlist": ["canary"]},
        format="json",
    )
    assert response.status_code == 200
    assert response.json()["policy"] == {"max_restarts_per_workload": 4}
    assert response.json()["partitions_allowlist"] == ["canary"]
    entry = AuditEntry.objects.get(verb="cluster.settings_changed")
    assert entry.actor == "user:olga"


def test_an_invalid_policy_is_a_400_naming_every_problem(api, cluster) -> None:
    response = api("olga").patch(
        "/api/v1/clusters/research/",
        {"policy": {"max_restarts_per_workload": -1, "colour": "red"}},
        format="json",
    )
    assert response.status_code == 400
    problems = response.json()["policy"]
    assert len(problems) == 2
    assert any("colour is not a policy setting" in p for p in problems)
    assert Cluster.objects.get().policy == {}


def test_the_mode_cannot_be_patched(api, cluster) -> None:
    response = api("olga").patch("/api/v1/clusters/research/", {"mode": "action"}, format="json")
    assert response.status_code == 200
    assert Cluster.objects.get().mode == "monitor"


@pytest.mark.parametrize("who", ["carol", "rita", "bob"])
def test_only_operators_change_settings(api, cluster, who) -> None:
    response = api(who).patch("/api/v1/clusters/research/", {"policy": {}}, format="json")
    assert response.status_code == 403
    assert response.json() == {"detail": "this needs the operator role"}


def test_put_changes_a_registration_and_needs_the_admin_role(api, cluster) -> None:
    response = api("olga").put("/api/v1/clusters/research/", {}, format="json")
    assert response.status_code == 403
    assert response.json() == {"detail": "this needs the admin role"}


# --- nodes -----------------------------------------------------------------------------------


def test_an_operator_releases_a_drained_node_with_a_reason(api, cluster) -> None:
    node = NodeFactory(cluster=cluster, name="n2", state="DRAINED")
    NodeHealth.objects.create(cluster=cluster, name="n2", state="drained", drained_at=T0)
    refused = api("carol").post(f"/api/v1/nodes/{node.pk}/release/", {"reason": "GPU swapped"})
    assert refused.status_code == 403
    blank = api("olga").post(f"/api/v1/nodes/{node.pk}/release/", {"reason": " "})
    assert blank.status_code == 400
    assert blank.json() == {"reason": ["This field may not be blank."]}
    response = api("olga").post(f"/api/v1/nodes/{node.pk}/release/", {"reason": "GPU swapped"})
    assert response.status_code == 200
    health = response.json()["health"]
    assert (health["state"], health["released_by"], health["release_reason"]) == (
        "healthy",
        "user:olga",
        "GPU swapped",
    )


def test_releasing_a_node_without_a_record_is_a_404(api, cluster) -> None:
    node = NodeFactory(cluster=cluster, name="n3")
    response = api("olga").post(f"/api/v1/nodes/{node.pk}/release/", {"reason": "why not"})
    assert response.status_code == 404
    assert response.json() == {"detail": "No NodeHealth matches the given query."}
