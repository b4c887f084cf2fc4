"""A real Slurm job array through the whole loop (slurmctld, four slurmd, munge): three tasks
run, one of them prints a GPU failure and fails. Each task is its own workload under the
array; only the failed task's lineage gets the advice, the restart and the budget, in Slurm
as in the console. The four-node cluster runs the default policy: its circuit breaker lets it
take out one node."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime

import pytest

from detection.scan import scan_cluster
from fleet import services as console
from fleet.models import Attempt, ClusterMode, Workload
from remediation import services
from remediation.controller.advisor_http import HttpAdvisor
from remediation.controller.reconciler import Controller
from remediation.controller.slurm import SlurmClient
from remediation.models import Advice

from .lab import SlurmLab

pytestmark = [pytest.mark.slurm, pytest.mark.django_db(transaction=True)]

# Task 2 fails on its first run with an Xid naming its node; tasks 0 and 1 train on.
ARRAY_WITH_ONE_FAILING_TASK = """\
if [ "$SLURM_ARRAY_TASK_ID" = 2 ] && [ "${SLURM_RESTART_COUNT:-0}" = 0 ]; then
  echo "$SLURMD_NODENAME: NVRM: Xid (PCI:0000:3b:00): 79, pid=$$, name=python, \
GPU has fallen off the bus."
  echo "RuntimeError: CUDA error: unspecified launch failure"
  exit 1
fi
echo " iteration        1/  100000 | elapsed time per iteration (ms): 900.0 | lm loss: 2.1 |"
sleep 120
"""


def loop_until(
    done: Callable[[], bool], turn: Callable[[], None], describe: Callable[[], object]
) -> None:
    deadline = time.monotonic() + 120.0
    while not done():
        assert time.monotonic() < deadline, f"the loop did not get there in time: {describe()}"
        turn()
        time.sleep(0.5)


def where_it_got(slurm_lab: SlurmLab, array_id: str) -> dict[str, object]:
    """What the console and Slurm show, for a failure's message."""
    return {
        "attempts": list(
            Attempt.objects.values_list(
                "job_id", "attempt_index", "state", "nodes", "workload__key"
            )
        ),
        "advice": list(Advice.objects.values_list("action", "state", "exclude_nodes", "reasons")),
        "slurm": [
            (j["job_id"], j["array_task_id"], j["job_state"], j["restart_cnt"], j["nodes"])
            for j in slurm_lab.squeue()
            if str(j.get("array_job_id")) == array_id
        ],
    }


@pytest.fixture
def site(slurm_lab: SlurmLab, local_slurm_client: SlurmClient, own_partition: str, live_server):
    # Its own output directory: earlier tests' job output is not this cluster's evidence.
    output = slurm_lab.jobs_dir / f"arrays-{time.monotonic_ns()}"
    output.mkdir()
    cluster = console.create_cluster(
        "user:alice",
        "lab-arrays",
        telemetry={"logs": {"type": "files", "path": str(output)}, "metrics": {"type": "none"}},
        scheduler={"backend": "slurm"},
    )
    cluster.mode = ClusterMode.ACTION
    cluster.partitions_allowlist = [own_partition]
    cluster.save()
    secret = services.issue_controller_token("user:alice", cluster, "lab-controller").secret
    advisor = HttpAdvisor(live_server.url, "lab-arrays", secret)
    controller = Controller(advisor, local_slurm_client, lambda: datetime.now(UTC))

    def turn() -> None:
        controller.cycle()
        scan_cluster(cluster, datetime.now(UTC))
        services.advise_cluster(cluster, datetime.now(UTC))

    yield cluster, turn, output
    slurm_lab.reset()


def test_only_the_failed_array_task_is_restarted_and_charged(site, slurm_lab: SlurmLab) -> None:
    cluster, turn, output = site
    array_id = slurm_lab.sbatch(
        ARRAY_WITH_ONE_FAILING_TASK,
        "--array=0-2",
        "-N",
        "1",
        "-J",
        "sweep",
        "-p",
        "own",
        f"--output={output}/slurm-%A_%a.out",
        "--open-mode=append",
    )
    failed = f"{array_id}_2"

    def resumed() -> bool:
        return Attempt.objects.filter(job_id=failed, attempt_index=1, state="RUNNING").exists()

    loop_until(resumed, turn, lambda: where_it_got(slurm_lab, array_id))
    array = Workload.objects.get(cluster=cluster, key="sweep[]")
    tasks = {task.key: task for task in array.tasks.all()}
    assert set(tasks) == {"sweep[0]", "sweep[1]", "sweep[2]"} and array.is_array
    # The failed task's lineage alone: its advice, its restart, its two attempts.
    advice = Advice.objects.get(cluster=cluster, workload__array=array)
    bad_node = Attempt.objects.get(job_id=failed, attempt_index=0).nodes[0]
    assert (advice.workload.key, advice.action, advice.exclude_nodes, advice.state) == (
        "sweep[2]",
        "restart_excluding_node",
        [bad_node],
        "executed",
    ), advice.reasons
    assert tasks["sweep[2]"].attempts.count() == 2
    for key in ("sweep[0]", "sweep[1]"):
        (attempt,) = tasks[key].attempts.all()
        assert (attempt.attempt_index, attempt.state) == (0, "RUNNING")
    second = Attempt.objects.get(job_id=failed, attempt_index=1)
    assert bad_node not in second.nodes and second.excluded_nodes == [bad_node]
    # Slurm agrees: the failed task alone was requeued, without its node.
    raw = {
        (j["array_job_id"], j["array_task_id"]): j
        for j in slurm_lab.squeue()
        if str(j.get("array_job_id")) == array_id
    }
    restarts = {task: job["restart_cnt"] for (_, task), job in raw.items()}
    assert restarts == {0: 0, 1: 0, 2: 1}
    assert bad_node in raw[(int(array_id), 2)]["excluded_nodes"]
    # The array shows its tasks running again.
    array.refresh_from_db()
    assert array.state == "running"
