"""The review queue and the mode page: labels, requests, approvals and refusals."""

import pytest
from django.test import Client

from fleet import services
from fleet.models import AuditEntry, Cluster
from recovery_console.console import reviews
from recovery_console.console.models import ModeChangeRequest, Review
from remediation.models import Advice
from tests.factories import AdviceFactory, UserFactory, WorkloadFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def cluster() -> Cluster:
    return services.create_cluster(
        "user:admin", "research", policy={"approval_min_labelled": 3, "approval_min_agreement": 0.9}
    )


def advice_on(cluster: Cluster, n: int) -> list[Advice]:
    workload = WorkloadFactory(cluster=cluster)
    return [AdviceFactory(anomaly__attempt__workload=workload) for _ in range(n)]


def login(username: str, *roles: str) -> Client:
    client = Client()
    client.force_login(UserFactory(username=username, roles=roles))
    return client


def text(response) -> str:
    return response.content.decode()


# --- the review queue ------------------------------------------------------------------------


def test_the_queue_lists_advice_waiting_for_my_label_with_the_keys(cluster) -> None:
    first, second = advice_on(cluster, 2)
    page = text(login("rita", "reviewer").get("/reviews/"))
    assert f'data-advice="{first.pk}"' in page and f'data-advice="{second.pk}"' in page
    assert "<kbd>j</kbd>" in page and "<kbd>a</kbd>" in page
    assert 'data-plotly="agreement-chart"' in page


def test_agreeing_from_the_keyboard_script_records_a_label(cluster) -> None:
    (advice,) = advice_on(cluster, 1)
    client = login("rita", "reviewer")
    response = client.post(
        f"/reviews/advice/{advice.pk}/label",
        {"verdict": "agree"},
        HTTP_ACCEPT="application/json",
    )
    assert response.status_code == 200 and response.json() == {
        "advice": advice.pk,
        "ok": True,
        "error": "",
    }
    review = Review.objects.get(advice=advice)
    assert (review.agrees, review.preferred_action) == (True, advice.action)
    assert f'data-advice="{advice.pk}"' not in text(client.get("/reviews/_queue"))


def test_disagreeing_needs_the_action_I_would_have_taken(cluster) -> None:
    (advice,) = advice_on(cluster, 1)
    client = login("rita", "reviewer")
    url = f"/reviews/advice/{advice.pk}/label"
    refused = client.post(url, {"verdict": "disagree"}, HTTP_ACCEPT="application/json")
    assert refused.status_code == 400 and "Choose the action" in refused.json()["error"]
    form = {"verdict": "disagree", "preferred_action": "stop", "comment": "a bad config"}
    assert client.post(url, form, HTTP_ACCEPT="application/json").status_code == 200
    review = Review.objects.get(advice=advice)
    assert (review.agrees, review.preferred_action, review.comment) == (
        False,
        "stop",
        "a bad config",
    )


def test_a_plain_form_post_labels_and_returns_to_the_queue(cluster) -> None:
    (advice,) = advice_on(cluster, 1)
    response = login("rita", "reviewer").post(
        f"/reviews/advice/{advice.pk}/label", {"verdict": "agree"}, follow=True
    )
    assert response.redirect_chain[-1][0] == "/reviews/"
    assert f"Labelled advice {advice.pk}" in text(response)


def test_viewers_cannot_label(cluster) -> None:
    (advice,) = advice_on(cluster, 1)
    response = login("carol", "viewer").post(
        f"/reviews/advice/{advice.pk}/label", {"verdict": "agree"}
    )
    assert response.status_code == 403
    assert not Review.objects.exists()


# --- the mode page ---------------------------------------------------------------------------


def label_all(cluster: Cluster, agree: bool = True) -> None:
    reviewer = UserFactory(username="rita", roles=["reviewer"])
    for advice in Advice.objects.filter(cluster=cluster):
        reviews.label_advice(
            reviewer, advice, agrees=agree, preferred_action="" if agree else "stop"
        )


