"""The whole loop against a real Slurm cluster (slurmctld, four slurmd, munge on this machine):
a two-node job prints a GPU failure on one node and fails; the console detects it and advises a
restart without that node; in action mode the controller requeues, excludes and releases it
through the Advisor API over HTTP, and the next attempt runs elsewhere. In monitor mode nothing
in Slurm changes."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from detection.scan import scan_cluster
from recovery_console.fleet import services as console
from recovery_console.fleet.models import Attempt, ClusterMode
from remediation import services
from remediation.controller.advisor_http import HttpAdvisor
from remediation.controller.reconciler import Controller
from remediation.controller.slurm import SlurmClient
from remediation.models import Advice, Milestone

from .lab import SlurmLab

pytestmark = [pytest.mark.slurm, pytest.mark.django_db(transaction=True)]

FAILING_ON_NODE2 = """\
srun --label --kill-on-bad-exit=1 bash -c '
if [ "$SLURMD_NODENAME" = node2 ] && [ "${SLURM_RESTART_COUNT:-0}" = 0 ]; then
  echo "$SLURMD_NODENAME: NVRM: Xid (PCI:0000:3b:00): 79, pid=$$, name=python, \
GPU has fallen off the bus."
  echo "[rank$SLURM_PROCID]: RuntimeError: CUDA error: unspecified launch failure"
  exit 1
fi
echo " iteration        1/  100000 | elapsed time per iteration (ms): 900.0 | lm loss: 2.1 |"
sleep 120'
"""


def loop_until(done: Callable[[], bool], turn: Callable[[], None], timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, "the loop did not get there in time"
        turn()
        time.sleep(0.5)


@pytest.fixture
def site(slurm_lab: SlurmLab, slurm_client: SlurmClient, live_server):
    slurm_lab.reset()
    cluster = console.create_cluster(
        "user:alice",
        "lab",
        telemetry={
            "logs": {"type": "files", "path": str(slurm_lab.jobs_dir)},
            "metrics": {"type": "none"},
        },
        scheduler={"backend": "slurm"},
        # Four nodes: the default breaker (10% of the cluster) would refuse to exclude any.
        policy={"circuit_breaker_max_share": 0.5},
    )
    secret = services.issue_controller_token("user:alice", cluster, "lab-controller").secret
    advisor = HttpAdvisor(live_server.url, "lab", secret)
    controller = Controller(advisor, slurm_client, lambda: datetime.now(UTC))

    def turn() -> None:
        controller.cycle()  # reports what Slurm sees, then acts on enforced advice
        scan_cluster(cluster, datetime.now(UTC))
        services.advise_cluster(cluster, datetime.now(UTC))

    yield cluster, turn
    slurm_lab.reset()


def submit(slurm_lab: SlurmLab) -> str:
    # Four idle nodes: Slurm gives a two-node job node1 and node2, so node2's rank fails.
    return slurm_lab.sbatch(FAILING_ON_NODE2, "-N", "2", "--comment", '{"workload": "llama-e2e"}')


def test_in_action_mode_the_job_is_restarted_without_the_failed_node(
    site, slurm_lab: SlurmLab
) -> None:
    cluster, turn = site
    cluster.mode = ClusterMode.ACTION
    cluster.save()
    job_id = submit(slurm_lab)

    def resumed() -> bool:
        attempt = Attempt.objects.filter(job_id=job_id, attempt_index=1, state="RUNNING").first()
        return attempt is not None

    loop_until(resumed, turn)
    advice = Advice.objects.get(attempt__job_id=job_id, attempt__attempt_index=0)
    assert (advice.action, advice.exclude_nodes) == ("restart_excluding_node", ["node2"]), (
        advice.reasons
    )
    assert (advice.action, advice.exclude_nodes, advice.state) == (
        "restart_excluding_node",
        ["node2"],
        "executed",
    )
    assert list(Milestone.objects.filter(advice=advice).values_list("action", flat=True)) == [
        "requeue_hold",
        "update_exclusions",
        "release",
    ]
    first, second = Attempt.objects.filter(job_id=job_id).order_by("attempt_index")
    # FAILED, or REQUEUED when the controller acted before a report caught the failed state.
    assert first.state in {"FAILED", "REQUEUED"} and "node2" in first.nodes
    assert "node2" not in second.nodes and second.excluded_nodes == ["node2"]
    assert second.time_to_resume_s is not None and second.time_to_resume_s > 0
    raw = next(j for j in slurm_lab.squeue() if str(j["job_id"]) == job_id)
    assert raw["restart_cnt"] == 1 and "node2" in raw["excluded_nodes"]


def test_in_monitor_mode_the_advice_is_published_and_slurm_is_untouched(
    site, slurm_lab: SlurmLab
) -> None:
    cluster, turn = site
    job_id = submit(slurm_lab)
    loop_until(lambda: Advice.objects.filter(attempt__job_id=job_id).exists(), turn)
    for _ in range(6):
        turn()
        time.sleep(0.5)
    advice = Advice.objects.get(attempt__job_id=job_id)
    assert (advice.action, advice.enforce, advice.state) == (
        "restart_excluding_node",
        False,
        "proposed",
    )
    assert not Milestone.objects.exists()
    raw = next(j for j in slurm_lab.squeue() if str(j["job_id"]) == job_id)
    assert (raw["job_state"], raw["restart_cnt"]) == ("FAILED", 0)


def test_the_watchdog_releases_a_job_left_held_by_a_dead_controller(
    slurm_lab: SlurmLab, slurm_client: SlurmClient, tmp_path
) -> None:
    from remediation.controller.watchdog import Watchdog

    slurm_lab.reset()
    job_id = slurm_lab.submit_job(nodes=2, sleep=300)
    running = lambda: getattr(slurm_client.job(job_id), "state", None) == "RUNNING"  # noqa: E731
    loop_until(running, lambda: None, timeout=30)
    slurm_client.requeue_hold(job_id)  # ... and the controller dies before its release

    def held() -> bool:  # as the watchdog sees it: pending, held, after a requeue
        job = slurm_client.job(job_id)
        return job is not None and job.state == "PENDING" and job.held and job.restart_count > 0

    loop_until(held, lambda: None, timeout=30)
    clock = [datetime.now(UTC)]
    watchdog = Watchdog(
        slurm_client, lambda: clock[0], hold_timeout_s=60, state_path=tmp_path / "w.json"
    )
    assert watchdog.cycle() == []
    clock[0] = clock[0] + timedelta(seconds=61)
    assert watchdog.cycle() == [job_id]
    loop_until(running, lambda: None, timeout=30)
    assert slurm_client.job(job_id).restart_count == 1
    slurm_lab.reset()
