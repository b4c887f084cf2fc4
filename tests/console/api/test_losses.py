"""GPU-hours lost and checkpoints through the API, /metrics and the workload page."""

from datetime import timedelta

import pytest
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from detection.models import AttemptMonitor
from tests.console.api.conftest import T0
from tests.factories import AttemptFactory, NodeFactory, WorkloadFactory

pytestmark = pytest.mark.django_db


def minutes(n: float):
    return T0 + timedelta(minutes=n)


@pytest.fixture
def interrupted(cluster):
    """Two 8-GPU nodes; the first attempt checkpointed at 40 min, last progressed at 60, was
    found hung at 60 and ended at 70; the requeued one ran at 75 without loading anything."""
    for name in ("n1", "n2"):
        NodeFactory(cluster=cluster, name=name, gpus=8)
    workload = WorkloadFactory(cluster=cluster)
    failed = AttemptFactory(
        workload=workload,
        job_id="77",
        state="FAILED",
        started_at=minutes(0),
        ended_at=minutes(70),
        failed_at=minutes(60),
    )
    AttemptMonitor.objects.create(
        attempt=failed, last_progress_at=minutes(60), checkpoint_step=400, checkpoint_at=minutes(40)
    )
    again = AttemptFactory(
        workload=workload,
        job_id="77",
        attempt_index=1,
        first_seen_at=minutes(71),
        started_at=minutes(75),
        time_to_resume_s=15 * 60,
    )
    AttemptMonitor.objects.create(
        attempt=again,
        resume="from_scratch",
        resume_summary="started from scratch although step 400 was checkpointed",
    )
    return workload, again


# 16 GPUs × (10 min hung + 5 min waiting) idle; 16 GPUs × 20 min since the checkpoint.
IDLE, RECOMPUTE = 16 * 15 / 60, 16 * 20 / 60


def test_a_workload_says_its_last_checkpoint_and_what_its_interruptions_cost(
    api, interrupted
) -> None:
    workload, _ = interrupted
    for body in (
        api("carol").get("/api/v1/workloads/").json()["results"][0],
        api("carol").get(f"/api/v1/workloads/{workload.pk}/").json(),
    ):
        assert (body["last_checkpoint_step"], body["last_checkpoint_at"]) == (
            400,
            "2026-11-29T12:40:00Z",
        )
        lost = body["gpu_hours_lost"]
        assert (round(lost["idle"], 6), round(lost["recompute"], 6)) == (
            round(IDLE, 6),
            round(RECOMPUTE, 6),
        )
        assert round(lost["total"], 6) == round(IDLE + RECOMPUTE, 6)


def test_a_workload_without_attempts_lost_nothing(api, cluster) -> None:
    workload = WorkloadFactory(cluster=cluster)
    body = api("carol").get(f"/api/v1/workloads/{workload.pk}/").json()
    assert body["gpu_hours_lost"] == {"idle": 0.0, "recompute": 0.0, "total": 0.0}
    assert body["last_checkpoint_step"] is None


def test_the_cluster_sums_its_workloads(api, cluster, interrupted) -> None:
    response = api("carol").get(f"/api/v1/clusters/{cluster.name}/losses/")
    assert response.status_code == 200
    body = response.json()
    assert body["cluster"] == cluster.name
    assert round(body["gpu_hours_lost"]["total"], 6) == round(IDLE + RECOMPUTE, 6)


def test_an_attempt_says_whether_it_resumed(api, interrupted) -> None:
    _, again = interrupted
    body = api("carol").get(f"/api/v1/attempts/{again.pk}/").json()
    assert (body["resume"], body["checkpoint_step"]) == ("from_scratch", None)
    assert "step 400" in body["resume_summary"]


def test_metrics_give_each_clusters_losses_and_restarts_that_did_not_resume(
    cluster, interrupted
) -> None:
    text = Client().get("/metrics").content.decode()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    lost = "recovery_console_gpu_hours_lost"
    idle = (lost, (("cluster", cluster.name), ("kind", "idle")))
    recompute = (lost, (("cluster", cluster.name), ("kind", "recompute")))
    assert (round(samples[idle], 6), round(samples[recompute], 6)) == (
        round(IDLE, 6),
        round(RECOMPUTE, 6),
    )
    flagged = (
        "recovery_console_attempts_not_resumed",
        (("cluster", cluster.name), ("resume", "from_scratch")),
    )
    assert samples[flagged] == 1.0


def test_the_workload_page_shows_the_checkpoint_and_the_restart_that_did_not_resume(
    client, django_user_model, interrupted
) -> None:
    workload, _ = interrupted
    client.force_login(django_user_model.objects.create_superuser("root2", "r@x.org", "pw"))
    timeline = client.get(f"/workloads/{workload.pk}/_timeline").content.decode()
    assert "step 400" in timeline and "idle" in timeline
    attempts = client.get(f"/workloads/{workload.pk}/_attempts").content.decode()
    assert 'data-resume="from_scratch"' in attempts and "Started from scratch" in attempts
