"""Returning to monitor mode takes back advice already dispatched: the claim and every later
step are refused, the advice is withdrawn (audited), and a controller in mid-flight stops at
the step in hand, leaving Slurm as it is beyond it."""

from datetime import UTC, datetime

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction
from rest_framework.test import APIClient

from detection.scan import scan_cluster
from fleet import services as fleet
from fleet.events import cluster_group
from fleet.models import AuditEntry, ClusterMode
from lab.demo.runner import SimulationRunner
from lab.demo.slurm import SimulatedSlurm
from recovery_console.console import approval
from remediation import services
from remediation.controller.advisor_http import HttpAdvisor
from remediation.controller.reconciler import AdviceWithdrawn, Controller
from remediation.controller.watchdog import Watchdog
from remediation.local_advisor import LocalAdvisor, controller_token_for
from remediation.models import Advice, Milestone
from tests.remediation.conftest import T0, anomaly_on, running_attempt

pytestmark = pytest.mark.django_db
RECONCILE = "/api/v1/advisor/research/advice/{}/reconciliation"


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
    return Advice.objects.get(state="dispatched")


def claim(controller, advice, generation=1):
    body = {"observed_generation": generation, "disposition": "pending"}
    return controller.put(RECONCILE.format(advice.pk), body, format="json")


def test_back_to_monitor_withdraws_dispatched_advice_and_refuses_its_claim(
    cluster, dispatched, controller, django_capture_on_commit_callbacks
) -> None:
    layer = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)(cluster_group(cluster.pk), channel)
    with django_capture_on_commit_callbacks(execute=True):
        approval.return_to_monitor_mode("user:olga", cluster, "canary misbehaves")
    events = {async_to_sync(layer.receive)(channel)["what"] for _ in range(2)}
    async_to_sync(layer.group_discard)(cluster_group(cluster.pk), channel)

    dispatched.refresh_from_db()
    assert (dispatched.state, dispatched.enforce) == ("withdrawn", False)
    entry = AuditEntry.objects.get(verb="advice.withdrawn")
    assert entry.actor == "user:olga"
    assert entry.payload["from"] == "dispatched"
    assert "canary misbehaves" in entry.payload["reason"]
    assert AuditEntry.objects.get(verb="cluster.mode_changed").payload["withdrawn"] == 1
    assert "reviews" in events  # the pages showing the advice are told

    response = claim(controller, dispatched)
    assert response.status_code == 409
    assert response.json()["code"] == "withdrawn"
    assert "monitor mode" in response.json()["detail"]
    dispatched.refresh_from_db()
    assert (dispatched.state, dispatched.claimed_by) == ("withdrawn", "")
    listed = controller.get("/api/v1/advisor/research/advice").json()["results"]
    assert listed == []


def test_a_claimed_advice_is_withdrawn_and_neither_steps_nor_convergence_are_taken(
    cluster, dispatched, controller
) -> None:
    assert claim(controller, dispatched).status_code == 200
    approval.return_to_monitor_mode("user:olga", cluster, "")
    step = controller.post(
        "/api/v1/advisor/research/milestones",
        {
            "advice": dispatched.pk,
            "idempotency_key": f"advice-{dispatched.pk}-g1-requeue_hold",
            "action": "requeue_hold",
            "at": "2026-11-29T12:00:10Z",
        },
        format="json",
    )
    converged = controller.put(
        RECONCILE.format(dispatched.pk),
        {"observed_generation": 1, "disposition": "converged", "reason": "done"},
        format="json",
    )
    assert (step.status_code, step.json()["code"]) == (409, "withdrawn")
    assert (converged.status_code, converged.json()["code"]) == (409, "withdrawn")
    dispatched.refresh_from_db()
    assert dispatched.state == "withdrawn" and dispatched.executed_at is None
    # The step Slurm already took is history: recorded, and marked as after the withdrawal.
    assert AuditEntry.objects.get(verb="controller.requeue_hold").payload["withdrawn"] is True
    assert not AuditEntry.objects.filter(verb="advice.executed").exists()


def test_a_claim_is_refused_once_the_partition_leaves_the_allowlist(
    cluster, dispatched, controller
) -> None:
    fleet.update_cluster_settings("user:olga", cluster, partitions_allowlist=["canary"])
    response = claim(controller, dispatched)
    assert (response.status_code, response.json()["code"]) == (409, "withdrawn")
    assert "outside the action allowlist" in response.json()["detail"]
    dispatched.refresh_from_db()
    assert dispatched.state == "withdrawn"
    assert AuditEntry.objects.get(verb="advice.withdrawn").payload["from"] == "dispatched"


