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
