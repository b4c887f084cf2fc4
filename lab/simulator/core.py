"""What every part of the simulation shares: the config, simulated time, the event queue and the
output buffer that ``advance`` hands back."""

from __future__ import annotations

from datetime import datetime

from detection.core.telemetry import LogLine

from .config import SimulationConfig
from .events import Clock, EventQueue
from .state import Job


class Core:
    """Time, events and output, shared by the scheduler, the trainer and the fault injector."""

    def __init__(self, config: SimulationConfig) -> None:
        self.config = config
        self.clock = Clock(config.start_time)
        self.queue = EventQueue()
        self.out: list[LogLine] = []

    def job_lines(self, job: Job, texts: list[str], at: datetime | None = None) -> None:
        """Lines in the job's output file, written now (``at`` if the caller has it already)."""
        stamp, job_id = at or self.clock.now, job.job_id
        self.out.extend([LogLine(stamp, text, job_id) for text in texts])

    def host_lines(self, host: str, texts: list[str]) -> None:
        """Lines in a node's system log (kernel, systemd), written now."""
        at = self.clock.now
        self.out.extend(LogLine(at, text, None, host) for text in texts)

    def job_lines_at(self, t: float, job: Job, token: int, texts: list[str]) -> None:
        """Lines the attempt ``token`` will write at ``t``, unless its processes are gone."""
        self.queue.push(t, self._emit_job, job, token, texts)

    def host_lines_at(self, t: float, host: str, texts: list[str]) -> None:
        # Node logs outlive jobs: a kernel line is written whatever became of the attempt.
        self.queue.push(t, self.host_lines, host, texts)

    def _emit_job(self, job: Job, token: int, texts: list[str]) -> None:
        run = job.run
        # Lines queued by an attempt that has since died or been requeued are never written.
        if run is not None and run.token == token and run.alive:
            self.job_lines(job, texts)
