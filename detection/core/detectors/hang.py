"""Hang detection: a running job that stops making progress, or whose GPUs all go idle.

A job hangs when no new progress arrives for longer than max(k × its smoothed interval between
progress reports, a floor): the silence allowed follows the job's own step time, so a job
stepping every 2 s is called hung after a minute, one stepping every 5 minutes after 25. Start-up
gets its own grace; a restarted attempt's follows how long its workload's earlier attempts took
to reach their first step. A checkpoint save, a checkpoint load or an evaluation while the log
shows one running (begun, not yet finished) pauses progress legitimately: each gets a grace of
its own, and once it has finished the silence counts from its end. Silence since a link of one
of the job's nodes went down is called sooner: two signals agree. The tracker is a frozen
value the caller stores between cycles, so detection survives a restart of the process that
runs it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from detection.core.checkpoints import CheckpointEvent, Phase, parse_checkpoint
from detection.core.interruption import Confidence, Evidence, Interruption
from detection.core.progress import Progress
from fleet.core.taxonomy import Attribution, Category, ConfidenceLabel, Kind

# The evidence signatures of the two kinds of hang.
SILENCE = "progress"
IDLE_GPUS = "gpus_idle"
# Lines that begin and end a visible pause in progress (see detection.core.checkpoints).
PAUSES = {
    Phase.SAVE_STARTED: "checkpoint",
    Phase.LOAD_STARTED: "load",
    Phase.EVAL_STARTED: "evaluation",
}
PAUSE_ENDS = (Phase.SAVED, Phase.LOADED, Phase.EVAL_ENDED)
# One line's event for the tracker: its time, what it reported and its text.
TrackedEvent = tuple[datetime, "Progress | CheckpointEvent", str]
# Silence supports a hang but never establishes one: the job may be busy in a way it does not log.
HANG_CONFIDENCE = Confidence(0.6, ConfidenceLabel.SUPPORTED)


@dataclass(frozen=True)
class HangSettings:
    """Per-cluster knobs (editable at runtime through the cluster's detector settings).

    The silence allowed is max(``interval_multiple`` × the smoothed interval between progress
    reports, ``floor_seconds``); ``smoothing`` is the EWMA weight of the newest interval. While
    a checkpoint save (or an evaluation) is visibly running it is at least
    ``checkpoint_grace_seconds`` (``evaluation_grace_seconds``).

    Before the first progress report the job may start up for ``startup_grace_seconds``. An
    attempt of a workload whose earlier attempts reached their first step is allowed
    ``startup_multiple`` × the longest of those start-ups instead (at least ``floor_seconds``,
    at most the grace), except while a checkpoint load is visibly running: a restart that
    hangs in start-up is then found in minutes, not in half an hour.

    No progress since a link of one of the job's nodes went down shortens the wait: to
    ``floor_seconds`` after the event in start-up, to ``after_node_event_multiple`` × the
    smoothed interval (at least ``floor_seconds``) after it once the job has made progress."""

    interval_multiple: float = 5.0
    floor_seconds: float = 60.0
    startup_grace_seconds: float = 1800.0
    startup_multiple: float = 3.0
    checkpoint_grace_seconds: float = 1200.0
    evaluation_grace_seconds: float = 1200.0
    after_node_event_multiple: float = 2.0
    idle_gpu_seconds: float = 180.0
    idle_utilisation: float = 5.0
    smoothing: float = 0.2


@dataclass(frozen=True)
class ProgressTracker:
    """What we know of one attempt's progress so far."""

    started_at: datetime
    # Derived by the caller, like ``started_at``: the longest time from start to first progress
    # of the workload's earlier attempts (None: none of them got that far).
    earlier_startup_seconds: float | None = None
    first_progress_at: datetime | None = None
    # The latest node-local event (a link of one of its nodes went down) in the job's lines.
    node_event_at: datetime | None = None
    last_step: int | None = None
    last_progress_at: datetime | None = None
    interval_seconds: float | None = None
    reports: int = 0
    # Since when a checkpoint save or an evaluation is visibly running, and which.
    checkpoint_since: datetime | None = None
    pause: str = ""
    # When the last visible pause ended: silence counts from then, not from the last step.
    pause_ended_at: datetime | None = None
    gpus_idle_since: datetime | None = None
    last_line: str = ""

    def observe(
        self, at: datetime, progress: Progress, text: str, smoothing: float
    ) -> ProgressTracker:
        """A progress report arrived. Repeats of the same step (one per rank) are not progress."""
        return self.observe_batch([(at, progress, text)], smoothing)[0]

    def observe_batch(
        self, events: Sequence[TrackedEvent], smoothing: float
    ) -> tuple[ProgressTracker, list[bool]]:
        """A scan's progress reports and checkpoint events of one attempt, in order, taken in
        at once: one copy of the tracker however many lines there were. Also, for each event,
        whether the attempt's progress stood at that event's time after it (the reports whose
        throughput and loss count)."""
        if not events:
            return self, []
        last_step, first_at, last_at = self.last_step, self.first_progress_at, self.last_progress_at
        interval, reports, last_line = self.interval_seconds, self.reports, self.last_line
        since, pause, pause_ended = self.checkpoint_since, self.pause, self.pause_ended_at
        current: list[bool] = []
        for at, event, text in events:
            if isinstance(event, Progress):
                # Repeats of the same step (one per rank) are not progress.
                if event.step is None or event.step != last_step:
                    if last_at is not None and at > last_at:
                        gap = (at - last_at).total_seconds()
                        interval = (
                            gap
                            if interval is None
                            else (1 - smoothing) * interval + smoothing * gap
                        )
                    last_step, first_at, last_at = event.step, first_at or at, at
                    reports, last_line = reports + 1, text[:500]
                    since, pause, pause_ended = None, "", None
            # A save, a load or an evaluation pauses progress without being a hang.
            elif event.phase in PAUSES and since is None:
                since, pause = at, PAUSES[event.phase]
            elif event.phase in PAUSE_ENDS and since is not None:
                since, pause, pause_ended = None, "", at
            current.append(last_at == at)
        tracker = replace(
            self,
            last_step=last_step,
            first_progress_at=first_at,
            last_progress_at=last_at,
            interval_seconds=interval,
            reports=reports,
            checkpoint_since=since,
            pause=pause,
            pause_ended_at=pause_ended,
            last_line=last_line,
        )
        return tracker, current

    def observe_node_event(self, at: datetime) -> ProgressTracker:
        """A node-local event on one of the job's nodes: it fails nothing by itself, but a job
        still starting up when it comes will not get further."""
        if self.node_event_at is not None and self.node_event_at >= at:
            return self
        return replace(self, node_event_at=at)

    def observe_line(self, at: datetime, text: str) -> ProgressTracker:
        """A line that is not a progress report: it may begin or end a save or evaluation."""
        event = parse_checkpoint(text)
        return self.observe_checkpoint(at, event) if event else self

    def observe_checkpoint(self, at: datetime, event: CheckpointEvent) -> ProgressTracker:
        """A save, a load or an evaluation began or ended: it pauses progress without being a
        hang."""
        return self.observe_batch([(at, event, "")], 0.0)[0]

    def observe_gpus(
        self, at: datetime, utilisations: list[float], settings: HangSettings
    ) -> ProgressTracker:
        """Track since when every GPU of the job has been idle (empty list: no data, no change)."""
        if not utilisations:
            return self
        idle = max(utilisations) < settings.idle_utilisation
        if not idle:
            return replace(self, gpus_idle_since=None)
        return self if self.gpus_idle_since else replace(self, gpus_idle_since=at)


def allowed_silence(tracker: ProgressTracker, settings: HangSettings) -> float:
    """How long this job may go without progress before we call it hung, in seconds."""
    if tracker.last_progress_at is None:
        return startup_allowance(tracker, settings)
    smoothed = (tracker.interval_seconds or 0.0) * settings.interval_multiple
    allowed = max(smoothed, settings.floor_seconds)
    if tracker.checkpoint_since is not None:
        allowed = max(allowed, _pause_grace(tracker, settings))
    return allowed


def startup_allowance(tracker: ProgressTracker, settings: HangSettings) -> float:
    """The silence allowed before the first progress report."""
    learned = _learned_startup(tracker)
    if learned is None:
        return settings.startup_grace_seconds
    return min(
        settings.startup_grace_seconds,
        max(settings.floor_seconds, settings.startup_multiple * learned),
    )


def _learned_startup(tracker: ProgressTracker) -> float | None:
    """The earlier attempts' start-up this one is measured by; none while a load is visible."""
    return None if tracker.pause == "load" else tracker.earlier_startup_seconds


def _pause_grace(tracker: ProgressTracker, settings: HangSettings) -> float:
    if tracker.pause == "evaluation":
        return settings.evaluation_grace_seconds
    if tracker.pause == "load":
        return settings.startup_grace_seconds
    return settings.checkpoint_grace_seconds


def silent_since(tracker: ProgressTracker, counts_from: datetime | None = None) -> datetime:
    """Since when the job has been silent; silence before ``counts_from`` (the end of a
    telemetry gap) or before the end of a visible pause is not the job's."""
    since = tracker.last_progress_at or tracker.started_at
    return max(filter(None, (since, counts_from, tracker.pause_ended_at)))


def overdue_allowance(
    tracker: ProgressTracker,
    now: datetime,
    settings: HangSettings,
    counts_from: datetime | None = None,
) -> float | None:
    """The silence allowed (seconds) when the job has been silent for longer, else None."""
    allowed = allowed_silence(tracker, settings)
    overdue = now - silent_since(tracker, counts_from) > timedelta(seconds=allowed)
    return allowed if overdue else None


def check_hang(
    job_id: str,
    tracker: ProgressTracker,
    now: datetime,
    settings: HangSettings,
    counts_from: datetime | None = None,
) -> Interruption | None:
    """A hang when the job has been silent, or its GPUs idle, for too long."""
    allowed = overdue_allowance(tracker, now, settings, counts_from)
    if allowed is not None:
        return _no_progress(job_id, tracker, silent_since(tracker, counts_from), allowed)
    after_event = _silent_after_node_event(tracker, now, settings, counts_from)
    if after_event is not None:
        allowed, waited = after_event
        why = f"{waited:.0f} s after an event on one of its nodes"
        return _no_progress(job_id, tracker, silent_since(tracker, counts_from), allowed, why)
    # GPUs wait on storage during a save or a load: idle then is the pause, not a hang, and
    # an idle spell counts from the pause's end.
    if tracker.checkpoint_since is not None or tracker.gpus_idle_since is None:
        return None
    idle_since = max(filter(None, (tracker.gpus_idle_since, tracker.pause_ended_at)))
    if now - idle_since > timedelta(seconds=settings.idle_gpu_seconds):
        return _idle_gpus(job_id, idle_since, settings)
    return None


def _silent_after_node_event(
    tracker: ProgressTracker,
    now: datetime,
    settings: HangSettings,
    counts_from: datetime | None = None,
) -> tuple[float, float] | None:
    """A job that has made no progress since a link of one of its nodes went down is hung
    sooner than silence alone would say: two signals agree. Still starting up (no checkpoint
    load running), it cannot get through its first collective, so the start-up grace gives way
    to ``floor_seconds`` after the event; after healthy progress, to
    ``after_node_event_multiple`` × its smoothed interval (at least ``floor_seconds``) after the
    event, time for a healthy job to report a step or two. When that is so, the silence allowed
    and the wait after the event (seconds), else None."""
    event = tracker.node_event_at
    if event is None or tracker.pause:
        return None  # a visible save, load or evaluation explains the silence
    since = silent_since(tracker, counts_from)
    if event < since:
        return None  # progress since, or before the silence that counts (a telemetry gap)
    wait = settings.floor_seconds
    if tracker.last_progress_at is not None:
        wait = max(wait, settings.after_node_event_multiple * (tracker.interval_seconds or 0.0))
    if now - event <= timedelta(seconds=wait):
        return None
    return (event - since).total_seconds() + wait, wait


def _no_progress(
    job_id: str, tracker: ProgressTracker, since: datetime, allowed: float, why: str = ""
) -> Interruption:
    if tracker.last_progress_at is None:
        what = f"no progress line within {allowed:.0f} s of the start"
        learned = _learned_startup(tracker)
        if why:
            what += f" ({why})"
        elif learned is not None:
            what += (
                f" (its workload's earlier attempts reached their first step within "
                f"{learned:.0f} s)"
            )
    else:
        what = f"no progress since step {tracker.last_step} for more than {allowed:.0f} s"
        if why:
            what += f" ({why})"
    evidence = Evidence(at=since, source="log", text=tracker.last_line or what, signature=SILENCE)
    return _hang(job_id, "hang:no-progress", since, what, evidence)


def _idle_gpus(job_id: str, since: datetime, settings: HangSettings) -> Interruption:
    text = f"every GPU of the job below {settings.idle_utilisation:g}% utilisation since {since}"
    evidence = Evidence(at=since, source="metrics", text=text, signature=IDLE_GPUS)
    return _hang(
        job_id, "hang:idle-gpus", since, "all GPUs idle while the job is running", evidence
    )


def _hang(
    job_id: str, root_cause: str, since: datetime, summary: str, evidence: Evidence
) -> Interruption:
    return Interruption(
        kind=Kind.HANG,
        category=Category.NCCL_TIMEOUT_HANG,
        # Silence says nothing of who is to blame.
        attribution=Attribution.NONE,
        confidence=HANG_CONFIDENCE,
        root_cause=root_cause,
        summary=summary,
        explanation=summary,
        evidence=(evidence,),
        signature=evidence.signature,
        first_evidence_at=since,
        job_id=job_id,
    )
