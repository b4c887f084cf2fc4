"""Whatever the seed and whatever is done to it, the cluster stays consistent."""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable

from hypothesis import given, settings
from hypothesis import strategies as st

from detection.core.telemetry import LogLine
from fleet.core.scheduler import ClusterSnapshot, JobState, NodeState
from lab.simulator import SchedulerError, SimulatedCluster, SimulationConfig

ACTIONS = ("wait", "requeue", "exclude", "release", "cancel", "drain", "resume", "submit")
OCCUPIED = (JobState.RUNNING, JobState.COMPLETING)


def check(snapshot: ClusterSnapshot) -> None:
    states = {n.name: n.state for n in snapshot.nodes}
    running = [j for j in snapshot.jobs if j.state is JobState.RUNNING]
    holders = Counter(name for j in running for name in j.nodes)
    assert all(count == 1 for count in holders.values()), "a node runs two jobs"
    for record in running:
        assert record.nodes, f"{record.job_id} runs nowhere"
        assert not set(record.nodes) & set(record.excluded_nodes), "ran on an excluded node"
        assert {states[name] for name in record.nodes} <= {NodeState.ALLOCATED, NodeState.DRAINING}
    for name, state in states.items():
        if state in (NodeState.IDLE, NodeState.DRAINED):
            assert name not in holders, f"{name} is {state} under a running job"
    for record in snapshot.jobs:
        if record.state is JobState.PENDING:
            assert record.nodes == ()


def act(sim: SimulatedCluster, action: str, pick: int) -> None:
    jobs = sim.snapshot().jobs
    nodes = sim.snapshot().nodes
    if not jobs or action == "wait":
        return
    target = jobs[pick % len(jobs)]
    node = nodes[pick % len(nodes)].name
    verbs: dict[str, Callable[[], object]] = {
        "requeue": lambda: sim.scheduler.requeue_hold(target.job_id),
        "exclude": lambda: sim.scheduler.update_exclusions(target.job_id, [node]),
        "release": lambda: sim.scheduler.release(target.job_id),
        "cancel": lambda: sim.scheduler.cancel(target.job_id),
        "drain": lambda: sim.scheduler.drain(node, "hypothesis"),
        "resume": lambda: sim.scheduler.resume(node),
        "submit": lambda: sim.scheduler.submit("llama-8b-dpo", 1 + pick % 3, exclude=[node]),
    }
    with contextlib.suppress(SchedulerError):  # refusing is fine; inconsistency is not
        verbs[action]()


def ordered(lines: list[LogLine], after: object, until: object) -> bool:
    stamps = [line.at for line in lines]
    return stamps == sorted(stamps) and all(after <= s <= until for s in stamps)  # type: ignore[operator]


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    requeue_delay=st.sampled_from([0.0, 10.0]),
    steps=st.lists(
        st.tuples(st.floats(0.0, 1800.0), st.sampled_from(ACTIONS), st.integers(0, 1000)),
        max_size=10,
    ),
)
def test_any_seed_and_any_actions_keep_the_cluster_consistent(
    seed: int, requeue_delay: float, steps: list[tuple[float, str, int]]
) -> None:
    config = SimulationConfig(
        seed=seed,
        nodes=16,
        workloads=5,
        fault_rate=1.0,
        nodes_per_job=(1, 4),
        requeue_delay_s=requeue_delay,
    )
    sim = SimulatedCluster(config)
    for seconds, action, pick in steps:
        before = sim.now
        lines = sim.advance(seconds)
        assert ordered(lines, before, sim.now)
        check(sim.snapshot())
        act(sim, action, pick)
        check(sim.snapshot())
    for fault in sim.ground_truth:
        assert fault.at <= sim.now
