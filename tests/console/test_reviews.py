"""Reviews of advice, the measured agreement and the mode-approval workflow."""

from datetime import UTC, date, datetime, timedelta

import pytest
import time_machine
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.core.exceptions import PermissionDenied

from fleet import services
from fleet.events import cluster_group
from fleet.models import AuditEntry, ClusterMode
from recovery_console.console import approval, reviews
from recovery_console.console.models import ModeChangeRequest, Review
from tests.factories import AdviceFactory, UserFactory

pytestmark = pytest.mark.django_db
NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


@pytest.fixture(autouse=True)
def frozen_time():
    with time_machine.travel(NOW, tick=False) as traveller:
        yield traveller


@pytest.fixture
def cluster():
    return services.create_cluster("user:admin", "research")


@pytest.fixture
def alice():
    return UserFactory(username="alice", roles=["operator", "reviewer"])


@pytest.fixture
def bob():
    return UserFactory(username="bob", roles=["approver", "reviewer"])


@pytest.fixture
def carol():
    return UserFactory(username="carol", roles=["viewer"])


def advice_on(cluster, **fields):
    return AdviceFactory(anomaly__attempt__workload__cluster=cluster, **fields)


def label_many(cluster, reviewer, agreeing: int, disagreeing: int = 0) -> None:
    for n in range(agreeing + disagreeing):
        advice = advice_on(cluster)
        if n < agreeing:
            reviews.label_advice(reviewer, advice, agrees=True)
        else:
            reviews.label_advice(reviewer, advice, agrees=False, preferred_action="restart")


def verbs() -> list[str]:
    return list(AuditEntry.objects.values_list("verb", flat=True))


# --- labelling -------------------------------------------------------------------------------


def test_a_reviewer_labels_advice_and_it_is_audited(cluster, alice) -> None:
    advice = advice_on(cluster, action="restart_excluding_node")
    review = reviews.label_advice(
        alice, advice, agrees=False, preferred_action="stop", comment="this config never works"
    )
    assert (review.agrees, review.preferred_action, review.comment) == (
        False,
        "stop",
        "this config never works",
    )
    entry = AuditEntry.objects.get(verb="review.created")
    assert entry.actor == "user:alice"
    assert (entry.cluster_id, entry.workload_id, entry.attempt_id) == (
        cluster.pk,
        advice.workload_id,
        advice.attempt_id,
    )
    assert entry.payload == {
        "advice": advice.pk,
        "advice_action": "restart_excluding_node",
        "agrees": False,
        "preferred_action": "stop",
        "comment": "this config never works",
        "generation": 1,
    }


def test_agreeing_takes_the_advised_action_as_the_preferred_one(cluster, alice) -> None:
    advice = advice_on(cluster, action="restart")
    assert reviews.label_advice(alice, advice, agrees=True).preferred_action == "restart"


def test_agreeing_while_preferring_another_action_is_refused(cluster, alice) -> None:
    advice = advice_on(cluster, action="restart")
    with pytest.raises(ValueError, match="contradiction"):
        reviews.label_advice(alice, advice, agrees=True, preferred_action="stop")
    with pytest.raises(ValueError, match="not an action"):
        reviews.label_advice(alice, advice, agrees=False, preferred_action="reboot")
    assert not Review.objects.exists()


def test_relabelling_updates_the_review_and_audits_the_change(cluster, alice) -> None:
    advice = advice_on(cluster, action="restart")
    first = reviews.label_advice(alice, advice, agrees=True)
    second = reviews.label_advice(alice, advice, agrees=False, preferred_action="stop")
    assert second.pk == first.pk
    assert Review.objects.get().agrees is False
    entry = AuditEntry.objects.get(verb="review.updated")
    assert entry.payload == {
        "advice": advice.pk,
        "agrees": {"from": True, "to": False},
        "preferred_action": {"from": "restart", "to": "stop"},
    }


def test_relabelling_with_the_same_label_records_nothing(cluster, alice) -> None:
    advice = advice_on(cluster)
    reviews.label_advice(alice, advice, agrees=True)
    reviews.label_advice(alice, advice, agrees=True)
    assert verbs().count("review.created") == 1
    assert "review.updated" not in verbs()


def test_a_viewer_cannot_label_advice(cluster, carol) -> None:
    with pytest.raises(PermissionDenied, match="needs the reviewer role"):
        reviews.label_advice(carol, advice_on(cluster), agrees=True)
    assert not Review.objects.exists()


