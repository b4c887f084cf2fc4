"""The watchdog: an independent path that fails open. A job requeue-held for a recovery
decision is released once it has been held longer than the hold timeout, so a controller that
died between requeue-hold and release never leaves GPUs idle behind a held job.

Plain Python. It reads Slurm itself and keeps, in a small JSON file, when it first saw each
hold and the advice each held job was held for, so neither its own restart nor a console that
went away loses what is known. With the console reachable it releases only jobs held for an
advice; with the console unreachable it releases every requeued, held job past the timeout.
Before a release it applies the exclusions the advice carried (they only remove suspect nodes,
and the console admitted them within its circuit breaker), so the job does not go back to the
node that failed it. Each step is reported as a milestone, later if the console is down.

It heartbeats like the controller, and reports what Slurm shows while the console has no fresh
snapshot from anyone else (the controller is down), so the console is never blind.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from fleet.core.scheduler import ClusterSnapshot, JobRecord, JobState

from .reconciler import (
    VERSION,
    AdviceItem,
    AdviceWithdrawn,
    Advisor,
    AdvisorUnavailable,
    Scheduler,
)
from .slurm import SlurmCommandError
from .transport import TransportError

log = logging.getLogger(__name__)

DEFAULT_HOLD_TIMEOUT_S = 300.0  # the policy's default, until the console says otherwise
# With no snapshot from anyone else for this long, the watchdog reports its own.
DEFAULT_STANDBY_AFTER_S = 15.0


@dataclass
class WatchdogState:
    """When each held job was first seen held, the advice it was held for (as last read from
    the console), and releases not yet reported."""

    first_seen: dict[str, str] = field(default_factory=dict)
    unreported: list[dict[str, Any]] = field(default_factory=list)
    known_advice: dict[str, dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path | None) -> WatchdogState:
        if path is None or not path.exists():
            return cls()
        try:
            data = json.loads(path.read_text())
            return cls(
                dict(data.get("first_seen", {})),
                list(data.get("unreported", [])),
                dict(data.get("known_advice", {})),
            )
        except (OSError, ValueError, AttributeError, TypeError) as exc:
            # Fail open: a lost state file only restarts the clocks; it must not stop the watchdog.
            log.warning("watchdog state %s unreadable (%s): starting afresh", path, exc)
            return cls()

    def save(self, path: Path | None) -> None:
        if path is not None:
            # Write, then rename: a crash mid-write never leaves a half-written state file behind.
            partial = path.with_suffix(".tmp")
            document = {
                "first_seen": self.first_seen,
                "unreported": self.unreported,
                "known_advice": self.known_advice,
            }
            partial.write_text(json.dumps(document))
            partial.replace(path)


@dataclass(frozen=True)
class HoldTimeouts:
    """The policy's hold timeout, and the partitions that set their own."""

    default: float = DEFAULT_HOLD_TIMEOUT_S
    partitions: Mapping[str, float] = field(default_factory=dict)

    def for_job(self, job: JobRecord) -> float:
        return self.partitions.get(job.partition, self.default)

    @classmethod
    def from_json(cls, data: Any, fallback: HoldTimeouts) -> HoldTimeouts:
        """From the console's answer; what it cannot say keeps ``fallback``."""
        if not isinstance(data, dict):
            return fallback
        try:
            partitions = {str(k): float(v) for k, v in dict(data.get("partitions", {})).items()}
            return cls(float(data.get("default", fallback.default)), partitions)
        except (TypeError, ValueError):
            return fallback


