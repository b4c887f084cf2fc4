"""The fault catalogue: family shares, manifestation shares and the shared taxonomy."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from lab.simulator import (
    ENTRIES,
    FAMILY_SHARES,
    Attribution,
    FaultKind,
    SimulatedCluster,
    SimulationConfig,
    draw_entry,
    kind_shares,
)

DRAWS = 40_000
# DESIGN.md section 3, word for word.
CATEGORIES = {
    "gpu_hardware",
    "nccl_timeout_hang",
    "interconnect_network",
    "cuda_oom",
    "application_error",
    "filesystem_io",
    "node_or_process_failure",
    "numerical_divergence",
    "straggler",
    "benign",
}
ATTRIBUTIONS = {"hardware", "interconnect", "system_software", "application", "scheduler", "none"}


@pytest.fixture(scope="module")
def draws() -> list[object]:
    rng = random.Random(1234)
    return [draw_entry(rng) for _ in range(DRAWS)]


def test_fault_families_come_in_the_catalogue_shares(draws: list[object]) -> None:
    counts = Counter(entry.family for entry in draws)  # type: ignore[attr-defined]
    for family, share in FAMILY_SHARES.items():
        assert counts[family] / DRAWS == pytest.approx(share, abs=0.01)


def test_faults_manifest_mostly_as_crashes_then_hangs_then_slowdowns(draws: list[object]) -> None:
    counts = Counter(entry.kind for entry in draws)  # type: ignore[attr-defined]
    assert 0.80 <= counts[FaultKind.CRASH] / DRAWS <= 0.85
    assert 0.08 <= counts[FaultKind.HANG] / DRAWS <= 0.13
    assert 0.01 <= counts[FaultKind.STRAGGLER] / DRAWS <= 0.05
    assert sum(kind_shares().values()) == pytest.approx(1.0)


def test_the_catalogue_speaks_the_design_taxonomy() -> None:
    assert {e.category.value for e in ENTRIES} <= CATEGORIES
    assert {e.attribution.value for e in ENTRIES} <= ATTRIBUTIONS
    assert len({e.key for e in ENTRIES}) == len(ENTRIES)


def test_faults_that_blame_no_node_are_not_hardware_or_interconnect() -> None:
    blameless = {e.attribution for e in ENTRIES if not e.blames_host}
    assert not blameless & {Attribution.HARDWARE, Attribution.INTERCONNECT}


def test_bad_nodes_are_repeat_offenders() -> None:
    sim = SimulatedCluster(
        SimulationConfig(
            seed=3, nodes=40, workloads=8, fault_rate=0.05, nodes_per_job=(2, 4), min_job_age_s=1e6
        )
    )
    for _ in range(6 * 24):
        sim.advance(600)
        for record in sim.snapshot().jobs:
            if record.state.value in ("FAILED", "NODE_FAIL", "OUT_OF_MEMORY", "TIMEOUT"):
                sim.scheduler.requeue_hold(record.job_id)
                sim.scheduler.release(record.job_id)
    blamed = Counter(h for f in sim.ground_truth for h in f.implicated_hosts)
    top_two = sum(hits for _, hits in blamed.most_common(2))
    # Two nodes in forty (5%) carry a large part of the blame, as in real clusters.
    assert top_two >= 0.25 * sum(blamed.values())