def test_the_review_queue_holds_advice_without_a_label_on_its_current_generation(
    cluster, alice, bob
) -> None:
    labelled, revised, fresh = (advice_on(cluster) for _ in range(3))
    reviews.label_advice(alice, labelled, agrees=True)
    reviews.label_advice(alice, revised, agrees=True)
    revised.generation = 2
    revised.save()
    assert set(reviews.awaiting_review(cluster)) == {revised, fresh}
    assert set(reviews.awaiting_review(cluster, reviewer=bob)) == {labelled, revised, fresh}


# --- agreement -------------------------------------------------------------------------------


def test_an_advice_counts_once_and_any_dissent_makes_it_a_disagreement(cluster, alice, bob) -> None:
    both_agree, one_dissents = advice_on(cluster), advice_on(cluster)
    for reviewer in (alice, bob):
        reviews.label_advice(reviewer, both_agree, agrees=True)
    reviews.label_advice(alice, one_dissents, agrees=True)
    reviews.label_advice(bob, one_dissents, agrees=False, preferred_action="stop")
    measured = reviews.agreement(cluster)
    assert (measured.agreed, measured.labelled, measured.rate) == (1, 2, 0.5)


def test_a_label_on_an_older_generation_does_not_count(cluster, alice) -> None:
    advice = advice_on(cluster)
    reviews.label_advice(alice, advice, agrees=True)
    advice.generation = 2
    advice.save()
    assert reviews.agreement(cluster).labelled == 0
    reviews.label_advice(alice, advice, agrees=True)
    assert Review.objects.get().generation == 2
    assert reviews.agreement(cluster).labelled == 1


def test_labels_older_than_the_window_do_not_count(cluster, alice, frozen_time) -> None:
    frozen_time.move_to(NOW - timedelta(days=29))
    label_many(cluster, alice, agreeing=3)
    frozen_time.move_to(NOW)
    label_many(cluster, alice, agreeing=1, disagreeing=1)
    measured = reviews.agreement(cluster)
    assert (measured.agreed, measured.labelled, measured.window_days) == (1, 2, 28)
    assert reviews.agreement(cluster, now=NOW - timedelta(days=20)).labelled == 3


def test_the_thresholds_come_from_the_cluster_policy(cluster, alice) -> None:
    assert reviews.agreement(cluster) == reviews.Agreement(
        agreed=0,
        labelled=0,
        rate=None,
        window_days=28,
        min_agreement=0.9,
        min_labelled=50,
        met=False,
    )
    cluster = services.update_cluster_settings(
        "user:admin",
        cluster,
        policy={"approval_min_agreement": 0.75, "approval_min_labelled": 4},
    )
    label_many(cluster, alice, agreeing=3, disagreeing=1)
    measured = reviews.agreement(cluster)
    assert (measured.rate, measured.min_agreement, measured.min_labelled, measured.met) == (
        0.75,
        0.75,
        4,
        True,
    )


def test_exactly_ninety_percent_of_fifty_meets_the_default_threshold(cluster, alice) -> None:
    label_many(cluster, alice, agreeing=45, disagreeing=5)
    measured = reviews.agreement(cluster)
    assert (measured.agreed, measured.labelled, measured.met) == (45, 50, True)
    assert measured.shortfall == ""


def test_the_shortfall_says_what_is_missing(cluster, alice) -> None:
    label_many(cluster, alice, agreeing=3)
    assert reviews.agreement(cluster).shortfall == (
        "only 3 advices were labelled in the last 28 days; at least 50 are needed"
    )
    label_many(cluster, alice, agreeing=40, disagreeing=7)
    assert reviews.agreement(cluster).shortfall == (
        "reviewers agreed with 43 of 50 advices (86%) in the last 28 days; at least 90% is needed"
    )


def test_agreement_by_day_counts_each_advice_on_the_day_of_its_latest_label(
    cluster, alice, frozen_time
) -> None:
    frozen_time.move_to(NOW - timedelta(days=2))
    label_many(cluster, alice, agreeing=2, disagreeing=1)
    frozen_time.move_to(NOW)
    label_many(cluster, alice, agreeing=1)
    days = reviews.agreement_by_day(cluster, days=3)
    assert days == [
        (date(2026, 11, 27), 2, 3),
        (date(2026, 11, 28), 0, 0),
        (date(2026, 11, 29), 1, 1),
    ]
    by_day = reviews.agreement_by_day(cluster)
    assert len(by_day) == 28
    measured = reviews.agreement(cluster)
    assert sum(d[1] for d in by_day) == measured.agreed
    assert sum(d[2] for d in by_day) == measured.labelled


