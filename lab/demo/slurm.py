"""The simulated cluster's scheduler behind ``SlurmClient``'s interface, so the same controller
serves the demo and the benchmark."""

from __future__ import annotations

from collections.abc import Iterable

from fleet.core.scheduler import ClusterSnapshot, JobRecord
from lab.simulator import SchedulerError, SimulatedCluster
from remediation.controller.slurm import (
    SlurmCommandError,
    sanitise_reason,
    validate_job_id,
    validate_node_name,
)


# Ids, names and reasons go through SlurmClient's own checks, so the demo refuses
# whatever the real client would refuse.
class SimulatedSlurm:
    def __init__(self, simulator: SimulatedCluster) -> None:
        self.simulator = simulator

    def requeue_hold(self, job_id: str) -> None:
        self._do(
            "requeuehold", lambda: self.simulator.scheduler.requeue_hold(validate_job_id(job_id))
        )

    def hold(self, job_id: str) -> None:
        self._do("hold", lambda: self.simulator.scheduler.hold(validate_job_id(job_id)))

    def update_exclusions(self, job_id: str, nodes: Iterable[str]) -> None:
        names = [validate_node_name(n) for n in nodes]
        self._do(
            "update",
            lambda: self.simulator.scheduler.update_exclusions(validate_job_id(job_id), names),
        )

    def release(self, job_id: str) -> None:
        self._do("release", lambda: self.simulator.scheduler.release(validate_job_id(job_id)))

    def cancel(self, job_id: str) -> None:
        self._do("scancel", lambda: self.simulator.scheduler.cancel(validate_job_id(job_id)))

    def drain(self, node: str, reason: str) -> None:
        text = sanitise_reason(reason)
        self._do("drain", lambda: self.simulator.scheduler.drain(validate_node_name(node), text))

    def resume(self, node: str) -> None:
        self._do("resume", lambda: self.simulator.scheduler.resume(validate_node_name(node)))

    def snapshot(self) -> ClusterSnapshot:
        return self.simulator.snapshot()

    def job(self, job_id: str) -> JobRecord | None:
        return next((j for j in self.simulator.snapshot().jobs if j.job_id == job_id), None)

    @staticmethod
    def _do(command: str, action: object) -> None:
        try:
            action()  # type: ignore[operator]
        except SchedulerError as exc:
            # Shaped like a failed scontrol call, which the controller already knows how to handle.
            raise SlurmCommandError([command], 1, str(exc)) from exc
