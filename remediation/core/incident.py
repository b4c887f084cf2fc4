"""What the policy decides on: one attributed interruption, and the workload's history."""

from __future__ import annotations

from collections.abc import Mapping
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


@dataclass(frozen=True)
class History:
    """The workload's past, as far as the policy needs it.

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