def test_monitor_mode_advice_is_not_withdrawn_it_was_never_enforced(cluster) -> None:
    anomaly_on(running_attempt(cluster))  # proposed: the cluster is in monitor mode
    services.advise_cluster(cluster, T0)
    cluster.mode = ClusterMode.ACTION
    cluster.save()
    approval.return_to_monitor_mode("user:olga", cluster, "")
    assert Advice.objects.get().state == "proposed"


# --- a controller in mid-flight, on the simulated cluster -------------------------------------

SIM_T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


class OperatorStepsInDuringRequeue(SimulatedSlurm):
    """Slurm requeue-holds the job; at that moment an operator returns to monitor mode."""

    def __init__(self, simulator, cluster) -> None:
        super().__init__(simulator)
        self.cluster = cluster

    def requeue_hold(self, job_id: str) -> None:
        super().requeue_hold(job_id)
        approval.return_to_monitor_mode("user:olga", self.cluster, "stop acting")


def test_mid_flight_the_controller_stops_at_the_step_in_hand_and_the_watchdog_releases() -> None:
    cluster = fleet.create_cluster(
        "test",
        "sim",
        scheduler={
            "backend": "simulated",
            "simulation": {"seed": 3, "nodes": 12, "workloads": 3, "nodes_per_job": [2, 3]},
        },
    )
    cluster.mode = ClusterMode.ACTION
    cluster.save()
    runner = SimulationRunner(cluster, start=SIM_T0, in_process=True)
    slurm = OperatorStepsInDuringRequeue(runner.simulator, cluster)
    advisor = LocalAdvisor(controller_token_for(cluster, "controller"))
    controller = Controller(advisor, slurm, lambda: runner.now, report_state=False)
    for _ in range(12):
        runner.step(5)
    job = next(j for j in runner.simulator.snapshot().jobs if j.state == "RUNNING")
    runner.simulator.inject(job.job_id, "xid79_fallen_off_bus")
    reports = []
    for _ in range(6):
        runner.step(5)
        scan_cluster(cluster, runner.now, runner.sources)
        services.advise_cluster(cluster, runner.now)
        reports.append(controller.cycle())

    advice = Advice.objects.get(attempt__job_id=job.job_id)
    assert advice.state == "withdrawn"
    assert [r.withdrawn for r in reports if r.withdrawn] == [[advice.pk]]
    assert not any(r.carried_out for r in reports)
    # Only the step in hand was taken: no exclusion, no release, no convergence reported.
    steps = list(Milestone.objects.filter(advice=advice).values_list("action", flat=True))
    assert steps == ["requeue_hold"]
    held = slurm.job(job.job_id)
    assert held is not None and held.held and not held.excluded_nodes
    assert not AuditEntry.objects.filter(verb="advice.executed").exists()

    # The hold we placed is not left for ever: the watchdog still fails open on it.
    watchdog = Watchdog(
        SimulatedSlurm(runner.simulator),
        lambda: runner.now,
        60.0,
        LocalAdvisor(controller_token_for(cluster, "watchdog")),
    )
    watchdog.cycle()
    runner.step(70)
    assert watchdog.cycle() == [job.job_id]
    assert Milestone.objects.filter(advice=advice, action="release").get().detail["by"] == (
        "watchdog"
    )
    assert not services.active_advice(cluster).exists()


@pytest.mark.django_db(transaction=True)
def test_the_http_controller_understands_the_refusal(live_server, cluster) -> None:
    cluster.mode = ClusterMode.ACTION
    cluster.save()
    with transaction.atomic():  # as detection's scan records it
        anomaly_on(running_attempt(cluster))
    services.advise_cluster(cluster, T0)
    secret = services.issue_controller_token("user:alice", cluster, "http").secret
    advisor = HttpAdvisor(live_server.url, "research", secret)
    (item,) = advisor.active_advice()
    assert advisor.reconcile(item, "pending") is True
    approval.return_to_monitor_mode("user:olga", cluster, "")
    with pytest.raises(AdviceWithdrawn, match="monitor mode"):
        advisor.milestone(item, "requeue_hold", T0, {}, f"advice-{item.id}-g1-requeue_hold")
    with pytest.raises(AdviceWithdrawn):
        advisor.reconcile(item, "converged", "done")
    assert Advice.objects.get().state == "withdrawn"