# --- requesting and approving action mode ----------------------------------------------------


def test_an_operator_requests_action_mode_with_the_measured_agreement(cluster, alice) -> None:
    label_many(cluster, alice, agreeing=9, disagreeing=1)
    request = approval.request_action_mode(alice, cluster, note="canary first")
    assert (request.status, request.agreement_rate, request.labelled, request.note) == (
        "pending",
        0.9,
        10,
        "canary first",
    )
    assert request.requested_by == alice
    entry = AuditEntry.objects.get(verb="mode_request.created")
    assert entry.actor == "user:alice"
    assert entry.payload["agreement_rate"] == 0.9
    assert entry.payload["met"] is False
    assert approval.pending_request(cluster) == request


def test_a_second_pending_request_is_refused(cluster, alice) -> None:
    approval.request_action_mode(alice, cluster)
    with pytest.raises(reviews.ApprovalRefused, match="already pending"):
        approval.request_action_mode(alice, cluster)
    assert ModeChangeRequest.objects.count() == 1


def test_a_request_is_refused_when_the_cluster_is_already_in_action_mode(cluster, alice) -> None:
    cluster.mode = ClusterMode.ACTION
    cluster.save()
    with pytest.raises(reviews.ApprovalRefused, match="already in action mode"):
        approval.request_action_mode(alice, cluster)


def test_only_an_operator_can_request_action_mode(cluster, bob) -> None:
    with pytest.raises(reviews.RoleMissing, match="needs the operator role"):
        approval.request_action_mode(bob, cluster)


def test_the_requester_cannot_approve_their_own_request(cluster) -> None:
    alice = UserFactory(username="alice", roles=["operator", "reviewer", "approver"])
    label_many(cluster, alice, agreeing=50)
    request = approval.request_action_mode(alice, cluster)
    with pytest.raises(reviews.ApprovalRefused, match="second person"):
        approval.approve_mode_request(alice, request)
    request.refresh_from_db()
    cluster.refresh_from_db()
    assert (request.status, cluster.mode) == ("pending", "monitor")
    refused = AuditEntry.objects.get(verb="mode_request.approval_refused")
    assert refused.actor == "user:alice"
    assert "second person" in refused.payload["reason"]


def test_approval_is_refused_below_the_threshold(cluster, alice, bob) -> None:
    label_many(cluster, alice, agreeing=40, disagreeing=10)
    request = approval.request_action_mode(alice, cluster)
    with pytest.raises(reviews.ApprovalRefused) as refused:
        approval.approve_mode_request(bob, request)
    assert refused.value.reason == (
        "the agreement is below the policy's threshold: reviewers agreed with 40 of 50 advices"
        " (80%) in the last 28 days; at least 90% is needed"
    )
    cluster.refresh_from_db()
    assert cluster.mode == "monitor"
    assert ModeChangeRequest.objects.get().status == "pending"
    assert "cluster.mode_changed" not in verbs()


def test_approval_is_refused_with_too_few_labels(cluster, alice, bob) -> None:
    label_many(cluster, alice, agreeing=49)
    request = approval.request_action_mode(alice, cluster)
    with pytest.raises(reviews.ApprovalRefused, match="only 49 advices were labelled"):
        approval.approve_mode_request(bob, request)


def test_an_operator_cannot_approve(cluster, alice) -> None:
    other = UserFactory(username="olga", roles=["operator"])
    label_many(cluster, alice, agreeing=50)
    request = approval.request_action_mode(alice, cluster)
    with pytest.raises(reviews.RoleMissing, match="needs the approver role"):
        approval.approve_mode_request(other, request)
    assert ModeChangeRequest.objects.get().status == "pending"


def test_approval_measures_the_agreement_again(cluster, alice, bob) -> None:
    label_many(cluster, alice, agreeing=50)
    request = approval.request_action_mode(alice, cluster)
    assert request.agreement_rate == 1.0
    label_many(cluster, bob, agreeing=0, disagreeing=10)
    with pytest.raises(reviews.ApprovalRefused, match="50 of 60"):
        approval.approve_mode_request(bob, request)


