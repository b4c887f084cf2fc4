"""The watchdog fails open: a job requeue-held for a decision is released after the hold
timeout when the controller died before releasing it."""

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from detection.scan import scan_cluster
from fleet import services
from fleet.models import AuditEntry, ClusterMode
from lab.demo.runner import SimulationRunner
from lab.demo.slurm import SimulatedSlurm
from recovery_console.console import approval
from remediation.controller.reconciler import AdvisorUnavailable, Controller
from remediation.controller.slurm import SlurmCommandError
from remediation.controller.transport import TransportError
from remediation.controller.watchdog import Watchdog
from remediation.local_advisor import LocalAdvisor, controller_token_for
from remediation.models import Advice, ControllerToken, Milestone
from remediation.services import advise_cluster

pytestmark = pytest.mark.django_db
T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


class DiesBeforeRelease(SimulatedSlurm):
    """A controller host that goes away right after the requeue-hold."""

    def release(self, job_id: str) -> None:
        raise TransportError("ssh ctl@slurm-head", "connection reset by peer")


class DiesAfterRequeueHold(SimulatedSlurm):
    """A controller killed right after ``scontrol requeuehold``: no exclusion, no release."""

    def update_exclusions(self, job_id: str, nodes) -> None:
        raise TransportError("ssh ctl@slurm-head", "connection reset by peer")

    release = DiesBeforeRelease.release


class DeadConsole:
    def active_advice(self) -> list:
        raise AdvisorUnavailable("GET http://console/api/v1/advisor/sim/advice: connection refused")

    def heartbeat(self, info) -> dict:
        raise AdvisorUnavailable("POST http://console/api/v1/advisor/sim/heartbeat: refused")

    def milestone(self, *args) -> None:
        raise AdvisorUnavailable("POST http://console/api/v1/advisor/sim/milestones: refused")


def hold(tmp_path: Path, slurm_class=DiesBeforeRelease):
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
            },
        },
    )
    cluster.mode = ClusterMode.ACTION
    cluster.save()
    runner = SimulationRunner(cluster, start=T0, in_process=True)
    advisor = LocalAdvisor(controller_token_for(cluster, "controller"))
    controller = Controller(
        advisor, slurm_class(runner.simulator), lambda: runner.now, report_state=False
    )
    for _ in range(12):
        runner.step(5)
    job = next(j for j in runner.simulator.snapshot().jobs if j.state == "RUNNING")
    runner.simulator.inject(job.job_id, "xid79_fallen_off_bus")
    for _ in range(6):
        runner.step(5)
        scan_cluster(cluster, runner.now, runner.sources)
        advise_cluster(cluster, runner.now)
        controller.cycle()
    held = SimulatedSlurm(runner.simulator).job(job.job_id)
    assert held is not None and held.held and held.restart_count == 1
    return runner, job.job_id, tmp_path / "watchdog.json"


@pytest.fixture
def held_job(tmp_path: Path):
    return hold(tmp_path)


@pytest.fixture
def held_without_exclusion(tmp_path: Path):
    runner, job_id, state = hold(tmp_path, DiesAfterRequeueHold)
    assert SimulatedSlurm(runner.simulator).job(job_id).excluded_nodes == ()
    return runner, job_id, state


def watchdog_for(runner, advisor, state: Path, timeout: float = 60.0) -> Watchdog:
    return Watchdog(SimulatedSlurm(runner.simulator), lambda: runner.now, timeout, advisor, state)


def test_a_job_held_past_the_timeout_is_released_and_the_release_audited(held_job) -> None:
    runner, job_id, state = held_job
    advisor = LocalAdvisor(controller_token_for(runner.cluster, "watchdog"))
    watchdog = watchdog_for(runner, advisor, state)
    assert watchdog.cycle() == []  # first sight of the hold starts its clock
    runner.step(30)
    assert watchdog.cycle() == []
    runner.step(40)
    assert watchdog.cycle() == [job_id]
    runner.step(30)
    assert SimulatedSlurm(runner.simulator).job(job_id).state == "RUNNING"
    milestone = Milestone.objects.get(action="release")
    assert milestone.detail["by"] == "watchdog" and milestone.detail["held_for_s"] > 60
    assert AuditEntry.objects.filter(
        verb="controller.release", actor="controller:sim/watchdog"
    ).exists()


def test_a_restarted_watchdog_keeps_the_hold_clock(held_job) -> None:
    runner, job_id, state = held_job
    advisor = LocalAdvisor(controller_token_for(runner.cluster, "watchdog"))
    watchdog_for(runner, advisor, state).cycle()
    runner.step(70)
    assert watchdog_for(runner, advisor, state).cycle() == [job_id]


def test_with_the_console_unreachable_it_fails_open_and_reports_later(held_job) -> None:
    runner, job_id, state = held_job
    watchdog = watchdog_for(runner, DeadConsole(), state)
    watchdog.cycle()
    runner.step(70)
    assert watchdog.cycle() == [job_id]
    assert not Milestone.objects.filter(action="release").exists()
    advisor = LocalAdvisor(controller_token_for(runner.cluster, "watchdog"))
    watchdog_for(runner, advisor, state).cycle()  # the console is back: the report goes in
    assert Milestone.objects.get(action="release").detail["by"] == "watchdog"


