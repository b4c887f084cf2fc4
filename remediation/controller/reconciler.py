"""The Slurm Advisor Controller's loop: report what Slurm sees, then carry out the advice that
is to be enforced, the way an operator would (requeue-hold, exclude, release; scancel; drain).

Plain Python. It talks to the console through an ``Advisor`` (HTTP, or in-process for the
simulated cluster) and to the scheduler through anything with ``SlurmClient``'s methods. Before
each step it reads the job afresh and skips what already happened, so a restarted controller, a
replayed advice or a second controller never does a step twice.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from recovery_console.fleet.core.scheduler import ClusterSnapshot, JobRecord

from .slurm import SlurmCommandError
from .transport import TransportError

log = logging.getLogger(__name__)
VERSION = "1.0"


@dataclass(frozen=True)
class AdviceItem:
    """One advice as the Advisor API publishes it."""

    id: int
    generation: int
    job_id: str
    attempt_index: int
    partition: str
    action: str
    desired_state: str
    exclude_nodes: tuple[str, ...]
    drain_nodes: tuple[str, ...]
    enforce: bool
    state: str

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> AdviceItem:
        return cls(
            id=int(data["id"]),
            generation=int(data["generation"]),
            job_id=str(data["job_id"]),
            attempt_index=int(data["attempt_index"]),
            partition=str(data.get("partition", "")),
            action=str(data["action"]),
            desired_state=str(data["desired_state"]),
            exclude_nodes=tuple(data.get("exclude_nodes", ())),
            drain_nodes=tuple(data.get("drain_nodes", ())),
            enforce=bool(data["enforce"]),
            state=str(data["state"]),
        )


class AdvisorUnavailable(Exception):
    """The console could not be reached or answered an error; the controller retries later."""


class AdviceWithdrawn(Exception):
    """The console took the advice back (monitor mode, or its partition left the allowlist):
    the step in hand is done, no further one is taken for it."""


class Advisor(Protocol):
    def post_snapshot(self, snapshot: ClusterSnapshot) -> None: ...
    def active_advice(self) -> list[AdviceItem]: ...
    def reconcile(self, advice: AdviceItem, disposition: str, reason: str = "") -> bool: ...
    def milestone(
        self, advice: AdviceItem, step: str, at: datetime, detail: dict[str, Any], key: str
    ) -> None: ...
    # The answer: the freshness of the console's other snapshots, the hold timeout.
    def heartbeat(self, info: dict[str, Any]) -> dict[str, Any] | None: ...


class Scheduler(Protocol):
    def requeue_hold(self, job_id: str) -> None: ...
    def update_exclusions(self, job_id: str, nodes: Iterable[str]) -> None: ...
    def release(self, job_id: str) -> None: ...
    def cancel(self, job_id: str) -> None: ...
    def drain(self, node: str, reason: str) -> None: ...
    def snapshot(self) -> ClusterSnapshot: ...
    def job(self, job_id: str) -> JobRecord | None: ...


@dataclass
class CycleReport:
    advice_seen: int = 0
    carried_out: list[int] = field(default_factory=list)
    abandoned: list[int] = field(default_factory=list)
    withdrawn: list[int] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    error: str = ""


class Controller:
    """One controller per cluster. ``partitions``: act only there (empty: everywhere the
    console enforces) — a canary partition first."""

    def __init__(
        self,
        advisor: Advisor,
        scheduler: Scheduler,
        clock: Callable[[], datetime],
        partitions: Iterable[str] = (),
        transport_name: str = "local",
        report_state: bool = True,
    ) -> None:
        self.advisor, self.scheduler, self.clock = advisor, scheduler, clock
        self.partitions = frozenset(partitions)
        self.transport_name = transport_name
        self.report_state = report_state
        self.stopping = False

    def cycle(self) -> CycleReport:
        """Report the scheduler's state, carry out enforced advice, send a heartbeat."""
        report = CycleReport()
        try:
            if self.report_state:
                self.advisor.post_snapshot(self.scheduler.snapshot())
            for advice in self.advisor.active_advice():
                report.advice_seen += 1
                if self.stopping:
                    break  # SIGTERM: the advice in hand was finished; leave the rest
                self._consider(advice, report)
        except (AdvisorUnavailable, TransportError) as exc:
            # The rest waits for the next cycle: each step is safe to repeat.
            report.error = str(exc)
            log.warning("controller cycle cut short: %s", exc)
        # Sent after a failure too: the console shows a controller that is alive but failing.
        self._heartbeat(report.error)
        return report

    def _consider(self, advice: AdviceItem, report: CycleReport) -> None:
        if not advice.enforce:
            return  # monitor mode (or outside the console's allowlist): never act
        if self.partitions and advice.partition not in self.partitions:
            report.skipped.append(f"advice {advice.id}: partition {advice.partition} not ours")
            return
        try:
            # Claim first: the console's conditional update lets only one controller through,
            # and it refuses advice it no longer enforces.
            if not self.advisor.reconcile(advice, "pending"):
                report.skipped.append(f"advice {advice.id}: claimed by another controller")
                return
            converged = self.carry_out(advice)
        except AdviceWithdrawn as exc:
            # Each report after a step is the permit for the next: refused, Slurm is left as is.
            log.warning("advice %s withdrawn, no further step: %s", advice.id, exc)
            report.withdrawn.append(advice.id)
            return
        (report.carried_out if converged else report.abandoned).append(advice.id)

    def carry_out(self, advice: AdviceItem) -> bool:
        """Bring the job to the advice's desired state; True when it converged. Each step is
        reported before the next is taken, and ``AdviceWithdrawn`` from a report ends it."""
        try:
            job = self.scheduler.job(advice.job_id)
            if job is None:
                return self._abandon(advice, "Slurm no longer knows the job (past MinJobAge?)")
            if advice.desired_state == "cancelled":
                self._cancel(advice, job)
            elif advice.desired_state in {"running", "running_excluding"}:
                self._restart(advice, job)
            self._drain(advice)
        except SlurmCommandError as exc:
            return self._abandon(advice, f"Slurm refused: {exc}")
        # The answer is not checked: claimed advice is never revised, so it cannot be stale here.
        self.advisor.reconcile(advice, "converged", _summary(advice))
        return True

    def _restart(self, advice: AdviceItem, job: JobRecord) -> None:
        # A higher restart count means the requeue already happened (this run or a previous one).
        if job.restart_count <= advice.attempt_index:
            self.scheduler.requeue_hold(advice.job_id)
            self._milestone(advice, "requeue_hold")
            job = self._fresh(advice)
        # Only ever add: exclusions already on the job (the user's, an earlier advice's) are kept.
        wanted = set(advice.exclude_nodes) | set(job.excluded_nodes)
        if advice.desired_state == "running_excluding" and not wanted <= set(job.excluded_nodes):
            self.scheduler.update_exclusions(advice.job_id, sorted(wanted))
            self._milestone(advice, "update_exclusions", {"nodes": sorted(wanted)})
        # A job no longer held (released by us or the watchdog) is left to the scheduler.
        if job.held:
            self.scheduler.release(advice.job_id)
            self._milestone(advice, "release")

    def _cancel(self, advice: AdviceItem, job: JobRecord) -> None:
        if not job.is_terminal or job.held:
            self.scheduler.cancel(advice.job_id)
        # Recorded even when the job had already ended: the desired state is reached either way.
        self._milestone(advice, "cancel")

    def _drain(self, advice: AdviceItem) -> None:
        # Drains come last, once the job is dealt with; draining a drained node again is harmless.
        for node in advice.drain_nodes:
            self.scheduler.drain(node, f"recovery console advice {advice.id}: repeated faults")
            self._milestone(advice, "drain_node", {"node": node}, key_suffix=node)

    def _fresh(self, advice: AdviceItem) -> JobRecord:
        job = self.scheduler.job(advice.job_id)
        if job is None:
            # Gone between steps: treated as Slurm refusing, so the advice is abandoned.
            raise SlurmCommandError(["job", advice.job_id], 1, "Invalid job id specified")
        return job

    def _milestone(
        self,
        advice: AdviceItem,
        step: str,
        detail: dict[str, Any] | None = None,
        key_suffix: str = "",
    ) -> None:
        key = idempotency_key(advice, step, key_suffix)
        self.advisor.milestone(advice, step, self.clock(), detail or {}, key)

    def _abandon(self, advice: AdviceItem, reason: str) -> bool:
        log.warning("advice %s abandoned: %s", advice.id, reason)
        self.advisor.reconcile(advice, "abandoned", reason)
        return False

    def _heartbeat(self, error: str) -> None:
        try:
            self.advisor.heartbeat(
                {
                    "controller_version": VERSION,
                    "transport": self.transport_name,
                    "last_error": error,
                }
            )
        except AdvisorUnavailable as exc:
            log.warning("heartbeat not delivered: %s", exc)


def _summary(advice: AdviceItem) -> str:
    if advice.desired_state == "cancelled":
        return "cancelled"
    excluded = f" excluding {', '.join(advice.exclude_nodes)}" if advice.exclude_nodes else ""
    return f"requeued{excluded} and released"


def idempotency_key(advice: AdviceItem, step: str, suffix: str = "") -> str:
    """One key per advice generation and step (and node, for drains): a replay records nothing."""
    return f"advice-{advice.id}-g{advice.generation}-{step}" + (f"-{suffix}" if suffix else "")
