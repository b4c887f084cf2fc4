"""When an interruption is over: a later attempt of its workload ran healthy, or the workload
was stopped or finished. Pure Python; ``detection.anomalies.resolve_settled`` applies it.

*Healthy* is concrete: the later attempt has no interruption of its own and either finished,
or got past the step the interrupted attempt had reached (training resumed and went further),
or has run ``HEALTHY_RUN`` without an interruption (a job that logs no steps, or one still
recomputing from an older checkpoint).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

HEALTHY_RUN = timedelta(minutes=10)
_RUNNING = frozenset({"RUNNING", "COMPLETING"})


@dataclass(frozen=True)
class Successor:
    """The workload's newest attempt, as far as judging its health needs."""

    label: str  # "job 12#1"
    state: str
    started_at: datetime | None
    last_step: int | None
    interrupted: bool  # it has an interruption of its own


def healthy_because(successor: Successor, failed_step: int | None, now: datetime) -> str:
    """Why ``successor`` shows the interruption is over ("" while it does not): the step it
    reached against ``failed_step``, where the interrupted attempt got to, or how long it ran."""
    if successor.interrupted:
        return ""
    if successor.state == "COMPLETED":
        return f"{successor.label} completed"
    if successor.state not in _RUNNING:
        return ""
    step = successor.last_step
    if step is not None and (failed_step is None or step > failed_step):
        where = f", past step {failed_step:,} where it failed" if failed_step is not None else ""
        return f"{successor.label} reached step {step:,}{where}"
    if successor.started_at is not None and now - successor.started_at >= HEALTHY_RUN:
        minutes = (now - successor.started_at).total_seconds() / 60
        return f"{successor.label} ran {minutes:.0f} min without an interruption"
    return ""
