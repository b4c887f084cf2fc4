"""The API's filtersets, on their own (as NetBox tests its filtersets)."""

from datetime import timedelta
from urllib.parse import urlencode

import pytest
from django.http import QueryDict

from detection.models import Anomaly
from fleet import audit, services
from fleet.models import Attempt, AuditEntry, Node, Workload
from recovery_console.console import approval, reviews
from recovery_console.console.api import filtersets as f
from recovery_console.console.models import ModeChangeRequest, Review
from remediation.models import Advice, NodeHealth
from tests.console.api.conftest import T0, advice_on
from tests.factories import AdviceFactory, NodeFactory

pytestmark = pytest.mark.django_db


def filtered(filterset, params, queryset):
    # As a request would bring them: a repeated parameter is a list.
    result = filterset(QueryDict(urlencode(params, doseq=True)), queryset=queryset)
    assert result.is_valid(), result.errors
    return result.qs


@pytest.fixture
def other():
    return services.create_cluster("user:root", "other")


def test_the_cluster_filter_takes_a_name_and_refuses_an_unknown_one(cluster, other) -> None:
    mine, theirs = advice_on(cluster), advice_on(other)
    qs = Workload.objects.all()
    assert list(filtered(f.WorkloadFilterSet, {"cluster": "research"}, qs)) == [mine.workload]
    assert list(filtered(f.WorkloadFilterSet, {"cluster": "other"}, qs)) == [theirs.workload]
    bad = f.WorkloadFilterSet(QueryDict("cluster=nope"), queryset=qs)
    assert not bad.is_valid()
    assert "cluster" in bad.errors


def test_created_after_includes_and_created_before_excludes_the_instant(cluster) -> None:
    early = advice_on(cluster, decided_at=T0)
    late = advice_on(cluster, decided_at=T0 + timedelta(hours=1))
    qs = Advice.objects.all()
    boundary = (T0 + timedelta(hours=1)).isoformat()
    assert list(filtered(f.AdviceFilterSet, {"created__after": boundary}, qs)) == [late]
    assert list(filtered(f.AdviceFilterSet, {"created__before": boundary}, qs)) == [early]
    window = {"created__after": T0.isoformat(), "created__before": boundary}
    assert list(filtered(f.AdviceFilterSet, window, qs)) == [early]


def test_advice_filters_by_action_and_state(cluster) -> None:
    stop = advice_on(cluster, action="stop", state="dispatched")
    restart = advice_on(cluster, action="restart", state="proposed")
    qs = Advice.objects.all()
    assert list(filtered(f.AdviceFilterSet, {"action": "stop"}, qs)) == [stop]
    assert set(filtered(f.AdviceFilterSet, {"action": ["stop", "restart"]}, qs)) == {stop, restart}
    assert list(filtered(f.AdviceFilterSet, {"state": "proposed"}, qs)) == [restart]


def test_anomalies_filter_by_kind_category_and_detection_time(cluster) -> None:
    hang = AdviceFactory(
        anomaly__attempt__workload__cluster=cluster,
        anomaly__kind="hang",
        anomaly__category="nccl_timeout_hang",
        anomaly__detected_at=T0 + timedelta(minutes=5),
    ).anomaly
    crash = advice_on(cluster).anomaly
    qs = Anomaly.objects.all()
    assert list(filtered(f.AnomalyFilterSet, {"kind": "hang"}, qs)) == [hang]
    assert list(filtered(f.AnomalyFilterSet, {"category": "gpu_hardware"}, qs)) == [crash]
    after = {"created__after": (T0 + timedelta(minutes=1)).isoformat()}
    assert list(filtered(f.AnomalyFilterSet, after, qs)) == [hang]


def test_attempts_filter_by_state_and_job(cluster) -> None:
    attempt = advice_on(cluster).attempt
    qs = Attempt.objects.all()
    assert list(filtered(f.AttemptFilterSet, {"job_id": attempt.job_id}, qs)) == [attempt]
    assert list(filtered(f.AttemptFilterSet, {"state": "FAILED"}, qs)) == []


def test_nodes_filter_by_scheduler_state_and_health(cluster) -> None:
    drained = NodeFactory(cluster=cluster, name="n1", state="DRAINED")
    suspect = NodeFactory(cluster=cluster, name="n2", state="IDLE")
    clean = NodeFactory(cluster=cluster, name="n3", state="IDLE")
    NodeHealth.objects.create(cluster=cluster, name="n1", state="drained")
    NodeHealth.objects.create(cluster=cluster, name="n2", state="suspect")
    qs = Node.objects.all()
    assert list(filtered(f.NodeFilterSet, {"state": "DRAINED"}, qs)) == [drained]
    assert list(filtered(f.NodeFilterSet, {"health": "drained"}, qs)) == [drained]
    assert list(filtered(f.NodeFilterSet, {"health": "suspect"}, qs)) == [suspect]
    assert list(filtered(f.NodeFilterSet, {"health": "healthy"}, qs)) == [clean]


def test_reviews_filter_by_reviewer_and_verdict(cluster, people) -> None:
    advice = advice_on(cluster)
    reviews.label_advice(people["rita"], advice, agrees=True)
    reviews.label_advice(people["bob"], advice, agrees=False, preferred_action="stop")
    qs = Review.objects.all()
    assert [r.reviewer.username for r in filtered(f.ReviewFilterSet, {"reviewer": "bob"}, qs)] == [
        "bob"
    ]
    agreeing = filtered(f.ReviewFilterSet, {"agrees": "true"}, qs)
    assert [r.reviewer.username for r in agreeing] == ["rita"]
    assert filtered(f.ReviewFilterSet, {"cluster": "research"}, qs).count() == 2


def test_mode_requests_filter_by_status(cluster, people) -> None:
    request = approval.request_action_mode(people["olga"], cluster)
    qs = ModeChangeRequest.objects.all()
    assert list(filtered(f.ModeChangeRequestFilterSet, {"status": "pending"}, qs)) == [request]
    assert list(filtered(f.ModeChangeRequestFilterSet, {"status": "approved"}, qs)) == []


def test_audit_entries_filter_by_verb_actor_prefixes_and_time(cluster) -> None:
    audit.record("controller:research/c1", "controller.drain_node", cluster=cluster, at=T0)
    audit.record("user:alice", "cluster.mode_changed", cluster=cluster, at=T0 + timedelta(days=1))
    qs = AuditEntry.objects.all()

    def verbs(params):
        return [e.verb for e in filtered(f.AuditEntryFilterSet, params, qs)]

    assert verbs({"verb": "controller.drain_node"}) == ["controller.drain_node"]
    assert verbs({"verb__startswith": "cluster.", "cluster": "research"}) == [
        "cluster.created",
        "cluster.mode_changed",
    ]
    assert verbs({"actor": "user:alice"}) == ["cluster.mode_changed"]
    assert verbs({"actor__startswith": "controller:"}) == ["controller.drain_node"]
    assert verbs({"created__before": (T0 + timedelta(hours=1)).isoformat()}) == [
        "controller.drain_node"
    ]


def test_filters_work_through_the_api(api, cluster) -> None:
    advice_on(cluster, action="stop")
    advice_on(cluster, action="restart")
    response = api("carol").get("/api/v1/advice/", {"action": "stop", "cluster": "research"})
    assert response.status_code == 200
    assert [a["action"] for a in response.json()["results"]] == ["stop"]
    bad = api("carol").get("/api/v1/advice/", {"action": "reboot"})
    assert bad.status_code == 400
    assert "action" in bad.json()