def test_a_hold_that_is_not_for_a_decision_is_left_alone(held_job) -> None:
    runner, _, state = held_job
    slurm = SimulatedSlurm(runner.simulator)
    own = runner.simulator.scheduler.submit("user-held", 2, partition="gpu", hold=True)
    advisor = LocalAdvisor(controller_token_for(runner.cluster, "watchdog"))
    watchdog = watchdog_for(runner, advisor, state)
    watchdog.cycle()
    runner.step(120)
    assert own not in watchdog.cycle()
    assert slurm.job(own).held


def test_the_release_applies_the_exclusions_the_advice_carried(held_without_exclusion) -> None:
    runner, job_id, state = held_without_exclusion
    advice = Advice.objects.get(attempt__job_id=job_id, attempt__attempt_index=0)
    assert advice.exclude_nodes  # the failing node, named by the Xid
    advisor = LocalAdvisor(controller_token_for(runner.cluster, "watchdog"))
    watchdog = watchdog_for(runner, advisor, state)
    watchdog.cycle()
    runner.step(70)
    assert watchdog.cycle() == [job_id]
    job = SimulatedSlurm(runner.simulator).job(job_id)
    assert set(advice.exclude_nodes) <= set(job.excluded_nodes) and not job.held
    steps = Milestone.objects.filter(advice=advice).order_by("id")
    assert [(m.action, m.detail.get("by")) for m in steps] == [
        ("requeue_hold", None),
        ("update_exclusions", "watchdog"),
        ("release", "watchdog"),
    ]
    assert steps[1].detail["nodes"] == sorted(job.excluded_nodes)
    for _ in range(6):
        runner.step(5)
    restarted = SimulatedSlurm(runner.simulator).job(job_id)
    assert restarted.state == "RUNNING" and not set(advice.exclude_nodes) & set(restarted.nodes)


def test_with_the_console_gone_it_applies_the_exclusions_it_already_knew(
    held_without_exclusion,
) -> None:
    runner, job_id, state = held_without_exclusion
    advice = Advice.objects.get(attempt__job_id=job_id, attempt__attempt_index=0)
    advisor = LocalAdvisor(controller_token_for(runner.cluster, "watchdog"))
    watchdog_for(
        runner, advisor, state
    ).cycle()  # sees the hold and its advice, then the console goes
    runner.step(70)
    assert watchdog_for(runner, DeadConsole(), state).cycle() == [job_id]
    job = SimulatedSlurm(runner.simulator).job(job_id)
    assert set(advice.exclude_nodes) <= set(job.excluded_nodes)
    watchdog_for(runner, advisor, state).cycle()  # back: both steps are reported
    assert list(
        Milestone.objects.filter(advice=advice, detail__by="watchdog")
        .order_by("id")
        .values_list("action", flat=True)
    ) == ["update_exclusions", "release"]


def test_withdrawn_advice_is_released_without_its_exclusions(held_without_exclusion) -> None:
    runner, job_id, state = held_without_exclusion
    advisor = LocalAdvisor(controller_token_for(runner.cluster, "watchdog"))
    approval.return_to_monitor_mode("user:olga", runner.cluster, "canary misbehaves")
    watchdog = watchdog_for(runner, advisor, state)
    watchdog.cycle()
    runner.step(70)
    assert watchdog.cycle() == [job_id]
    assert SimulatedSlurm(runner.simulator).job(job_id).excluded_nodes == ()


def test_the_watchdog_heartbeats_and_reports_slurm_only_while_no_one_else_does(held_job) -> None:
    runner, _, state = held_job
    token = controller_token_for(runner.cluster, "watchdog")
    watchdog = watchdog_for(runner, LocalAdvisor(token), state)
    watchdog.standby_after_s = 15
    controller_token = controller_token_for(runner.cluster, "controller")
    ControllerToken.objects.filter(pk=controller_token.pk).update(last_snapshot_at=timezone.now())
    watchdog.cycle()
    token.refresh_from_db()
    assert token.heartbeat["role"] == "watchdog" and token.last_heartbeat_at is not None
    assert (watchdog.snapshots_reported, token.last_snapshot_at) == (0, None)
    stale = timezone.now() - timedelta(seconds=16)
    ControllerToken.objects.filter(pk=controller_token.pk).update(last_snapshot_at=stale)
    watchdog.cycle()
    token.refresh_from_db()
    assert watchdog.snapshots_reported == 1 and token.last_snapshot_at is not None


class RefusesExclusions(SimulatedSlurm):
    def update_exclusions(self, job_id: str, nodes) -> None:
        raise SlurmCommandError(["scontrol", "update"], 1, "Invalid node name specified")


def test_a_refused_exclusion_never_keeps_the_job_held(held_without_exclusion) -> None:
    runner, job_id, state = held_without_exclusion
    advisor = LocalAdvisor(controller_token_for(runner.cluster, "watchdog"))
    watchdog = Watchdog(RefusesExclusions(runner.simulator), lambda: runner.now, 60, advisor, state)
    watchdog.cycle()
    runner.step(70)
    assert watchdog.cycle() == [job_id]
    assert not SimulatedSlurm(runner.simulator).job(job_id).held
    steps = Milestone.objects.filter(detail__by="watchdog").values_list("action", flat=True)
    assert list(steps) == ["release"]