def test_a_second_person_approves_and_the_cluster_moves_to_action_mode(cluster, alice, bob) -> None:
    label_many(cluster, alice, agreeing=50)
    request = approval.request_action_mode(alice, cluster)
    approved = approval.approve_mode_request(bob, request)
    cluster.refresh_from_db()
    assert cluster.mode == "action"
    assert (approved.status, approved.decided_by, approved.decided_at) == ("approved", bob, NOW)
    changed = AuditEntry.objects.get(verb="cluster.mode_changed")
    assert changed.actor == "user:bob"
    assert changed.payload["from"] == "monitor"
    assert changed.payload["to"] == "action"
    assert changed.payload["request"] == request.pk
    assert changed.payload["requested_by"] == "user:alice"
    assert changed.payload["agreement_rate"] == 1.0
    assert verbs()[-2:] == ["mode_request.approved", "cluster.mode_changed"]


def test_a_decided_request_cannot_be_approved_again(cluster, alice, bob) -> None:
    label_many(cluster, alice, agreeing=50)
    request = approval.request_action_mode(alice, cluster)
    approval.approve_mode_request(bob, request)
    with pytest.raises(reviews.ApprovalRefused, match="already approved"):
        approval.approve_mode_request(bob, request)


def test_an_approver_rejects_a_request_with_a_reason(cluster, alice, bob) -> None:
    request = approval.request_action_mode(alice, cluster)
    rejected = approval.reject_mode_request(bob, request, "wait for the canary week")
    assert (rejected.status, rejected.decided_by, rejected.decision_note) == (
        "rejected",
        bob,
        "wait for the canary week",
    )
    entry = AuditEntry.objects.get(verb="mode_request.rejected")
    assert (entry.actor, entry.payload) == ("user:bob", {"reason": "wait for the canary week"})
    assert approval.pending_request(cluster) is None
    approval.request_action_mode(alice, cluster)  # a new request may follow


def test_the_requester_may_withdraw_but_nobody_else_without_the_approver_role(
    cluster, alice, carol
) -> None:
    request = approval.request_action_mode(alice, cluster)
    with pytest.raises(reviews.RoleMissing):
        approval.reject_mode_request(carol, request, "no")
    assert approval.reject_mode_request(alice, request, "asked too early").status == "rejected"


def test_a_rejection_needs_a_reason(cluster, alice, bob) -> None:
    request = approval.request_action_mode(alice, cluster)
    with pytest.raises(reviews.ApprovalRefused, match="say why"):
        approval.reject_mode_request(bob, request, "  ")


def test_back_to_monitor_is_immediate_for_any_operator(cluster, alice) -> None:
    cluster.mode = ClusterMode.ACTION
    cluster.save()
    returned = approval.back_to_monitor(alice, cluster, "the canary misbehaved")
    assert returned.mode == "monitor"
    entry = AuditEntry.objects.get(verb="cluster.mode_changed")
    assert (entry.actor, entry.payload) == (
        "user:alice",
        {"from": "action", "to": "monitor", "reason": "the canary misbehaved", "withdrawn": 0},
    )


def test_back_to_monitor_in_monitor_mode_changes_nothing(cluster, alice) -> None:
    assert approval.back_to_monitor(alice, cluster, "just in case").mode == "monitor"
    assert "cluster.mode_changed" not in verbs()


def test_back_to_monitor_needs_the_operator_role(cluster, bob) -> None:
    with pytest.raises(reviews.RoleMissing):
        approval.back_to_monitor(bob, cluster, "")


def test_pages_of_the_cluster_hear_of_a_mode_change_after_the_commit(
    cluster, alice, bob, django_capture_on_commit_callbacks
) -> None:
    layer = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)(cluster_group(cluster.pk), channel)
    label_many(cluster, alice, agreeing=50)
    request = approval.request_action_mode(alice, cluster)
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        approval.approve_mode_request(bob, request)
    assert len(callbacks) >= 1
    event = async_to_sync(layer.receive)(channel)
    async_to_sync(layer.group_discard)(cluster_group(cluster.pk), channel)
    assert event == {"type": "cluster.changed", "cluster": cluster.pk, "what": "mode"}
