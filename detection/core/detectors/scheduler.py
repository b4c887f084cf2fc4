"""The scheduler's own word: an attempt that ended FAILED, NODE_FAIL, TIMEOUT ... is an
interruption even when no log line said why. Pure: the caller passes what Slurm reported."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime

from detection.core.interruption import Confidence, Evidence, HostOrigin, Interruption
from fleet.core.taxonomy import Attribution, Category, ConfidenceLabel, Kind

# The scheduler ended these itself: the time limit or preemption is its doing, not a fault.
SCHEDULER_ENDINGS = frozenset({"TIMEOUT", "PREEMPTED"})


def scheduler_interruption(
    job_id: str,
    state: str,
    *,
    at: datetime,
    reason: str = "",
    exit_code: int | None = None,
    nodes: Sequence[str] = (),
    unhealthy_nodes: Collection[str] = (),
) -> Interruption:
    """What the scheduler's final state of an attempt says, and how sure that is."""
    hosts: tuple[str, ...] = ()
    category, confidence = (
        Category.NODE_OR_PROCESS_FAILURE,
        Confidence(0.4, ConfidenceLabel.HYPOTHESIS),
    )
    if state == "NODE_FAIL":
        hosts = tuple(sorted(set(nodes) & set(unhealthy_nodes)))
        if hosts:
            confidence = Confidence(0.7, ConfidenceLabel.SUPPORTED)
    signature = f"slurm_{state.lower()}"
    text = f"Slurm: job {job_id} ended {state}" + (f" ({reason})" if reason else "")
    if exit_code is not None:
        text += f", exit code {exit_code}"
    return Interruption(
        kind=Kind.CRASH,
        category=category,
        attribution=_attribution(state, hosts),
        confidence=confidence,
        root_cause=f"slurm:{state}",
        summary=text,
        explanation=text,
        hosts=hosts,
        evidence=(Evidence(at=at, source="scheduler", text=text, signature=signature),),
        first_evidence_at=at,
        job_id=job_id,
        signature=signature,
        # Slurm's NODE_FAIL is a node's failure whether or not its state says which node.
        node_local=state == "NODE_FAIL",
        host_origins=tuple((host, HostOrigin.SCHEDULER) for host in hosts),
    )


def _attribution(state: str, hosts: tuple[str, ...]) -> Attribution:
    if state in SCHEDULER_ENDINGS:
        return Attribution.SCHEDULER
    if state == "OUT_OF_MEMORY":
        return Attribution.APPLICATION
    # A node the scheduler itself marked unhealthy under this job is the hardware's fault.
    return Attribution.HARDWARE if hosts else Attribution.NONE