def test_the_mode_page_shows_the_measured_agreement(cluster) -> None:
    advice_on(cluster, 4)
    label_all(cluster)
    page = text(login("carol", "viewer").get("/clusters/research/mode/"))
    assert "<b data-agreed>4</b> of <b data-labelled>4</b>" in page
    assert "<b data-rate>100%</b>" in page
    assert "at least 90% over at least 3" in page


def test_an_operator_requests_and_a_second_approver_approves(cluster) -> None:
    advice_on(cluster, 3)
    label_all(cluster)
    alice = login("alice", "operator", "reviewer")
    response = alice.post("/clusters/research/mode/request", {"note": "canary first"}, follow=True)
    assert "a second person with the approver role must approve it" in text(response)
    request = ModeChangeRequest.objects.get()
    assert "Approve: switch to action mode" not in text(response)  # alice is no approver
    bob = login("bob", "approver", "reviewer")
    response = bob.post(f"/clusters/research/mode/{request.pk}/approve", follow=True)
    assert "is now in action mode" in text(response)
    cluster.refresh_from_db()
    assert cluster.mode == "action"
    assert AuditEntry.objects.filter(verb="mode_request.approved", actor="user:bob").exists()


def test_approval_is_refused_below_the_threshold_with_the_reason(cluster) -> None:
    advice_on(cluster, 1)
    label_all(cluster)
    login("alice", "operator").post("/clusters/research/mode/request")
    request = ModeChangeRequest.objects.get()
    response = login("bob", "approver").post(
        f"/clusters/research/mode/{request.pk}/approve", follow=True
    )
    page = text(response)
    assert "Not approved: the agreement is below the policy" in page
    assert "only 1 advices were labelled" in page
    cluster.refresh_from_db()
    assert cluster.mode == "monitor"


def test_approving_your_own_request_is_refused(cluster) -> None:
    advice_on(cluster, 3)
    label_all(cluster)
    both = login("dana", "operator", "approver")
    both.post("/clusters/research/mode/request")
    request = ModeChangeRequest.objects.get()
    page = text(both.get("/clusters/research/mode/"))
    assert "You asked for this" in page
    response = both.post(f"/clusters/research/mode/{request.pk}/approve", follow=True)
    assert "Not approved: you asked for this change yourself" in text(response)
    cluster.refresh_from_db()
    assert cluster.mode == "monitor"


def test_an_approver_rejects_with_a_reason(cluster) -> None:
    login("alice", "operator").post("/clusters/research/mode/request")
    request = ModeChangeRequest.objects.get()
    bob = login("bob", "approver")
    assert "Not rejected: say why" in text(
        bob.post(f"/clusters/research/mode/{request.pk}/reject", {"reason": ""}, follow=True)
    )
    bob.post(f"/clusters/research/mode/{request.pk}/reject", {"reason": "too early"})
    request.refresh_from_db()
    assert (request.status, request.decision_note) == ("rejected", "too early")


def test_any_operator_returns_the_cluster_to_monitor_mode_at_once(cluster) -> None:
    cluster.mode = "action"
    cluster.save()
    client = login("olga", "operator")
    assert "Back to monitor mode now" in text(client.get("/clusters/research/mode/"))
    client.post("/clusters/research/mode/monitor", {"reason": "odd restarts"})
    cluster.refresh_from_db()
    assert cluster.mode == "monitor"
    entry = AuditEntry.objects.filter(verb="cluster.mode_changed").latest("sequence")
    assert (entry.actor, entry.payload["reason"]) == ("user:olga", "odd restarts")


def test_viewers_can_neither_request_nor_approve(cluster) -> None:
    carol = login("carol", "viewer")
    assert "Request action mode</button>" not in text(carol.get("/clusters/research/mode/"))
    assert carol.post("/clusters/research/mode/request").status_code == 403
    assert carol.post("/clusters/research/mode/monitor", {"reason": "x"}).status_code == 403
