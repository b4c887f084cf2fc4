"""Families of what orchestrators say about a job: the cloud taking back its spot or
preemptible capacity (restart on new capacity), and the training container's own error exit
(stop: the program failed). Short phrasings of our own, and near misses that must stay benign.
Library tests: no Django."""

from __future__ import annotations

import pytest

from remediation.core.verdict import judge_excerpt

STEPS = ("step 40 | loss 2.31 | lr 1e-4", "step 41 | loss 2.30 | lr 1e-4")


def verdict(*lines: str) -> tuple[object, object, object]:
    found, _ = judge_excerpt("\n".join(lines).encode())
    got = found.to_dict()
    return got["category"], got["attribution"], got["action"]


@pytest.mark.parametrize(
    "line",
    [
        "I 03-02 10:11:12 controller.py:90] Cluster is preempted (status: STOPPED). Recovering...",
        "WARNING: instance train-node-3 was preempted by the cloud provider",
        "operation compute.instances.preempted on projects/p/zones/z/instances/worker-7",
        "Received EC2 Spot Instance interruption notice, terminating in 2 minutes",
        "the TPU VM has been preempted; the queued resource is being recreated",
        "spot VM got reclaimed by the provider (capacity)",
    ],
)
def test_the_cloud_reclaiming_spot_capacity_restarts(line: str) -> None:
    assert verdict(*STEPS, line) == ("node_or_process_failure", "scheduler", "restart")


def test_a_job_that_merely_asks_for_preemptible_capacity_stays_benign() -> None:
    got = verdict(
        "resources: use_spot=True, spot_recovery=FAILOVER, preemptible: true",
        "instance worker-2 is preemptible; checkpoints go to the bucket every 500 steps",
        *STEPS,
    )
    assert got == ("benign", "none", "none")


@pytest.mark.parametrize(
    "line",
    [
        "INFO[0100] Pod: ns.trainjob-worker-1 exited with code 1  job=ns.trainjob",
        "container trainer in pod ns/ft-master-0 terminated with exit code 2",
        "replica worker-3 exited with code 127",
    ],
)
def test_a_training_container_exiting_with_its_own_error_code_stops(line: str) -> None:
    assert verdict(*STEPS, line) == ("application_error", "application", "stop")


def test_a_container_exit_that_is_a_signal_is_not_read_as_the_programs_error() -> None:
    # 137 is SIGKILL: whoever sent it, the program did not fail by itself.
    got = verdict(*STEPS, "Pod: ns.trainjob-worker-1 exited with code 137")
    assert got[0] != "application_error"


def test_a_container_that_exited_cleanly_stays_benign() -> None:
    got = verdict(*STEPS, "Pod: ns.trainjob-worker-1 exited with code 0  job=ns.trainjob")
    assert got == ("benign", "none", "none")


def test_the_programs_own_traceback_outranks_the_orchestrators_exit_line() -> None:
    got = verdict(
        *STEPS,
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
        "Pod: ns.trainjob-worker-0 exited with code 1",
    )
    assert got == ("cuda_oom", "application", "stop")


@pytest.mark.parametrize(
    "lines",
    [
        ("Status:", "  State:", "    Phase:                 Failed", "  Retry Count:  3"),
        ("Normal  ExecuteAction  2m  vc-controller-manager  Start to execute action RestartTask",),
        ("PyTorchJob ns/ft-run is failed because 2 Worker replica(s) failed.",),
    ],
)
def test_an_orchestrator_reporting_a_failed_job_with_no_cause_restarts(
    lines: tuple[str, ...],
) -> None:
    assert verdict(*lines) == ("node_or_process_failure", "scheduler", "restart")


def test_a_cause_in_the_log_outranks_the_orchestrators_failed_phase() -> None:
    got = verdict(
        *STEPS,
        "ValueError: expected a 'labels' column in the dataset",
        "    Phase:                 Failed",
    )
    assert got == ("application_error", "application", "stop")


