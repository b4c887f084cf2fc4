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
from datetime import datetime, timedelta
from typing import Any, Protocol

from fleet.core.scheduler import (
    ClusterSnapshot,
    JobRecord,
    JobState,
    NodeRecord,
    NodeState,
)
from remediation.core.drains import DRAIN_MARKER, drained_by_someone_else

from .slurm import SlurmCommandError, sanitise_reason
from .transport import TransportError

log = logging.getLogger(__name__)
VERSION = "1.0"
# A job Slurm requeued itself waits for its begin time (cred_expire, 120 s by default): with
# more than this left, its exclusions are added while it waits, without holding it.
START_MARGIN = timedelta(seconds=2)


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
    drain_reason: str = ""

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
            drain_reason=str(data.get("drain_reason") or ""),
        )


@dataclass(frozen=True)
class NodeResume:
    """A node released in the console that our drain took out of Slurm, with our reason."""

    node: str
    reason: str
    requested_at: str

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> NodeResume:
        return cls(str(data["node"]), str(data["reason"]), str(data["requested_at"]))


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
    def node_resumes(self) -> list[NodeResume]: ...
    def report_resume(self, item: NodeResume, outcome: str, detail: str) -> None: ...


class NotYetConverged(Exception):
    """Slurm is between states (a job still completing): the advice stays claimed and is taken
    up again next cycle, from what Slurm shows then."""


class Scheduler(Protocol):
    def requeue_hold(self, job_id: str) -> None: ...
    def hold(self, job_id: str) -> None: ...
    def update_exclusions(self, job_id: str, nodes: Iterable[str]) -> None: ...
    def release(self, job_id: str) -> None: ...
    def cancel(self, job_id: str) -> None: ...
    def drain(self, node: str, reason: str) -> None: ...
    def resume(self, node: str) -> None: ...
    def snapshot(self) -> ClusterSnapshot: ...
    def job(self, job_id: str) -> JobRecord | None: ...


