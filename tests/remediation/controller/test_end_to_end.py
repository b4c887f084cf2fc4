"""The whole loop against a real Slurm cluster (slurmctld, four slurmd, munge on this machine):
a two-node job prints a GPU failure on one node and fails; the console detects it and advises a
restart without that node; in action mode the controller requeues, excludes and releases it
through the Advisor API over HTTP, and the next attempt runs elsewhere. In monitor mode nothing
in Slurm changes. A node that dies (its slurmd killed) is handled whoever requeues first, a stop
is final even for a job Slurm requeues itself, and drains go back through Slurm on release."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

import pytest

from detection.models import Anomaly
from detection.scan import scan_cluster
from fleet import services as console
from fleet.core.scheduler import ClusterSnapshot
from fleet.models import Attempt, AuditEntry, Cluster, ClusterMode
from remediation import services
from remediation.controller.advisor_http import HttpAdvisor
from remediation.controller.reconciler import Controller
from remediation.controller.slurm import SlurmClient
from remediation.models import Advice, Milestone, NodeHealth

from .lab import REQUEUE_EXIT, SlurmLab

pytestmark = [pytest.mark.slurm, pytest.mark.django_db(transaction=True)]

# The failing rank lingers a moment before it exits: srun ends the whole step on the first bad
# exit (--kill-on-bad-exit) and may drop that rank's output still on its way from the node.
FAILING_ON_NODE2 = """\
srun --label --kill-on-bad-exit=1 bash -c '
if [ "$SLURMD_NODENAME" = node2 ] && [ "${SLURM_RESTART_COUNT:-0}" = 0 ]; then
  echo "$SLURMD_NODENAME: NVRM: Xid (PCI:0000:3b:00): 79, pid=$$, name=python, \
GPU has fallen off the bus."
  echo "[rank$SLURM_PROCID]: RuntimeError: CUDA error: unspecified launch failure"
  sleep 2
  exit 1
fi
echo " iteration        1/  100000 | elapsed time per iteration (ms): 900.0 | lm loss: 2.1 |"
sleep 120'
"""


def what_the_console_saw(slurm_lab: SlurmLab, job_id: str) -> dict[str, object]:
    """For a failed assertion: the job's output as Slurm wrote it, and what detection made of it."""
    anomalies = Anomaly.objects.filter(attempt__job_id=job_id)
    return {
        "output": slurm_lab.output_path(job_id).read_text(errors="replace")[-3000:],
        "anomalies": list(anomalies.values("category", "confidence_label", "evidence")),
        "advice": list(
            Advice.objects.filter(attempt__job_id=job_id).values_list("action", "reasons")
        ),
    }


def loop_until(
    done: Callable[[], bool],
    turn: Callable[[], None],
    timeout: float = 90.0,
    state: Callable[[], object] = lambda: "",
) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"the loop did not get there in time: {state()}"
        turn()
        time.sleep(0.5)


@dataclass
class Site:
    """The console (with its live server), a controller over HTTP, and the lab's cluster."""

    cluster: Cluster
    controller: Controller
    lab: SlurmLab

    def scan(self) -> None:
        scan_cluster(self.cluster, datetime.now(UTC))

    def advise(self) -> None:
        services.advise_cluster(self.cluster, datetime.now(UTC))

    def turn(self) -> None:
        self.controller.cycle()  # reports what Slurm sees, then acts on enforced advice
        self.scan()
        self.advise()


class ThisTestsJobs:
    """The lab's Slurm as one test's console sees it: Slurm lists ended jobs for MinJobAge, and
    an earlier test's failed job must not be advised on (and restarted) in this one."""

    def __init__(self, client: SlurmClient, lab: SlurmLab) -> None:
        self.client = client
        self.after = max((int(j["job_id"]) for j in lab.squeue()), default=0)

    def __getattr__(self, name: str) -> object:
        return getattr(self.client, name)

    def snapshot(self) -> ClusterSnapshot:
        taken = self.client.snapshot()
        jobs = tuple(j for j in taken.jobs if int(j.job_id.split("_")[0]) > self.after)
        return replace(taken, jobs=jobs)