def test_an_orchestrator_reporting_a_running_job_stays_benign() -> None:
    got = verdict(
        "    Phase:                 Running",
        "Normal  ExecuteAction  1m  vc-controller-manager  Start to execute action SyncJob",
        "PyTorchJob ns/ft-run is running.",
    )
    assert got == ("benign", "none", "none")


# The notice a VM's agent relays before the cloud takes spot or preemptible capacity back.


@pytest.mark.parametrize(
    "line",
    [
        "Mar 02 10:00:00Z w-3 start-worker 2025/03/02 10:00:00 EC2 Metadata Service says "
        "termination is imminent",
        "worker-runner: spot termination notice received, draining",
        "agent: received a preemption notice from the metadata server (30 s left)",
        '{"EventId": "A1", "EventType": "Preempt", "ResourceType": "VirtualMachine"}',
    ],
)
def test_a_cloud_notice_of_imminent_termination_restarts(line: str) -> None:
    assert verdict(*STEPS, line) == ("node_or_process_failure", "scheduler", "restart")


def test_polling_for_a_termination_notice_stays_benign() -> None:
    got = verdict(
        "start-worker 2025/03/02 10:00:00 polling for termination-time",
        "start-worker: no termination notice; instance healthy",
        *STEPS,
    )
    assert got == ("benign", "none", "none")


# Ray saying an actor or task was lost because its node died: the node is at fault, named by
# Ray's line or by the ``ip:`` field of the actor's record before it.


def test_an_actor_lost_with_its_node_takes_the_node_named_in_its_record_out() -> None:
    found, _ = judge_excerpt(
        "\n".join(
            (
                "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing.",
                "\tclass_name: Learner",
                "\tpid: 812",
                "\tip: 10.4.0.17",
                "The actor died because its node has died. Node Id: 9a1b2c",
            )
        ).encode()
    )
    got = found.to_dict()
    assert (got["category"], got["action"]) == ("node_or_process_failure", "restart_excluding_node")
    assert got["implicated_hosts"] == ["10.4.0.17"]


def test_a_task_lost_with_its_node_takes_the_node_ray_names_out() -> None:
    found, _ = judge_excerpt(
        b"ray.exceptions.NodeDiedError: Task failed because the node it was running on is dead "
        b"or unavailable. Node IP: 10.4.0.9, node ID: 77ab"
    )
    got = found.to_dict()
    assert got["action"] == "restart_excluding_node"
    assert got["implicated_hosts"] == ["10.4.0.9"]


def test_an_actor_lost_with_a_node_ended_on_purpose_restarts_without_blaming_it() -> None:
    found, _ = judge_excerpt(
        b"\tip: 10.4.0.17\n"
        b"The actor died because its node has died. Node Id: 9a1b2c\n"
        b"\tthe actor's node was terminated expectedly: received SIGTERM"
    )
    got = found.to_dict()
    assert (got["action"], got["implicated_hosts"]) == ("restart", [])


# An MPI launcher or process losing a remote daemon or peer, with no cause: restart; a cause
# logged beside it comes first.


@pytest.mark.parametrize(
    "lines",
    [
        (
            "PRTE has lost communication with a remote daemon.",
            "  Remote daemon: [prterun-n1-77@0,3] on node gpu-n4",
        ),
        ("ORTE has lost communication with its daemon located on node:", "  hostname:  n9"),
        ("An MPI communication peer process has unexpectedly disconnected.  This",),
        (
            "[mpiexec@n0] control_cb (pm/pmiserv/pmiserv_cb.c:208): assert (!closed) failed",
            "[mpiexec@n0] HYDT_dmxu_poll_wait_for_event (tools/demux/demux_poll.c:77): callback "
            "returned error status",
        ),
    ],
)
def test_an_mpi_launcher_losing_a_peer_with_no_cause_restarts(lines: tuple[str, ...]) -> None:
    assert verdict(*STEPS, *lines) == ("node_or_process_failure", "system_software", "restart")


def test_the_peers_own_failure_outranks_the_lost_connection() -> None:
    got = verdict(
        *STEPS,
        "An MPI communication peer process has unexpectedly disconnected.  This",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB",
    )
    assert got == ("cuda_oom", "application", "stop")
