"""Families of a job that cannot form: a libfabric provider (EFA) refusing its set-up on every
rank, a coordinator that nothing listens on (gRPC's words for it), and c10d's store-based
barrier waiting for ranks that never check in. Each stops: a blind restart meets the same
set-up. Short phrasings of our own, and near misses that must stay benign. Library tests: no
Django."""

from __future__ import annotations

import pytest

from remediation.core.verdict import judge_excerpt


def verdict(*lines: str) -> tuple[object, object, object, object]:
    found, _ = judge_excerpt("\n".join(lines).encode())
    got = found.to_dict()
    return got["kind"], got["category"], got["attribution"], got["action"]


@pytest.mark.parametrize(
    "line",
    [
        "host-a:12:12 [0] NCCL WARN NET/OFI Couldn't open AV. RC: -22, ERROR: Invalid argument",
        "host-b:9:9 [1] NCCL WARN NET/OFI Couldn't open a fabric provider. RC: -61",
        "NCCL WARN NET/OFI Couldn't allocate domain. RC: -12, ERROR: Cannot allocate memory",
        "NCCL WARN NET/OFI Creating new endpoint for domain 0x55d0 failed: Invalid argument",
        "NCCL WARN NET/OFI aws-ofi-nccl initialization failed",
        "[  811.2] infiniband efa_1: Failed to allocate pd[-12]",
    ],
)
def test_a_fabric_provider_refusing_its_setup_stops(line: str) -> None:
    assert verdict("NCCL INFO NET/OFI Selected Provider is efa", line) == (
        "crash",
        "interconnect_network",
        "system_software",
        "stop",
    )


def test_a_fabric_provider_that_comes_up_stays_benign() -> None:
    got = verdict(
        "NCCL INFO NET/OFI Selected Provider is efa, fabric is efa (found 4 nics)",
        "NCCL INFO NET/OFI Using Libfabric version 1.19; opened AV of 4 entries",
        "NCCL INFO Init COMPLETE",
    )
    assert got == ("none", "benign", "none", "none")


@pytest.mark.parametrize(
    "lines",
    [
        (
            "[rank0] jax.distributed.initialize(coordinator_address='10.0.0.5:1234')",
            "UNAVAILABLE: failed to connect to all addresses; last error: ipv4:10.0.0.5:1234: "
            "Connection refused",
        ),
        (
            "[rank2] :UNAVAILABLE:failed to connect to all addresses",
            "[rank2] Failed to connect to remote host: Connection refused",
        ),
    ],
)
def test_a_coordinator_nothing_listens_on_at_startup_stops(lines: tuple[str, ...]) -> None:
    assert verdict(*lines) == ("crash", "interconnect_network", "system_software", "stop")


def test_a_coordinator_retry_that_connects_stays_benign() -> None:
    got = verdict(
        "jax.distributed.initialize: connecting to coordinator at 10.0.0.5:1234",
        "Connected to distributed JAX controller",
    )
    assert got == ("none", "benign", "none", "none")


def _barrier_wait(seconds: int, joined: int) -> str:
    return (
        f"[00:00:{seconds:02d}][torch.distributed.distributed_c10d][INFO] - Waiting in store "
        f"based barrier to initialize process group for rank: 0, key: store_based_barrier_key:1 "
        f"(world_size=4, worker_count={joined}, timeout=0:30:00)"
    )


@pytest.mark.parametrize("joined", [1, 3])
def test_a_store_barrier_that_keeps_waiting_for_missing_ranks_stops(joined: int) -> None:
    got = verdict(_barrier_wait(10, joined), _barrier_wait(20, joined), _barrier_wait(30, joined))
    assert got == ("hang", "nccl_timeout_hang", "application", "stop")


def test_the_newer_barrier_wording_is_read_alike() -> None:
    line = (
        "Waiting in store based barrier to initialize process group for rank: 1, key: "
        "store_based_barrier_key:2 (world_size=8, num_workers_joined=5, timeout=0:30:00)"
    )
    assert verdict(line, line) == ("hang", "nccl_timeout_hang", "application", "stop")


def test_a_store_barrier_that_waited_then_completed_stays_benign() -> None:
    got = verdict(
        _barrier_wait(10, 3),
        "Rank 0: Completed store-based barrier for key:store_based_barrier_key:1 with 4 nodes.",
        "step 1 | loss 7.10",
    )
    assert got == ("none", "benign", "none", "none")


# JAX's (TensorFlow's) coordination service stopping because tasks never registered at its
# start-up barrier: a rendezvous that never formed (tasks launched wrong or not at all), stop.


