"""The simulated Slurm controller: the job queue, node states, placement and the scontrol verbs.

It obeys commands the way Slurm 22.05 does (checked against ``job_mgr.c`` and a real local
cluster, see ``shared/notes/slurm-local-cluster.md``): a requeued job waits a credential-expiry
delay before it may start again; ``ExcNodeList`` can only change on a pending job; a draining
node keeps its job; finished jobs stay visible for ``MinJobAge`` and then vanish.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from enum import StrEnum
from typing import Protocol

from fleet.core.scheduler import (
    TERMINAL_JOB_STATES,
    ClusterSnapshot,
    JobRecord,
    JobState,
    NodeRecord,
)

from .config import SimulationConfig
from .events import Clock, EventQueue
from .records import SchedulerError
from .state import Job, Node, Workload

# Slurm starts an eligible job within a scheduling pass; a second is what a tuned site sees.
SCHED_LATENCY_S = 1.0


class StopCause(StrEnum):
    """Why an attempt's processes stopped."""

    ENDED = "ended"
    CANCELLED = "cancelled"
    REQUEUED = "requeued"
    NODE_FAIL = "node_fail"


class SchedulerHooks(Protocol):
    """What the scheduler tells the rest of the simulation."""

    def job_started(self, job: Job) -> None: ...

    def job_stopped(self, job: Job, cause: StopCause) -> None: ...

    def workload_for(self, name: str, nodes: int, partition: str, comment: str) -> Workload: ...


def _invalid_job() -> SchedulerError:
    return SchedulerError("Invalid job id specified", "ESLURM_INVALID_JOB_ID")


def _not_pending() -> SchedulerError:
    return SchedulerError("Job is no longer pending execution", "ESLURM_JOB_NOT_PENDING")


class _PassState:
    """What one scheduling pass keeps track of: free nodes, partitions with a job already
    waiting (later ones wait for Priority), and usable-node counts per exclusion list."""

    def __init__(self, free: dict[str, list[Node]]) -> None:
        self.free = free
        self.waiting: set[str] = set()
        self.usable: dict[tuple[str, tuple[str, ...]], int] = {}