@dataclass
class CycleReport:
    advice_seen: int = 0
    carried_out: list[int] = field(default_factory=list)
    abandoned: list[int] = field(default_factory=list)
    withdrawn: list[int] = field(default_factory=list)
    resumed: list[str] = field(default_factory=list)
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
            if not self.stopping:
                self._resume_released_nodes(report)
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
        except NotYetConverged as exc:
            report.skipped.append(f"advice {advice.id}: {exc}")
            return
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
            elif job.state == JobState.CANCELLED:
                # A stop (ours, or its user's scancel) is final: a requeue would undo it.
                return self._abandon(advice, "the job was cancelled: it is not restarted")
            elif advice.desired_state in {"running", "running_excluding"}:
                self._restart(advice, job)
            self._drain(advice)
        except SlurmCommandError as exc:
            return self._abandon(advice, f"Slurm refused: {exc}")
        # The answer is not checked: claimed advice is never revised, so it cannot be stale here.
        self.advisor.reconcile(advice, "converged", _summary(advice))
        return True

    def _restart(self, advice: AdviceItem, job: JobRecord) -> None:
        _wait_if_completing(job)
        if _needs_requeue(advice, job):
            self.scheduler.requeue_hold(advice.job_id)
            self._milestone(advice, "requeue_hold")
            job = self._fresh(advice)
            # A running job requeued is completing a while (held): its exclusions, which
            # Slurm takes only while it is pending, follow once it settles.
            _wait_if_completing(job)
        # Only ever add: exclusions already on the job (the user's, an earlier advice's) are kept.
        wanted = set(advice.exclude_nodes) | set(job.excluded_nodes)
        if advice.desired_state == "running_excluding" and not wanted <= set(job.excluded_nodes):
            job = self._exclude(advice, job, sorted(wanted))
        # A job no longer held (released by us or the watchdog) is left to the scheduler.
        if job.held:
            self.scheduler.release(advice.job_id)
            self._milestone(advice, "release")

    def _exclude(self, advice: AdviceItem, job: JobRecord, nodes: list[str]) -> JobRecord:
        """Add the exclusions to the pending job; held first only when it could start before
        they land. A job Slurm already started again is left as it is (exclusions apply only
        while pending); it cannot be on a dead node, and a live bad node is drained next."""
        if job.state != JobState.PENDING:
            log.warning(
                "advice %s: job %s %s again before its exclusions",
                advice.id,
                job.job_id,
                job.state.value.lower(),
            )
            return job
        if not job.held and self._may_start_soon(job):
            self.scheduler.hold(advice.job_id)
            self._milestone(advice, "hold")
            job = self._fresh(advice)
        self.scheduler.update_exclusions(advice.job_id, nodes)
        self._milestone(advice, "update_exclusions", {"nodes": nodes})
        return job

    def _may_start_soon(self, job: JobRecord) -> bool:
        eligible = job.eligible_time
        return eligible is None or eligible - self.clock() <= START_MARGIN

    def _cancel(self, advice: AdviceItem, job: JobRecord) -> None:
        # A stop is final: a job Slurm requeued itself (pending, or running again) is
        # cancelled too. One still completing may yet be requeued: settled next cycle.
        _wait_if_completing(job)
        if not job.is_terminal or job.held:
            self.scheduler.cancel(advice.job_id)
        # Recorded even when the job had already ended: the desired state is reached either way.
        self._milestone(advice, "cancel")

    def _drain(self, advice: AdviceItem) -> None:
        """Drains come last, once the job is dealt with. A node a person drained keeps their
        reason (recorded as left alone); draining our own drain again is harmless."""
        if not advice.drain_nodes:
            return
        reason = sanitise_reason(
            advice.drain_reason or f"{DRAIN_MARKER} advice {advice.id}: repeated faults"
        )
        nodes = self._nodes()
        for name in advice.drain_nodes:
            node = nodes.get(name)
            if node is not None and _taken_out(node) and drained_by_someone_else(node.reason):
                detail = {"node": name, "left_alone": node.reason[:200]}
            else:
                self.scheduler.drain(name, reason)
                detail = {"node": name, "reason": reason}
            self._milestone(advice, "drain_node", detail, key_suffix=name)

    def _resume_released_nodes(self, report: CycleReport) -> None:
        """Nodes released in the console that our drain took out: resumed in Slurm while it
        still shows our reason; a drain made since by a person is never undone."""
        pending = self.advisor.node_resumes()
        if not pending:
            return
        nodes = self._nodes()
        for item in pending:
            try:
                outcome, detail = self._resume(item, nodes.get(item.node))
            except SlurmCommandError as exc:
                report.skipped.append(f"resume {item.node}: Slurm refused: {exc}")
                continue  # asked again next cycle
            self.advisor.report_resume(item, outcome, detail)
            if outcome == "resumed":
                report.resumed.append(item.node)

    def _resume(self, item: NodeResume, node: NodeRecord | None) -> tuple[str, str]:
        if node is None:
            return "unknown_node", "Slurm does not know this node"
        if not _taken_out(node):
            return "in_service", f"already in service ({node.state.value.lower()})"
        if node.reason != item.reason:
            return "not_ours", f"Slurm's reason is not ours, left alone: {node.reason[:200]}"
        self.scheduler.resume(item.node)
        return "resumed", f"was {node.state.value.lower()}: {node.reason[:200]}"

    def _nodes(self) -> dict[str, NodeRecord]:
        return {node.name: node for node in self.scheduler.snapshot().nodes}

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


def _taken_out(node: NodeRecord) -> bool:
    return node.state in (NodeState.DRAINED, NodeState.DRAINING, NodeState.DOWN)


def _wait_if_completing(job: JobRecord) -> None:
    """A completing job may yet be requeued or end: the advice is taken up again next cycle."""
    if job.state == JobState.COMPLETING:
        raise NotYetConverged(f"job {job.job_id} is completing; taken up again once it settles")


def _needs_requeue(advice: AdviceItem, job: JobRecord) -> bool:
    """A requeue is due unless it happened (a higher restart count: ours earlier, or Slurm's
    own after a node failure) or the job is pending anyway (its exclusions apply as it waits;
    Slurm refuses to requeue a pending job)."""
    return job.state != JobState.PENDING and job.restart_count <= advice.attempt_index


def _summary(advice: AdviceItem) -> str:
    if advice.desired_state == "cancelled":
        return "cancelled"
    excluded = f" excluding {', '.join(advice.exclude_nodes)}" if advice.exclude_nodes else ""
    return f"requeued{excluded} and released"


def idempotency_key(advice: AdviceItem, step: str, suffix: str = "") -> str:
    """One key per advice generation and step (and node, for drains): a replay records nothing."""
    return f"advice-{advice.id}-g{advice.generation}-{step}" + (f"-{suffix}" if suffix else "")
