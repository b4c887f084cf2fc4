"""Isolation: which nodes to keep out of a workload's next attempt, which to drain, and the
circuit breaker that keeps a bad rule from emptying a cluster. Strikes are counted here too.

Pure Python over plain data: the policy (``rules.decide``) asks ``isolate``; the services
count strikes from stored rows with ``strikes_since`` and ``isolated_since``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

from .incident import History, Incident


@dataclass(frozen=True)
class IsolationRules:
    """The policy's settings isolation follows."""

    drain_after_strikes: int
    circuit_breaker_max_share: float
    circuit_breaker_window_minutes: float
    circuit_breaker_max_nodes: int = 10


@dataclass(frozen=True)
class Isolation:
    """Nodes to exclude from the next attempt and to drain, with the reasons."""

    exclude: tuple[str, ...] = ()
    drain: tuple[str, ...] = ()
    reasons: tuple[str, ...] = ()


def isolate(rules: IsolationRules, incident: Incident, history: History) -> Isolation:
    """Exclude the nodes the evidence names (and those earlier advice excluded), drain a node
    on its ``drain_after_strikes``-th strike, all within the circuit breaker. A node that is
    only suspected (a hypothesis) is neither excluded nor struck."""
    if not incident.hosts or incident.confidence_label == "hypothesis":
        reasons = (f"{', '.join(incident.hosts)} only suspected: not excluded",)
        return Isolation(
            tuple(sorted(set(history.excluded))), (), reasons if incident.hosts else ()
        )
    wanted = sorted(set(incident.hosts) | set(history.excluded))
    repeat = sorted(
        h for h in incident.hosts if history.strikes.get(h, 0) + 1 >= rules.drain_after_strikes
    )
    allowed, refusal = circuit_breaker(rules, history, set(incident.hosts))
    exclude = tuple(h for h in wanted if h in allowed or h in history.excluded)
    drain = tuple(h for h in repeat if h in allowed)
    drains = [f"{host} reached {rules.drain_after_strikes} strikes: drain it" for host in drain]
    return Isolation(exclude, drain, tuple([refusal] if refusal else []) + tuple(drains))


def breaker_limit(rules: IsolationRules, cluster_nodes: int) -> int:
    """How many nodes may be taken out within the window: the share of the cluster rounded up
    (so a cluster of 4 may lose one), never more than the absolute cap, never every node."""
    share = math.ceil(round(rules.circuit_breaker_max_share * cluster_nodes, 6))
    return max(0, min(share, rules.circuit_breaker_max_nodes, cluster_nodes - 1))


def circuit_breaker(rules: IsolationRules, history: History, new: set[str]) -> tuple[set[str], str]:
    """The nodes that may be isolated, and the refusal's reason when some may not: no more
    than the breaker's limit (share and absolute cap) taken out within the window."""
    already = set(history.isolated)
    fresh = new - already
    if not fresh or history.cluster_nodes <= 0:
        return new, ""
    limit = breaker_limit(rules, history.cluster_nodes)
    total = len(already | fresh)
    if total <= limit:
        return new, ""
    names = ", ".join(sorted(fresh))
    refusal = (
        f"circuit breaker: isolating {names} would take {total} of the cluster's "
        f"{history.cluster_nodes} nodes out within {rules.circuit_breaker_window_minutes:g} "
        f"minutes (limit {limit}: {rules.circuit_breaker_max_share:.0%} of the nodes, at most "
        f"{rules.circuit_breaker_max_nodes}); {names} "
        f"{'stays' if len(fresh) == 1 else 'stay'} in service"
    )
    return new & already, refusal


def strikes_since(strikes: Iterable[Mapping[str, object]], since: datetime, anomaly: int) -> int:
    """A node's strikes within the window, not counting the one this anomaly gave it (advice
    is revised as evidence sharpens; its own strike must not push the node over)."""
    return sum(
        1
        for strike in strikes
        if strike["anomaly"] != anomaly and datetime.fromisoformat(str(strike["at"])) >= since
    )


def isolated_since(
    excluded_at: datetime | None, drained_at: datetime | None, since: datetime
) -> bool:
    """Whether a node counts against the circuit breaker: taken out (excluded or drained) within
    its window. The breaker limits how fast nodes are taken out, not how many stay out: a node
    drained hours ago is not what a bad rule emptying the cluster now looks like."""
    return any(t is not None and t >= since for t in (excluded_at, drained_at))