class SimulatedScheduler:
    """A Slurm controller over the simulated nodes; the verbs are named after scontrol's."""

    def __init__(
        self,
        config: SimulationConfig,
        nodes: list[Node],
        clock: Clock,
        queue: EventQueue,
        hooks: SchedulerHooks,
    ) -> None:
        self._config = config
        self._nodes = nodes
        self._by_name = {node.name: node for node in nodes}
        self._clock = clock
        self._queue = queue
        self._hooks = hooks
        self._jobs: dict[str, Job] = {}
        # Pending jobs on their own too, so a pass never walks the finished ones still listed.
        self._pending: dict[str, Job] = {}
        self._next_id = config.first_job_id
        # Submission order stands in for priority: earlier jobs go first.
        self._priority = 0
        # The time of the one pass already queued, so requests for passes coalesce.
        self._next_pass: float | None = None
        self._sizes = {p.name: 0 for p in config.partitions}
        for node in nodes:
            self._sizes[node.partition] += 1

    # -- scontrol / sbatch / scancel -------------------------------------------------------

    def submit(
        self,
        name: str,
        nodes: int,
        *,
        partition: str | None = None,
        comment: str = "",
        exclude: Iterable[str] = (),
        hold: bool = False,
    ) -> str:
        """``sbatch``: queue a batch job and return its id. A ``{"workload": tag}`` comment
        naming a known workload resumes that workload from its last checkpoint."""
        part = partition or self._config.partitions[0].name
        # Validate before anything else: a refused sbatch must leave no workload behind.
        self._check_size(part, nodes)
        excluded = self._check_nodes(exclude)
        workload = self._hooks.workload_for(name, nodes, part, comment)
        job_id = str(self._new_id())
        return self.enqueue(workload, job_id, int(job_id), comment, excluded, hold).job_id

    def requeue_hold(self, job_id: str) -> None:
        """``scontrol requeuehold``: back to pending and held, one more restart counted."""
        job = self.job(job_id)
        if job.state is JobState.PENDING:
            raise SchedulerError("Job is pending execution", "ESLURM_JOB_PENDING")
        # A running job is killed first; a finished one still listed goes straight back.
        if job.state is JobState.RUNNING:
            job.end_t = self._clock.t
            self._hooks.job_stopped(job, StopCause.REQUEUED)
            self._release_later(job)
        job.restart_count += 1
        self._to_pending(job, "JobHeldAdmin")

    def hold(self, job_id: str) -> None:
        """``scontrol hold``: a pending job is held (priority 0) until released."""
        job = self.job(job_id)
        if job.state is not JobState.PENDING:
            raise _not_pending()
        job.held, job.reason = True, "JobHeldAdmin"

    def update_exclusions(self, job_id: str, nodes: Iterable[str]) -> None:
        """``scontrol update jobid=.. ExcNodeList=..``: replaces the list; pending jobs only."""
        excluded = self._check_nodes(nodes)
        job = self.job(job_id)
        if job.state is not JobState.PENDING:
            raise _not_pending()
        job.excluded = excluded
        if not job.held:
            # Slurm shows Reason=None after the update, even while BeginTime still applies.
            job.reason = "None"
            self._request_pass()

    def release(self, job_id: str) -> None:
        """``scontrol release``: a held pending job becomes eligible (after its begin time)."""
        job = self.job(job_id)
        if job.state is not JobState.PENDING:
            raise _not_pending()
        if not job.held:
            return
        job.held = False
        job.reason = "BeginTime" if job.eligible_t > self._clock.t else "None"
        self._request_pass(max(job.eligible_t, self._clock.t + SCHED_LATENCY_S))

    def cancel(self, job_id: str) -> None:
        """``scancel``: a pending job is cancelled at once, a running one is signalled."""
        job = self.job(job_id)
        if job.state is JobState.RUNNING:
            # scancel signals the processes with SIGTERM, so the job records signal 15.
            self._end(job, (JobState.CANCELLED, 0, 15, "None"), StopCause.CANCELLED)
        elif job.state is JobState.PENDING:
            del self._pending[job.job_id]
            job.end_t = self._clock.t
            self._settle_now(job, (JobState.CANCELLED, 0, 0, "None"))
            self._hooks.job_stopped(job, StopCause.CANCELLED)
        else:
            raise SchedulerError("Job/step already completing or completed", "ESLURM_ALREADY_DONE")

    def drain(self, node: str, reason: str) -> None:
        """``scontrol update nodename=.. state=drain reason=..``: running jobs carry on."""
        target = self.node(node)
        if not reason.strip():
            raise SchedulerError(
                "You must specify a reason when DOWNING or DRAINING a node. Request denied",
                "ESLURM_REASON_REQUIRED",
            )
        target.drain = True
        target.drain_reason = reason

    def resume(self, node: str) -> None:
        """``scontrol update nodename=.. state=resume``: back in service (and, we assume,
        repaired by whoever resumed it)."""
        target = self.node(node)
        if not (target.drain or target.down):
            raise SchedulerError("Invalid node state specified", "ESLURM_INVALID_NODE_STATE")
        target.drain, target.drain_reason = False, ""
        target.defect = None
        # A node that is still off stays DOWN until its slurmd registers again.
        if not target.offline:
            target.down, target.down_reason = False, ""
        self._request_pass()

    # -- what the simulation uses ---------------------------------------------------------

    def job(self, job_id: str) -> Job:
        job = self._jobs.get(job_id)
        if job is None:
            raise _invalid_job()
        return job

    def find(self, job_id: str) -> Job | None:
        return self._jobs.get(job_id)

    def node(self, name: str) -> Node:
        node = self._by_name.get(name)
        if node is None:
            raise SchedulerError("Invalid node name specified", "ESLURM_INVALID_NODE_NAME")
        return node

    def new_array_id(self) -> int:
        return self._new_id()

    def new_raw_id(self) -> int:
        return self._new_id()

    def enqueue(
        self,
        workload: Workload,
        job_id: str,
        raw_id: int,
        comment: str,
        excluded: tuple[str, ...] = (),
        hold: bool = False,
    ) -> Job:
        """Put a job for ``workload`` in the queue."""
        self._priority += 1
        job = Job(job_id, raw_id, workload, self._priority, self._clock.t)
        job.comment, job.excluded, job.held = comment, excluded, hold
        job.reason = "JobHeldUser" if hold else "None"
        self._jobs[job_id] = job
        self._pending[job_id] = job
        workload.job = job
        workload.job_ids.append(job_id)
        self._request_pass()
        return job

    def end(self, job: Job, state: JobState, exit_code: int, signal: int, reason: str) -> None:
        """The job's processes ended by themselves (success, failure, time limit)."""
        if job.state is JobState.RUNNING:
            self._end(job, (state, exit_code, signal, reason), StopCause.ENDED)

    def node_failed(self, node: Node, reason: str) -> None:
        """Slurm marked ``node`` DOWN: a job running there ends in NODE_FAIL."""
        node.down, node.down_reason = True, reason
        job = node.job
        if job is None:
            return
        node.job, node.completing = None, False
        if job.state is JobState.RUNNING:
            self._end(job, (JobState.NODE_FAIL, 0, 15, "NodeDown"), StopCause.NODE_FAIL)

    def node_returned(self, node: Node) -> None:
        """The node's slurmd registered again; ``ReturnToService=1`` brings it back."""
        node.offline = False
        node.down, node.down_reason = False, ""
        self._request_pass()

    def snapshot(self) -> ClusterSnapshot:
        """What ``squeue --json`` and ``sinfo --json`` would report now."""
        return ClusterSnapshot(
            taken_at=self._clock.now,
            jobs=tuple(self._record(job) for job in self._jobs.values()),
            nodes=tuple(
                NodeRecord(n.name, n.state, n.reason, n.gpus, (n.partition,)) for n in self._nodes
            ),
        )

    # -- inside -----------------------------------------------------------------------------

    def _new_id(self) -> int:
        value = self._next_id
        self._next_id += 1
        return value

    def _check_size(self, partition: str, nodes: int) -> None:
        size = self._sizes.get(partition)
        if size is None:
            raise SchedulerError(
                "Invalid partition name specified", "ESLURM_INVALID_PARTITION_NAME"
            )
        if not 1 <= nodes <= size:
            raise SchedulerError("Node count specification invalid", "ESLURM_INVALID_NODE_COUNT")

    def _check_nodes(self, names: Iterable[str]) -> tuple[str, ...]:
        chosen = sorted(set(names))
        # One unknown name fails the whole command, as it does with scontrol.
        for name in chosen:
            self.node(name)
        return tuple(chosen)

    def _to_pending(self, job: Job, reason: str) -> None:
        job.state, job.reason, job.held = JobState.PENDING, reason, True
        job.exit_code = job.signal = None
        job.final = None
        # A new serial voids a settle or purge queued for the job's old state.
        job.serial += 1
        # A requeued job may start only once its old credential expired.
        job.eligible_t = self._clock.t + self._config.requeue_delay_s
        self._pending[job.job_id] = job

    def _end(self, job: Job, final: tuple[JobState, int, int, str], cause: StopCause) -> None:
        job.state, job.final = JobState.COMPLETING, final
        job.end_t = self._clock.t
        job.serial += 1
        self._hooks.job_stopped(job, cause)
        self._release_later(job)
        self._queue.push(self._clock.t + self._config.completing_s, self._settle, job, job.serial)

    def _release_later(self, job: Job) -> None:
        for node in job.nodes:
            if node.job is job:
                node.completing = True
        # The node list is taken now: by release time the job may run somewhere else.
        nodes = tuple(job.nodes)
        self._queue.push(self._clock.t + self._config.completing_s, self._release, job, nodes)

    def _release(self, job: Job, nodes: tuple[Node, ...]) -> None:
        for node in nodes:
            if node.job is job:
                node.job, node.completing = None, False
        self._request_pass()

    def _settle(self, job: Job, serial: int) -> None:
        if job.serial == serial and job.final is not None:
            self._settle_now(job, job.final)

    def _settle_now(self, job: Job, final: tuple[JobState, int, int, str]) -> None:
        job.state, job.exit_code, job.signal, job.reason = final
        job.final = None
        job.serial += 1
        self._queue.push(self._clock.t + self._config.min_job_age_s, self._purge, job, job.serial)

    def _purge(self, job: Job, serial: int) -> None:
        # slurmctld forgets finished jobs after MinJobAge; requeue is impossible from then on.
        if job.serial == serial and job.state in TERMINAL_JOB_STATES:
            del self._jobs[job.job_id]

    def _request_pass(self, at: float | None = None) -> None:
        t = self._clock.t + SCHED_LATENCY_S if at is None else max(at, self._clock.t)
        # A pass already due no later than this one will see the change too.
        if self._next_pass is not None and self._next_pass <= t:
            return
        self._next_pass = t
        self._queue.push(t, self._run_pass, t)

    def _run_pass(self, stamp: float) -> None:
        # Superseded by an earlier pass requested since.
        if self._next_pass != stamp:
            return
        self._next_pass = None
        if not self._pending:
            return
        state = _PassState(self._free_by_partition())
        wake = math.inf
        for job in sorted(self._pending.values(), key=lambda j: j.priority):
            if job.held:
                continue
            if job.eligible_t > self._clock.t:
                job.reason = "BeginTime"
                wake = min(wake, job.eligible_t)
                continue
            self._place(job, state)
        if wake < math.inf:
            self._request_pass(wake)

    def _place(self, job: Job, state: _PassState) -> None:
        chosen = self._choose(job, state.free[job.partition])
        if chosen:
            self._start(job, chosen)
            return
        job.reason = self._wait_reason(job, job.partition in state.waiting, state.usable)
        # Later jobs of this partition that cannot start are reported as waiting for Priority.
        state.waiting.add(job.partition)

    def _free_by_partition(self) -> dict[str, list[Node]]:
        free: dict[str, list[Node]] = {name: [] for name in self._sizes}
        for node in self._nodes:
            if node.job is None and node.usable:
                free[node.partition].append(node)
        return free

    def _choose(self, job: Job, free: list[Node]) -> list[Node]:
        """The lowest-numbered free nodes that avoid the exclusions (taken out of ``free``)."""
        excluded = set(job.excluded)
        slots: list[int] = []
        for slot, node in enumerate(free):
            if node.name not in excluded:
                slots.append(slot)
                if len(slots) == job.num_nodes:
                    break
        if len(slots) < job.num_nodes:
            return []
        picks = [free[slot] for slot in slots]
        # Backwards, so a deletion does not shift the slots still to go.
        for slot in reversed(slots):
            del free[slot]
        return picks

    def _wait_reason(
        self, job: Job, behind: bool, usable: dict[tuple[str, tuple[str, ...]], int]
    ) -> str:
        """Slurm's reason for a job that could not start in this pass."""
        key = (job.partition, job.excluded)
        # Counted once per pass and (partition, exclusions): many pending jobs share a few keys.
        if key not in usable:
            excluded = set(job.excluded)
            usable[key] = sum(
                1
                for n in self._nodes
                if n.partition == job.partition and n.usable and n.name not in excluded
            )
        if usable[key] < job.num_nodes:
            return "ReqNodeNotAvail"
        return "Priority" if behind else "Resources"

    def _start(self, job: Job, nodes: list[Node]) -> None:
        del self._pending[job.job_id]
        job.state, job.reason, job.nodes = JobState.RUNNING, "None", nodes
        job.start_t, job.end_t = self._clock.t, None
        job.exit_code = job.signal = None
        # A new token: lines and events queued for the previous attempt are now stale.
        job.token += 1
        job.serial += 1
        for node in nodes:
            node.job, node.completing = job, False
        self._hooks.job_started(job)

    def _record(self, job: Job) -> JobRecord:
        pending = job.state is JobState.PENDING
        at = self._clock.at
        return JobRecord(
            job_id=job.job_id,
            name=job.name,
            state=job.state,
            partition=job.partition,
            # A pending job shows no nodes, even the ones it ran on before a requeue.
            nodes=() if pending else tuple(node.name for node in job.nodes),
            restart_count=job.restart_count,
            exit_code=job.exit_code,
            signal=job.signal,
            reason=job.reason,
            comment=job.comment,
            excluded_nodes=job.excluded,
            held=job.held,
            submit_time=at(job.submit_t),
            start_time=None if pending or job.start_t is None else at(job.start_t),
            end_time=None if pending or job.end_t is None else at(job.end_t),
            eligible_time=at(job.eligible_t) if pending else None,
        )
