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
