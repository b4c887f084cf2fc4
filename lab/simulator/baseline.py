"""The manual-recovery baseline: what a diligent operator without the console does.

The operator notices a crashed or hung job ``notice_s`` after it broke, spends ``act_s`` on it,
then requeues it with the same scontrol verbs the controller uses, excluding the node the fault's
root-cause line names. If Slurm has already forgotten the job, the operator resubmits it.
Slowdowns go unnoticed, as they usually do.
"""

from __future__ import annotations

from fleet.core.scheduler import JobState

from .config import ManualRecoveryBaseline
from .core import Core
from .records import FaultKind, InjectedFault
from .scheduler import SimulatedScheduler
from .state import Job, Workload
from .workloads import comment_for


class ManualOperator:
    """Requeues broken jobs by hand, late."""

    def __init__(
        self, core: Core, scheduler: SimulatedScheduler, baseline: ManualRecoveryBaseline
    ) -> None:
        self._core = core
        self._scheduler = scheduler
        self._delay = baseline.notice_s + baseline.act_s
        self.actions = 0

    def notice(self, fault: InjectedFault, job: Job) -> None:
        # A slow job still looks healthy in squeue: nobody notices it.
        if fault.kind is FaultKind.STRAGGLER:
            return
        t = self._core.clock.t + self._delay
        self._core.queue.push(
            t, self._act, job.workload, fault.job_id, fault.attempt, fault.implicated_hosts
        )

    def _act(self, workload: Workload, job_id: str, attempt: int, hosts: tuple[str, ...]) -> None:
        if workload.finished_t is not None or workload.job is None:
            return
        if workload.job.job_id != job_id:
            return  # someone already resubmitted it
        job = self._scheduler.find(job_id)
        if job is None:
            self._resubmit(workload, hosts)
        # Requeued since (by hand or by a controller): acting again would cost another restart.
        elif job.restart_count == attempt and job.state is not JobState.PENDING:
            self._requeue(job, hosts)

    def _requeue(self, job: Job, hosts: tuple[str, ...]) -> None:
        # It finished by itself before the operator got to it.
        if job.state is JobState.COMPLETED:
            return
        self._scheduler.requeue_hold(job.job_id)
        if hosts:
            self._scheduler.update_exclusions(job.job_id, (*job.excluded, *hosts))
        self._scheduler.release(job.job_id)
        self.actions += 1

    def _resubmit(self, workload: Workload, hosts: tuple[str, ...]) -> None:
        self._scheduler.submit(
            workload.name,
            workload.num_nodes,
            partition=workload.partition,
            comment=comment_for(workload.tag),
            exclude=hosts,
        )
        self.actions += 1
