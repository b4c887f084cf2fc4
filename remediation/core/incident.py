"""What the policy decides on: one attributed interruption, and the workload's history."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Incident:
    """What attribution concluded about one interruption of one attempt."""

    kind: str  # crash | hang | straggler
    category: str
    attribution: str
    confidence_label: str  # established | supported | hypothesis
    hosts: tuple[str, ...]
    root_cause: str
    partition: str = ""
    step: int | None = None  # the last training step the attempt reached
    # The signature of the evidence that decided it (signature rules match on it).
    signature: str = ""
    # The evidence says a node is at fault (a fatal Xid, an ECC failure, a node failure ...),
    # whether or not it could say which node.
    node_local: bool = False
    # What the evidence says to fix, for a stop (an exception and where it was raised ...).
    detail: str = ""
    # Before the first training step ("startup"), after progress ("training"), or unknown ("").
    phase: str = ""


@dataclass(frozen=True)
class History:
    """The workload's past, as far as the policy needs it.

    ``restarts`` counts the restarts since the workload last got further (an attempt that
    reached a later step than every attempt before it; see ``restarts_since_progress``);
    ``root_causes`` lists the root cause of each earlier interrupted attempt with the step it had
    reached, oldest first; ``strikes`` counts each node's strikes within the strike window
    (before this incident); ``isolated`` are the nodes excluded or drained cluster-wide within
    the circuit breaker's window."""

    restarts: int = 0
    root_causes: tuple[tuple[str, int | None], ...] = ()
    excluded: tuple[str, ...] = ()
    strikes: Mapping[str, int] = field(default_factory=dict)
    isolated: tuple[str, ...] = ()
    cluster_nodes: int = 0


def restarts_since_progress(earlier: Sequence[int | None], current: int | None) -> int:
    """How many restarts ago the workload last got further: ``earlier`` are the last steps of
    its earlier attempts, oldest first, ``current`` the failing attempt's (None: unknown).

    A long run meets many unrelated failures and gets further after each; only restarts that
    got nowhere count toward the workload's cap. Without any step seen, every restart counts."""
    steps = [*earlier, current]
    best: int | None = None
    latest_progress = 0
    for index, step in enumerate(steps):
        if step is not None and (best is None or step > best):
            best, latest_progress = step, index
    return len(steps) - 1 - latest_progress