@pytest.fixture
def site(slurm_lab: SlurmLab, slurm_client: SlurmClient, live_server, request):
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
        policy={"circuit_breaker_max_share": 0.5, **getattr(request, "param", {})},
    )
    secret = services.issue_controller_token("user:alice", cluster, "lab-controller").secret
    advisor = HttpAdvisor(live_server.url, "lab", secret)
    slurm = ThisTestsJobs(slurm_client, slurm_lab)
    yield Site(cluster, Controller(advisor, slurm, lambda: datetime.now(UTC)), slurm_lab)
    slurm_lab.reset()


def submit(slurm_lab: SlurmLab) -> str:
    # Four idle nodes: Slurm gives a two-node job node1 and node2, so node2's rank fails.
    return slurm_lab.sbatch(FAILING_ON_NODE2, "-N", "2", "--comment", '{"workload": "llama-e2e"}')


def test_in_action_mode_the_job_is_restarted_without_the_failed_node(
    site, slurm_lab: SlurmLab
) -> None:
    cluster, turn = site.cluster, site.turn
    cluster.mode = ClusterMode.ACTION
    cluster.save()
    job_id = submit(slurm_lab)

    def resumed() -> bool:
        attempt = Attempt.objects.filter(job_id=job_id, attempt_index=1, state="RUNNING").first()
        return attempt is not None

    loop_until(resumed, turn)
    advice = Advice.objects.get(attempt__job_id=job_id, attempt__attempt_index=0)
    assert (advice.action, advice.exclude_nodes) == ("restart_excluding_node", ["node2"]), (
        what_the_console_saw(slurm_lab, job_id)
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
    turn = site.turn
    job_id = submit(slurm_lab)

    def advised_without_node2() -> bool:
        advice = Advice.objects.filter(attempt__job_id=job_id).first()
        return advice is not None and advice.exclude_nodes == ["node2"]

    loop_until(advised_without_node2, turn, state=lambda: what_the_console_saw(slurm_lab, job_id))
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


# Every rank reports progress each second; with --requeue Slurm requeues the job itself when a
# node dies, and the next attempt runs the same script.
TRAINING = """\
echo "start restart=${SLURM_RESTART_COUNT:-0} nodes=$SLURM_JOB_NODELIST"
srun --label bash -c 'for i in $(seq 1 600); do
  echo " iteration $i/  100000 | elapsed time per iteration (ms): 1000.0 | lm loss: 2.1 |"
  sleep 1
done'
"""


# The same, but a requeued attempt writes nothing for its first 20 s: a line without a time of
# its own carries its read time, so the failed attempt's last lines must be read before the next
# attempt appends to the file (on a loaded machine the 5 s begin-time delay is not enough).
TRAINING_QUIET_AFTER_A_REQUEUE = '[ "${SLURM_RESTART_COUNT:-0}" -gt 0 ] && sleep 20\n' + TRAINING

SHOWN = ("job_state", "state_reason", "restart_cnt", "nodes", "excluded_nodes", "priority")


def job_of(slurm_lab: SlurmLab, job_id: str) -> dict:
    return next(j for j in slurm_lab.squeue() if str(j["job_id"]) == job_id)


def action_mode(site: Site) -> None:
    site.cluster.mode = ClusterMode.ACTION
    site.cluster.save()


def running_in_console(site: Site, job_id: str, index: int) -> Attempt:
    def seen() -> bool:
        return Attempt.objects.filter(job_id=job_id, attempt_index=index, state="RUNNING").exists()

    def state() -> object:
        attempts = Attempt.objects.filter(job_id=job_id).values_list("attempt_index", "state")
        advice = Advice.objects.filter(attempt__job_id=job_id)
        return {
            "attempts": list(attempts),
            "advice": list(advice.values_list("action", "state", "disposition_reason")),
            "slurm": {k: job_of(site.lab, job_id).get(k) for k in SHOWN},
            "nodes": {n: (v["state"], v["state_flags"]) for n, v in site.lab.sinfo().items()},
            "jobs": [[j.get(k) for k in ("job_id", *SHOWN)] for j in site.lab.squeue()],
        }

    loop_until(seen, site.turn, state=state)
    return Attempt.objects.get(job_id=job_id, attempt_index=index)


@pytest.mark.parametrize("recorded_first", ["requeue", "failure lines"])
def test_a_dead_node_is_excluded_whoever_requeues_first(
    site: Site, slurm_lab: SlurmLab, recorded_first: str
) -> None:
    """The node's slurmd is killed; Slurm declares it down and requeues the job itself. Whether
    the console records the new pending attempt before or after it reads the failure's lines,
    the evidence stays with the attempt that failed, the controller adds the exclusion to the
    pending job (no requeue-hold, which Slurm refuses), and time to resume counts the time the
    node was dead."""
    action_mode(site)
    job_id = slurm_lab.sbatch(
        TRAINING_QUIET_AFTER_A_REQUEUE, "-N", "2", "--requeue", "--open-mode=append"
    )
    first = running_in_console(site, job_id, 0)
    victim = first.nodes[1]
    killed_at = datetime.now(UTC)
    slurm_lab.kill_slurmd(victim)
    try:
        requeued = lambda: job_of(slurm_lab, job_id)["restart_cnt"] == 1  # noqa: E731
        loop_until(requeued, lambda: None, timeout=60)
        # srun and slurmstepd say so in the output as Slurm requeues the job. (Lines read only
        # after the next attempt started, in one read with its own, would carry its time.)
        written = lambda: "NODE FAILURE" in slurm_lab.output_path(job_id).read_text()  # noqa: E731
        loop_until(written, lambda: None, timeout=10)
        # The order the race can take, made deterministic: then the loop runs as usual.
        if recorded_first == "requeue":
            site.controller.cycle()
            site.scan()
        else:
            site.scan()
            site.controller.cycle()
        site.advise()
        second = running_in_console(site, job_id, 1)
    finally:
        slurm_lab.start_slurmd(victim)
    advice = Advice.objects.get(attempt__job_id=job_id)
    assert advice.attempt.attempt_index == 0, "the evidence went to the attempt that failed"
    assert (advice.action, advice.exclude_nodes, advice.state) == (
        "restart_excluding_node",
        [victim],
        "executed",
    ), (advice.reasons, advice.disposition_reason)
    steps = list(Milestone.objects.filter(advice=advice).values_list("action", flat=True))
    # Slurm requeued it: no requeue-hold. Held only when it could have started first.
    assert steps in (["update_exclusions"], ["hold", "update_exclusions", "release"]), steps
    raw = job_of(slurm_lab, job_id)
    assert raw["restart_cnt"] == 1 and victim in raw["excluded_nodes"]
    assert victim not in second.nodes and second.excluded_nodes == [victim]
    first.refresh_from_db()
    second.refresh_from_db()
    waited_after_the_requeue = (second.started_at - first.ended_at).total_seconds()
    since_the_kill = (second.started_at - killed_at).total_seconds()
    # Slurm said the node was down SlurmdTimeout (10 s) after it last heard from it at best.
    assert waited_after_the_requeue + 5 < second.time_to_resume_s <= since_the_kill + 1, (
        second.time_to_resume_s,
        waited_after_the_requeue,
        since_the_kill,
    )


FAILS_ITS_CONFIG = f"""\
echo "start restart=${{SLURM_RESTART_COUNT:-0}}"
sleep 3
echo "[rank0]: Traceback (most recent call last):"
echo "[rank0]:   File \"/workspace/train.py\", line 12, in <module>"
echo "[rank0]: FileNotFoundError: [Errno 2] No such file or directory: 'configs/llama-70b.yaml'"
exit {REQUEUE_EXIT}
"""


def test_a_stop_is_final_even_for_a_job_slurm_requeues_itself(
    site: Site, slurm_lab: SlurmLab
) -> None:
    """The job's wrapper exits with the code the site told Slurm to requeue for; the stop
    decided on its configuration error cancels the requeued job before it can run again."""
    action_mode(site)
    job_id = slurm_lab.sbatch(FAILS_ITS_CONFIG, "-N", "1", "--requeue", "--open-mode=append")

    def cancelled() -> bool:
        return job_of(slurm_lab, job_id)["job_state"] == "CANCELLED"

    loop_until(cancelled, site.turn)
    advice = Advice.objects.get(attempt__job_id=job_id)
    assert (advice.action, advice.state) == ("stop", "executed"), advice.reasons
    assert list(Milestone.objects.filter(advice=advice).values_list("action", flat=True)) == [
        "cancel"
    ]
    time.sleep(8)  # past the requeue's begin time: nothing starts it again
    raw = job_of(slurm_lab, job_id)
    assert (raw["job_state"], raw["restart_cnt"]) == ("CANCELLED", 1)  # Slurm did requeue it
    assert "start restart=1" not in slurm_lab.output_path(job_id).read_text()


PERSON = "swapping the HCA, ticket 4411"


def drained_in_slurm(slurm_lab: SlurmLab, node: str) -> tuple[bool, str]:
    raw = slurm_lab.sinfo()[node]
    return "DRAIN" in raw["state_flags"], raw["reason"]


# The drain needs the Xid's node: on a loaded machine the job's output can reach the scan more
# than the default 10 s after Slurm reports the failure, and a decision on Slurm's word alone
# names no node.
@pytest.mark.parametrize(
    "site", [{"drain_after_strikes": 1, "evidence_grace_seconds": 60}], indirect=True
)
@pytest.mark.parametrize("person", ["nobody", "drained it first", "re-drained it after us"])
def test_a_release_resumes_our_drain_in_slurm_and_never_a_persons(
    site: Site, slurm_lab: SlurmLab, person: str
) -> None:
    action_mode(site)
    job_id = submit(slurm_lab)
    if person == "drained it first":  # as a site's own health check would, on the failure
        failed = lambda: job_of(slurm_lab, job_id)["job_state"] == "FAILED"  # noqa: E731
        loop_until(failed, lambda: None, timeout=60)
        slurm_lab.run("scontrol", "update", "nodename=node2", "state=drain", f"reason={PERSON}")
    running_in_console(site, job_id, 1)
    advice = Advice.objects.get(attempt__job_id=job_id, attempt__attempt_index=0)
    assert advice.drain_nodes == ["node2"], what_the_console_saw(slurm_lab, job_id)
    drained, reason = drained_in_slurm(slurm_lab, "node2")
    if person == "drained it first":
        assert (drained, reason) == (True, PERSON)  # their reason is kept
    else:
        assert drained and reason.startswith(f"recovery-console advice {advice.pk}: gpu_hardware:")
        assert "fallen off the bus" in reason or "Xid" in reason, reason
    if person == "re-drained it after us":
        slurm_lab.run("scontrol", "update", "nodename=node2", "state=drain", f"reason={PERSON}")
    services.release_node("user:bob", site.cluster, "node2", "GPU reseated, dcgmi diag passed")
    site.controller.cycle()
    after = drained_in_slurm(slurm_lab, "node2")
    health = NodeHealth.objects.get(cluster=site.cluster, name="node2")
    if person == "nobody":
        assert after[0] is False, after  # back in service in Slurm
        entry = AuditEntry.objects.get(verb="node.resumed")
        assert entry.payload["outcome"] == "resumed" and entry.actor.startswith("controller:")
    else:
        assert after == (True, PERSON)  # a person's drain is theirs to undo
        assert not AuditEntry.objects.filter(verb="node.resumed").exists()
    assert health.resume_requested_at is None
