"""The whole loop on the simulated cluster: detect, attribute, advise, and the controller
acting on the simulated scheduler — only in action mode."""

from datetime import UTC, datetime

import pytest

from detection.scan import scan_cluster
from fleet import services
from fleet.models import Attempt, ClusterMode
from lab.demo.runner import SimulationRunner
from remediation.models import Advice, Milestone
from remediation.services import advise_cluster

pytestmark = pytest.mark.django_db
T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
STEP = 5.0


def loop(mode: str, fault: str):
    cluster = services.create_cluster(
        "test",
        "sim",
        scheduler={
            "backend": "simulated",
            "simulation": {
                "seed": 3,
                "nodes": 12,
                "workloads": 3,
                "nodes_per_job": [2, 3],
                "fault_rate": 0.0,
                "progress_interval_s": 10.0,
            },
        },
    )
    cluster.mode = mode
    cluster.save()
    runner = SimulationRunner(cluster, start=T0, in_process=True)
    controller = runner.controller()

    def turn() -> None:
        runner.step(STEP)
        scan_cluster(cluster, runner.now, runner.sources)
        advise_cluster(cluster, runner.now)
        controller.cycle()

    for _ in range(12):
        turn()
    job = next(j for j in runner.simulator.snapshot().jobs if j.state == "RUNNING")
    injected = runner.simulator.inject(job.job_id, fault)
    for _ in range(24):
        turn()
    return runner, injected


def test_in_action_mode_a_gpu_fault_is_restarted_excluding_the_node() -> None:
    runner, injected = loop(ClusterMode.ACTION, "xid79_fallen_off_bus")
    (bad,) = injected.implicated_hosts
    advice = Advice.objects.get(attempt__job_id=injected.job_id)
    assert (advice.action, advice.exclude_nodes, advice.state) == (
        "restart_excluding_node",
        [bad],
        "executed",
    )
    steps = list(Milestone.objects.filter(advice=advice).values_list("action", flat=True))
    assert steps == ["requeue_hold", "update_exclusions", "release"]
    next_attempt = Attempt.objects.get(job_id=injected.job_id, attempt_index=injected.attempt + 1)
    assert next_attempt.state == "RUNNING"
    assert bad not in next_attempt.nodes and bad in next_attempt.excluded_nodes
    assert next_attempt.time_to_resume_s is not None and next_attempt.time_to_resume_s < 60
    action_latency = (
        Milestone.objects.get(advice=advice, action="release").at - advice.anomaly.detected_at
    )
    assert action_latency.total_seconds() <= 30


def test_in_monitor_mode_the_advice_is_published_and_nothing_in_the_scheduler_changes() -> None:
    runner, injected = loop(ClusterMode.MONITOR, "xid79_fallen_off_bus")
    advice = Advice.objects.get(attempt__job_id=injected.job_id)
    assert (advice.action, advice.enforce, advice.state) == (
        "restart_excluding_node",
        False,
        "proposed",
    )
    assert not Milestone.objects.exists()
    assert not Attempt.objects.filter(
        job_id=injected.job_id, attempt_index__gt=injected.attempt
    ).exists()


def test_an_established_application_error_is_stopped() -> None:
    runner, injected = loop(ClusterMode.ACTION, "shape_mismatch")
    advice = Advice.objects.get(attempt__job_id=injected.job_id)
    assert (advice.action, advice.state) == ("stop", "executed")
    assert list(Milestone.objects.filter(advice=advice).values_list("action", flat=True)) == [
        "cancel"
    ]
