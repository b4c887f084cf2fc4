"""The watchdog: an independent path that fails open. A job requeue-held for a recovery
decision is released once it has been held longer than the hold timeout, so a controller that
died between requeue-hold and release never leaves GPUs idle behind a held job.

Plain Python. It reads Slurm itself and keeps when it first saw each hold in a small JSON file,
so its own restart does not reset the clock. With the console reachable it releases only jobs
held for an advice and reports each release as a milestone (the audit trail records it); with
the console unreachable it releases every requeued, held job past the timeout, and delivers the
reports later.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from recovery_console.fleet.core.scheduler import JobRecord, JobState

from .reconciler import AdviceItem, AdviceWithdrawn, Advisor, AdvisorUnavailable, Scheduler
from .slurm import SlurmCommandError

log = logging.getLogger(__name__)


@dataclass
class WatchdogState:
    """When each held job was first seen held, and releases not yet reported."""

    first_seen: dict[str, str] = field(default_factory=dict)
    unreported: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def load(cls, path: Path | None) -> WatchdogState:
        if path is None or not path.exists():
            return cls()
        try:
            data = json.loads(path.read_text())
            return cls(dict(data.get("first_seen", {})), list(data.get("unreported", [])))
        except (OSError, ValueError) as exc:
            # Fail open: a lost state file only restarts the clocks; it must not stop the watchdog.
            log.warning("watchdog state %s unreadable (%s): starting afresh", path, exc)
            return cls()

    def save(self, path: Path | None) -> None:
        if path is not None:
            # Write, then rename: a crash mid-write never leaves a half-written state file behind.
            partial = path.with_suffix(".tmp")
            partial.write_text(
                json.dumps({"first_seen": self.first_seen, "unreported": self.unreported})
            )
            partial.replace(path)


class Watchdog:
    def __init__(
        self,
        scheduler: Scheduler,
        clock: Callable[[], datetime],
        hold_timeout_s: float,
        advisor: Advisor | None = None,
        state_path: Path | None = None,
    ) -> None:
        self.scheduler, self.clock, self.advisor = scheduler, clock, advisor
        self.hold_timeout_s, self.state_path = hold_timeout_s, state_path
        self.state = WatchdogState.load(state_path)

    def cycle(self) -> list[str]:
        """Release what has been held too long; returns the job ids released."""
        now = self.clock()
        held = {job.job_id: job for job in self.scheduler.snapshot().jobs if _held_for_requeue(job)}
        # Jobs no longer held are forgotten, so a job held again later starts a fresh clock.
        self.state.first_seen = {j: self.state.first_seen.get(j, now.isoformat()) for j in held}
        advice = self._advice_by_job()
        released = []
        for job_id, job in held.items():
            held_for = (now - datetime.fromisoformat(self.state.first_seen[job_id])).total_seconds()
            if held_for <= self.hold_timeout_s:
                continue
            if advice is not None and job_id not in advice:
                continue  # held by someone else, not for one of our decisions
            if self._release(job, held_for, (advice or {}).get(job_id), now):
                released.append(job_id)
        # Reports come after the releases: a console that is down must never delay one.
        self._deliver_reports()
        self.state.save(self.state_path)
        return released

    def _advice_by_job(self) -> dict[str, AdviceItem] | None:
        """Active advice by job id, or None when the console cannot be asked (fail open)."""
        if self.advisor is None:
            return None
        try:
            return {item.job_id: item for item in self.advisor.active_advice()}
        except AdvisorUnavailable as exc:
            log.warning("console unreachable (%s): releasing every job held past the timeout", exc)
            return None

    def _release(
        self, job: JobRecord, held_for: float, advice: AdviceItem | None, now: datetime
    ) -> bool:
        try:
            self.scheduler.release(job.job_id)
        except SlurmCommandError as exc:
            # Still held and still timed: the next cycle tries again.
            log.warning("watchdog could not release %s: %s", job.job_id, exc)
            return False
        log.warning(
            "watchdog released job %s, held %.0f s without a decision carried out",
            job.job_id,
            held_for,
        )
        self.state.first_seen.pop(job.job_id, None)
        self.state.unreported.append(
            {
                "job_id": job.job_id,
                "restart_count": job.restart_count,
                "held_for_s": round(held_for, 1),
                "at": now.isoformat(),
                # Kept as it was now: by delivery time the advice may no longer be active.
                "advice": None if advice is None else _advice_json(advice),
            }
        )
        return True

    def _deliver_reports(self) -> None:
        if self.advisor is None:
            return
        remaining = []
        for report in self.state.unreported:
            try:
                self._report(report)
            except AdviceWithdrawn:
                pass  # recorded; the refusal only stops a controller's next step
            except AdvisorUnavailable:
                # Kept in the state file and retried next cycle, across restarts too.
                remaining.append(report)
        self.state.unreported = remaining

    def _report(self, report: dict[str, Any]) -> None:
        advice = _advice_for(report, self.advisor)
        if advice is None:
            log.warning(
                "watchdog release of job %s matches no advice; logged here only", report["job_id"]
            )
            return
        # One key per held attempt: a report retried after a lost answer is recorded once.
        key = f"watchdog-release-{report['job_id']}-r{report['restart_count']}"
        detail = {"by": "watchdog", "held_for_s": report["held_for_s"], "job_id": report["job_id"]}
        self.advisor.milestone(advice, "release", datetime.fromisoformat(report["at"]), detail, key)  # type: ignore[union-attr]


def _held_for_requeue(job: JobRecord) -> bool:
    """Held after a requeue (restart count above zero); a submit-time hold is not ours."""
    return job.state == JobState.PENDING and job.held and job.restart_count > 0


def _advice_json(advice: AdviceItem) -> dict[str, Any]:
    return {
        "id": advice.id,
        "generation": advice.generation,
        "job_id": advice.job_id,
        "attempt_index": advice.attempt_index,
        "partition": advice.partition,
        "action": advice.action,
        "desired_state": advice.desired_state,
        "exclude_nodes": list(advice.exclude_nodes),
        "drain_nodes": list(advice.drain_nodes),
        "enforce": advice.enforce,
        "state": advice.state,
    }


def _advice_for(report: dict[str, Any], advisor: Advisor | None) -> AdviceItem | None:
    if report.get("advice"):
        return AdviceItem.from_json(report["advice"])
    if advisor is None:
        return None
    # Released while the console was unreachable: find its advice now, if still active.
    return next((a for a in advisor.active_advice() if a.job_id == report["job_id"]), None)