class Watchdog:
    """``hold_timeout_s``: fixed by the operator; None takes the console's policy (per
    partition), read with each heartbeat."""

    def __init__(
        self,
        scheduler: Scheduler,
        clock: Callable[[], datetime],
        hold_timeout_s: float | None,
        advisor: Advisor | None = None,
        state_path: Path | None = None,
        *,
        standby_after_s: float = DEFAULT_STANDBY_AFTER_S,
        transport_name: str = "local",
    ) -> None:
        self.scheduler, self.clock, self.advisor = scheduler, clock, advisor
        self.fixed_timeout = hold_timeout_s
        self.timeouts = HoldTimeouts(hold_timeout_s or DEFAULT_HOLD_TIMEOUT_S)
        self.state_path, self.standby_after_s = state_path, standby_after_s
        self.transport_name = transport_name
        self.state = WatchdogState.load(state_path)
        self.last_error = ""
        self.snapshots_reported = 0

    def cycle(self) -> list[str]:
        """Release what has been held too long; returns the job ids released."""
        now = self.clock()
        try:
            snapshot = self.scheduler.snapshot()
        except (TransportError, SlurmCommandError, ValueError) as exc:
            # Slurm unreachable: nothing to release; the console hears of it by the heartbeat.
            self.last_error = f"reading Slurm: {exc}"
            log.warning("watchdog cannot read Slurm: %s", exc)
            self._heartbeat_and_report(None)
            return []
        self.last_error = ""
        released = self._release_overdue(snapshot, now)
        # Reports come after the releases: a console that is down must never delay one.
        self._heartbeat_and_report(snapshot)
        self._deliver_reports()
        self.state.save(self.state_path)
        return released

    def _release_overdue(self, snapshot: ClusterSnapshot, now: datetime) -> list[str]:
        held = {job.job_id: job for job in snapshot.jobs if _held_for_requeue(job)}
        # Jobs no longer held are forgotten, so a job held again later starts a fresh clock.
        self.state.first_seen = {j: self.state.first_seen.get(j, now.isoformat()) for j in held}
        advice = self._advice_for_held(held)
        released = []
        for job_id, job in held.items():
            held_for = (now - datetime.fromisoformat(self.state.first_seen[job_id])).total_seconds()
            if held_for <= self.timeouts.for_job(job):
                continue
            if advice is not None and job_id not in advice:
                continue  # held by someone else, not for one of our decisions
            if self._release(job, held_for, (advice or {}).get(job_id), now):
                released.append(job_id)
        return released

    def _advice_for_held(
        self, held: dict[str, JobRecord]
    ) -> Mapping[str, AdviceItem | None] | None:
        """The advice each held job was held for. From the console when it answers (and kept);
        unreachable, what was kept, or None when nothing is known (then every hold past the
        timeout is released: fail open)."""
        fresh = self._active_advice()
        if fresh is not None:
            self.state.known_advice = {
                job_id: _advice_json(fresh[job_id]) for job_id in held if job_id in fresh
            }
            return fresh
        known = {j: a for j, a in self.state.known_advice.items() if j in held}
        self.state.known_advice = known
        if not known:
            return None
        # Known jobs get their exclusions; a hold we know nothing of is still released.
        return {j: AdviceItem.from_json(known[j]) if j in known else None for j in held}

    def _active_advice(self) -> dict[str, AdviceItem] | None:
        if self.advisor is None:
            return None
        try:
            return {item.job_id: item for item in self.advisor.active_advice()}
        except AdvisorUnavailable as exc:
            self.last_error = f"console: {exc}"
            log.warning("console unreachable (%s): releasing held jobs past the timeout", exc)
            return None

    def _release(
        self, job: JobRecord, held_for: float, advice: AdviceItem | None, now: datetime
    ) -> bool:
        excluded = self._apply_exclusions(job, advice)
        try:
            self.scheduler.release(job.job_id)
        except (SlurmCommandError, TransportError) as exc:
            # Still held and still timed: the next cycle tries again.
            log.warning("watchdog could not release %s: %s", job.job_id, exc)
            return False
        log.warning(
            "watchdog released job %s, held %.0f s without a decision carried out%s",
            job.job_id,
            held_for,
            f", excluding {', '.join(excluded)}" if excluded else "",
        )
        self.state.first_seen.pop(job.job_id, None)
        self.state.unreported.append(
            {
                "job_id": job.job_id,
                "restart_count": job.restart_count,
                "held_for_s": round(held_for, 1),
                "at": now.isoformat(),
                "excluded": excluded,
                # Kept as it was now: by delivery time the advice may no longer be active.
                "advice": None if advice is None else _advice_json(advice),
            }
        )
        return True

    def _apply_exclusions(self, job: JobRecord, advice: AdviceItem | None) -> list[str]:
        """The advice's exclusions added to the job's own (never removed); the list set, or
        empty when nothing was to add. Only enforced advice: withdrawn advice is released as is."""
        if advice is None or not advice.enforce or advice.desired_state != "running_excluding":
            return []
        wanted = set(advice.exclude_nodes) | set(job.excluded_nodes)
        if wanted <= set(job.excluded_nodes):
            return []  # the controller got that far before it died
        try:
            self.scheduler.update_exclusions(job.job_id, sorted(wanted))
        except (SlurmCommandError, TransportError, ValueError) as exc:
            # Fail open all the same: a refused exclusion must never keep the job held.
            log.warning("watchdog could not exclude %s from %s: %s", wanted, job.job_id, exc)
            return []
        return sorted(wanted)

    # -- reporting -----------------------------------------------------------------------------

    def _heartbeat_and_report(self, snapshot: ClusterSnapshot | None) -> None:
        if self.advisor is None:
            return
        try:
            answer = self.advisor.heartbeat(
                {
                    "role": "watchdog",
                    "controller_version": VERSION,
                    "transport": self.transport_name,
                    "last_error": self.last_error[:2000],
                }
            )
        except AdvisorUnavailable as exc:
            log.warning("watchdog heartbeat not delivered: %s", exc)
            return
        answer = answer or {}
        if self.fixed_timeout is None:
            self.timeouts = HoldTimeouts.from_json(answer.get("hold_timeouts"), self.timeouts)
        if snapshot is not None and self._console_is_blind(answer):
            self._post_snapshot(snapshot)

    def _console_is_blind(self, answer: dict[str, Any]) -> bool:
        """No snapshot from anyone else (the controller) for ``standby_after_s``: ours is
        needed. While the controller reports, ours would only repeat it."""
        age = answer.get("snapshot_age_s")
        return not isinstance(age, int | float) or age > self.standby_after_s

    def _post_snapshot(self, snapshot: ClusterSnapshot) -> None:
        try:
            self.advisor.post_snapshot(snapshot)  # type: ignore[union-attr]
        except AdvisorUnavailable as exc:
            log.warning("watchdog snapshot not delivered: %s", exc)
            return
        self.snapshots_reported += 1

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
        at = datetime.fromisoformat(report["at"])
        detail = {"by": "watchdog", "held_for_s": report["held_for_s"], "job_id": report["job_id"]}
        # One key per held attempt and step: a report retried after a lost answer counts once.
        held = f"{report['job_id']}-r{report['restart_count']}"
        if report.get("excluded"):
            nodes = {"nodes": report["excluded"]}
            key = f"watchdog-exclude-{held}"
            self.advisor.milestone(advice, "update_exclusions", at, detail | nodes, key)  # type: ignore[union-attr]
        key = f"watchdog-release-{held}"
        self.advisor.milestone(advice, "release", at, detail, key)  # type: ignore[union-attr]


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
