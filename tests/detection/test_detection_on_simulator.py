"""The whole detection loop on the simulated cluster: the simulator writes real-looking output
and metrics and reports Slurm's view; the scans must find every injected crash."""

from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest

from detection.models import Anomaly, AnomalyFamily, SourceCursor
from detection.scan import scan_cluster
from fleet import services
from lab.demo.runner import SimulationRunner

pytestmark = pytest.mark.django_db
T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
STEP = 5.0


def simulated_cluster(**simulation: object):
    settings = {
        "seed": 11,
        "nodes": 12,
        "workloads": 4,
        "nodes_per_job": [2, 3],
        "fault_rate": 1.5,
        "progress_interval_s": 10.0,
        "checkpoint_interval_s": 600.0,
        "manual_recovery": {"notice_s": 60.0, "act_s": 30.0},
    } | simulation
    return services.create_cluster(
        "test", "sim", scheduler={"backend": "simulated", "simulation": settings}
    )


def run(cluster, minutes: float) -> SimulationRunner:
    runner = SimulationRunner(cluster, start=T0, in_process=True)
    for _ in range(int(minutes * 60 / STEP)):
        runner.step(STEP)
        scan_cluster(cluster, runner.now, runner.sources)
    return runner


def test_every_injected_crash_is_detected_with_its_evidence_time() -> None:
    cluster = simulated_cluster()
    runner = run(cluster, minutes=90)
    settled = runner.now - timedelta(minutes=2)  # faults this late may still be unfolding
    crashes = [f for f in runner.simulator.ground_truth if f.kind == "crash" and f.at < settled]
    assert len(crashes) >= 5, "the run should inject enough crashes to mean something"
    found = {
        (a.attempt.job_id, a.attempt.attempt_index): a
        for a in Anomaly.objects.filter(family=AnomalyFamily.INTERRUPTION).select_related("attempt")
    }
    missed = [f for f in crashes if (f.job_id, f.attempt) not in found]
    assert missed == []
    for fault in crashes:
        anomaly = found[(fault.job_id, fault.attempt)]
        assert anomaly.detected_at >= anomaly.first_evidence_at
        assert anomaly.detected_at - fault.at < timedelta(minutes=2)


def test_node_faults_name_the_node_the_simulator_broke() -> None:
    cluster = simulated_cluster(seed=5)
    runner = run(cluster, minutes=90)
    hardware = [
        f
        for f in runner.simulator.ground_truth
        if f.kind == "crash" and f.attribution == "hardware" and f.implicated_hosts
    ]
    assert hardware, "the run should inject hardware faults"
    named = 0
    for fault in hardware:
        anomaly = Anomaly.objects.filter(
            attempt__job_id=fault.job_id, attempt__attempt_index=fault.attempt
        ).first()
        if anomaly and set(anomaly.implicated_hosts) == set(fault.implicated_hosts):
            named += 1
    assert named / len(hardware) >= 0.8


def test_a_scan_with_nothing_new_changes_nothing() -> None:
    cluster = simulated_cluster(fault_rate=0.0)
    runner = run(cluster, minutes=5)
    cursors = list(SourceCursor.objects.values_list("source", "cursor"))
    summary = scan_cluster(cluster, runner.now, runner.sources)
    assert (summary.lines, summary.new_anomalies) == (0, 0)
    assert list(SourceCursor.objects.values_list("source", "cursor")) == cursors
    assert Anomaly.objects.count() == 0


def test_kinds_found_match_the_kinds_injected() -> None:
    cluster = simulated_cluster(seed=23, fault_rate=2.0)
    runner = run(cluster, minutes=60)
    injected = Counter(f.kind for f in runner.simulator.ground_truth)
    detected = Counter(a.kind for a in Anomaly.objects.all())
    assert detected["crash"] >= injected["crash"] * 0.9


def run_with_fault(fault: str, minutes: float = 6, settle_minutes: float = 4) -> tuple:
    cluster = simulated_cluster(seed=31, fault_rate=0.0, manual_recovery=None)
    runner = SimulationRunner(cluster, start=T0, in_process=True)
    for _ in range(int(settle_minutes * 60 / STEP)):
        runner.step(STEP)
        scan_cluster(cluster, runner.now, runner.sources)
    job_id = next(j.job_id for j in runner.simulator.snapshot().jobs if j.state == "RUNNING")
    injected = runner.simulator.inject(job_id, fault)
    for _ in range(int(minutes * 60 / STEP)):
        runner.step(STEP)
        scan_cluster(cluster, runner.now, runner.sources)
    return injected, Anomaly.objects.filter(attempt__job_id=job_id)


@pytest.mark.parametrize("fault", ["gpu_silent_hang", "nfs_server_hang", "ib_link_down_hang"])
def test_an_injected_hang_is_detected(fault: str) -> None:
    injected, anomalies = run_with_fault(fault)
    anomaly = anomalies.get(family=AnomalyFamily.INTERRUPTION)
    assert anomaly.kind in {"hang", "crash"}  # a watchdog may turn the hang into a crash
    # The evidence starts at the last progress line, at most one progress interval earlier.
    assert injected.at - timedelta(seconds=10 + STEP) <= anomaly.first_evidence_at


def test_an_injected_slowdown_is_detected_and_names_the_throttled_node() -> None:
    injected, anomalies = run_with_fault("gpu_thermal_throttle")
    anomaly = anomalies.get(family=AnomalyFamily.STRAGGLER)
    assert anomaly.kind == "straggler"
    assert anomaly.implicated_hosts == list(injected.implicated_hosts)
