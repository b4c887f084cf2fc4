"""Whether a restarted attempt resumed from its workload's last checkpoint; one that did not
is flagged and audited."""

from __future__ import annotations

from detection.core.checkpoints import CheckpointState, LastCheckpoint, Resume, resume_verdict
from fleet import audit
from fleet.models import Attempt

from ..models import AttemptMonitor

ACTOR = "system:detection"


def _check_resume(monitor: AttemptMonitor, state: CheckpointState) -> None:
    """A restarted attempt that did not resume from the workload's last checkpoint is flagged
    (and audited): the work since that checkpoint is being done again."""
    attempt = monitor.attempt
    last = last_checkpoint_before(attempt)
    if last is None:
        return
    verdict = resume_verdict(last, state)
    if verdict is None:
        return
    monitor.resume, monitor.resume_summary = verdict.resume.value, verdict.summary[:200]
    if verdict.resume is not Resume.RESUMED:
        audit.record(
            ACTOR,
            "attempt.not_resumed",
            attempt,
            cluster=attempt.cluster,
            workload=attempt.workload,
            attempt=attempt,
            payload={
                "resume": verdict.resume.value,
                "summary": verdict.summary,
                "last_checkpoint_step": last.step,
            },
        )


def last_checkpoint_before(attempt: Attempt) -> LastCheckpoint | None:
    """The newest checkpoint written by an earlier attempt of the attempt's workload, when the
    attempt restarts a failed one (after a completed attempt it is a new run)."""
    earlier = Attempt.objects.filter(
        workload_id=attempt.workload_id, first_seen_at__lte=attempt.first_seen_at
    ).exclude(pk=attempt.pk)
    previous = earlier.order_by("-first_seen_at", "-pk").values_list("state", flat=True).first()
    if previous is None or previous == "COMPLETED":
        return None
    row = (
        AttemptMonitor.objects.filter(
            attempt__workload_id=attempt.workload_id, checkpoint_at__isnull=False
        )
        .exclude(attempt_id=attempt.pk)
        .filter(attempt__first_seen_at__lte=attempt.first_seen_at)
        .order_by("-checkpoint_at")
        .values("checkpoint_step", "checkpoint_at", "progress")
        .first()
    )
    if row is None or row["checkpoint_step"] is None or row["checkpoint_at"] is None:
        return None
    path = ((row["progress"] or {}).get("checkpoint") or {}).get("saved_path", "")
    return LastCheckpoint(row["checkpoint_step"], row["checkpoint_at"], path)