@pytest.mark.parametrize(
    "line",
    [
        "E0101 coordination_service.cc:1120] Stopping coordination service as cluster "
        "registration failed. 3 tasks never connected.",
        "DEADLINE_EXCEEDED: Barrier timed out. Id: [Init]Wait_for_all_tasks_to_register::0. "
        "Tasks that never arrived: /job:jax_worker/replica:0/task:7",
    ],
)
def test_tasks_that_never_register_with_the_coordinator_stop(line: str) -> None:
    assert verdict(line) == ("crash", "interconnect_network", "system_software", "stop")


def test_a_coordinator_that_registered_every_task_stays_benign() -> None:
    got = verdict(
        "I0101 coordination_service.cc:530] /job:jax_worker/replica:0/task:3 has connected "
        "to coordination service.",
        "I0101 coordination_service.cc:600] Barrier([Init]Wait_for_all_tasks_to_register) "
        "passed with status: OK",
    )
    assert got == ("none", "benign", "none", "none")


# Two ranks of one communicator on the same GPU: the launch's device mapping, which every
# launch repeats.


@pytest.mark.parametrize(
    "line",
    [
        "node7:311:402 [1] init.cc:610 NCCL WARN Duplicate GPU detected : rank 3 and rank 1 "
        "both on CUDA device 1b000",
        "Duplicate GPU detected : rank 5 and rank 4 both on HIP device c1000",
    ],
)
def test_two_ranks_on_one_gpu_stop_as_a_launch_error(line: str) -> None:
    assert verdict(line, "node7:311:402 [1] NCCL INFO init.cc:1358 -> 5") == (
        "crash",
        "application_error",
        "application",
        "stop",
    )


def test_distinct_gpus_per_rank_stay_benign() -> None:
    got = verdict(
        "node7:311:311 [0] NCCL INFO comm 0x5a rank 0 nranks 2 cudaDev 0 busId 1b000 - Init "
        "COMPLETE",
        "node7:312:312 [1] NCCL INFO comm 0x5b rank 1 nranks 2 cudaDev 1 busId 1c000 - Init "
        "COMPLETE",
    )
    assert got == ("none", "benign", "none", "none")


# Advice a collective library prints at start-up about the host's set-up: nothing failed.


@pytest.mark.parametrize(
    "line",
    [
        'h3:9:9 [0] init.cc:140 NCCL WARN Missing "amd_iommu=on" from the kernel command line '
        "which can lead to system instability or hang!",
        'h3:9:9 [1] init.cc:150 NCCL WARN Missing "HSA_FORCE_FINE_GRAIN_PCIE=1" from '
        "environment which can lead to low RCCL performance",
        "h3:9:9 [0] net.cc:70 NCCL WARN Tuning disabled, which may lead to reduced bus "
        "bandwidth performance",
        "h3:9:20 [0] net_fastsocket.cc:700 NCCL WARN Cannot get incoming CPU.",
    ],
)
def test_advisory_start_up_warnings_stay_benign(line: str) -> None:
    assert verdict(line, "NCCL INFO Bootstrap : Using eth0:10.0.0.3<0>") == (
        "none",
        "benign",
        "none",
        "none",
    )


def test_an_advisory_warning_does_not_hide_the_failure_after_it() -> None:
    got = verdict(
        'h3:9:9 [0] init.cc:140 NCCL WARN Missing "iommu=pt" from kernel command line which '
        "can lead to system instability or hang!",
        "h3:9:9 [0] NCCL WARN NET/Socket : No usable listening interface found",
    )
    assert got[1] == "interconnect_network"


# Connection retries that end in a connection are recovered; retries that never connect are not.


def test_connection_retries_that_then_connect_stay_benign() -> None:
    got = verdict(
        "w1:50:61 [0] net_socket.cc:300 NCCL WARN Maximum retry reached for connect 4.",
        "w0:40:52 [0] NCCL WARN Call to connect to 10.1.0.2<4021> returned Connection refused, "
        "retrying",
        "w1:50:61 [0] NCCL INFO NET/Socket : connected after 400 retries.",
    )
    assert got == ("none", "benign", "none", "none")


def test_connection_retries_that_never_connect_are_a_failure() -> None:
    got = verdict(
        "w1:50:61 [0] net_socket.cc:300 NCCL WARN Maximum retry reached for accept 2.",
        "w1:50:61 [0] NCCL WARN Maximum retry reached for connect 2.",
    )
    assert got[1] == "interconnect_network"
    assert got[3] != "none"
