"""The Advisor API's advice list is bounded: cursor pages (100 by default, at most 250), a
controller that follows the cursor, and monitor-mode advice that expires once its attempt is
over, so the active list stays small."""

from datetime import timedelta

import pytest
from rest_framework.test import APIClient

from fleet import services as fleet
from fleet.core.scheduler import ClusterSnapshot, JobState
from fleet.models import AuditEntry, ClusterMode
from remediation import services
from remediation.controller.advisor_http import HttpAdvisor
from remediation.models import Advice
from tests.factories import AdviceFactory, JobRecordFactory
from tests.remediation.conftest import T0, anomaly_on, running_attempt

ADVICE = "/api/v1/advisor/research/advice"


@pytest.fixture
def secret(cluster) -> str:
    return services.issue_controller_token("user:alice", cluster, "ctl").secret


@pytest.fixture
def controller(secret) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    return client


@pytest.fixture
def many(cluster) -> list[int]:
    made = [
        AdviceFactory(anomaly__attempt__workload__cluster=cluster, state="dispatched", enforce=True)
        for _ in range(300)
    ]
    return [a.pk for a in made]


def follow(controller, url: str) -> list[list[int]]:
    pages = []
    while url:
        response = controller.get(url)
        assert response.status_code == 200
        pages.append([item["id"] for item in response.json()["results"]])
        url = response.json()["next"]
    return pages


@pytest.mark.django_db
def test_300_advices_come_in_pages_of_100_each_once_oldest_first(controller, many) -> None:
    pages = follow(controller, ADVICE)
    assert [len(p) for p in pages] == [100, 100, 100]
    assert [i for p in pages for i in p] == sorted(many)


@pytest.mark.django_db
@pytest.mark.parametrize(("limit", "sizes"), [("250", [250, 50]), ("1000", [250, 50])])
def test_limit_sets_the_page_up_to_250(controller, many, limit, sizes) -> None:
    assert [len(p) for p in follow(controller, f"{ADVICE}?limit={limit}")] == sizes


@pytest.mark.django_db
@pytest.mark.parametrize(("query", "field"), [("limit=0", "limit"), ("active=maybe", "active")])
def test_a_bad_query_is_a_400_naming_the_field(controller, query, field) -> None:
    response = controller.get(f"{ADVICE}?{query}")
    assert response.status_code == 400
    assert list(response.json()) == [field]


@pytest.mark.django_db(transaction=True)
def test_the_controller_follows_the_cursor_and_sees_every_advice(live_server, secret, many) -> None:
    seen = HttpAdvisor(live_server.url, "research", secret).active_advice()
    assert sorted(a.id for a in seen) == sorted(many)


# --- monitor-mode advice expires once its attempt is over -------------------------------------


def end(cluster, job_id: str = "100", at=T0) -> None:
    job = JobRecordFactory(
        job_id=job_id, state=JobState.FAILED, nodes=("n1", "n2"), end_time=at, exit_code=1
    )
    fleet.record_snapshot("test", cluster, ClusterSnapshot(at, (job,), ()))


def active_ids(controller) -> list[int]:
    return [item["id"] for item in controller.get(ADVICE).json()["results"]]


@pytest.mark.django_db
def test_monitor_advice_of_an_ended_attempt_expires_and_is_no_longer_listed(
    cluster, controller
) -> None:
    anomaly_on(running_attempt(cluster))
    services.advise_cluster(cluster, T0)
    advice = Advice.objects.get()
    end(cluster, at=T0 + timedelta(seconds=30))
    # Within Slurm's MinJobAge the advice is still published (later evidence may sharpen it).
    services.advise_cluster(cluster, T0 + timedelta(minutes=2))
    assert active_ids(controller) == [advice.pk]

    services.advise_cluster(cluster, T0 + timedelta(minutes=6))
    advice.refresh_from_db()
    assert advice.state == "expired"
    assert active_ids(controller) == []
    entry = AuditEntry.objects.get(verb="advice.expired")
    assert (entry.actor, entry.payload["attempt_state"]) == ("system:remediation", "FAILED")


@pytest.mark.django_db
def test_monitor_advice_of_a_running_attempt_stays_active(cluster, controller) -> None:
    anomaly_on(running_attempt(cluster))
    services.advise_cluster(cluster, T0)
    services.advise_cluster(cluster, T0 + timedelta(hours=3))
    assert Advice.objects.get().state == "proposed"
    assert len(active_ids(controller)) == 1


@pytest.mark.django_db
def test_dispatched_advice_is_left_to_the_controller(cluster, controller) -> None:
    cluster.mode = ClusterMode.ACTION
    cluster.save()
    anomaly_on(running_attempt(cluster))
    services.advise_cluster(cluster, T0)
    end(cluster, at=T0 + timedelta(seconds=30))
    services.advise_cluster(cluster, T0 + timedelta(minutes=10))
    assert Advice.objects.get().state == "dispatched"
