"""Checkpoints read from a job's Slurm output: the last one written, and whether the attempt
Slurm requeued resumed from it."""

import dataclasses
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from detection import scan
from detection.models import AttemptMonitor
from fleet import services
from fleet.core.scheduler import ClusterSnapshot, JobState
from fleet.models import AuditEntry
from tests.detection.sites import files_cluster
from tests.factories import JobRecordFactory

pytestmark = pytest.mark.django_db
T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
PROGRESS = " iteration {n:8d}/  100000 | elapsed time per iteration (ms): 900.0 | lm loss: 2.1 |\n"
SAVING = "saving checkpoint at iteration {n:7d} to /lustre/ckpt/gpt in torch_dist format\n"
SAVED = "  successfully saved checkpoint from iteration {n:7d} to /lustre/ckpt/gpt\n"
LOADED = (
    "  successfully loaded checkpoint from /lustre/ckpt/gpt [ t 1/2, p 1/1 ] at iteration {n}\n"
)
FRESH = (
    "WARNING: could not find the metadata file /lustre/ckpt/gpt/latest_checkpointed_iteration.txt\n"
    "    will not load any checkpoints and will start from random\n"
)


@pytest.fixture
def site(tmp_path: Path):
    cluster, logs, _ = files_cluster(tmp_path)
    job = JobRecordFactory(job_id="9001", nodes=("gpu-node-001", "gpu-node-002"), start_time=T0)
    services.record_snapshot("controller:site", cluster, ClusterSnapshot(T0, (job,), ()))
    return cluster, logs / "slurm-9001.out", job


def append(path: Path, text: str) -> None:
    with path.open("a") as handle:
        handle.write(text)


def run_until_checkpoint(cluster, output: Path) -> None:
    append(output, "".join(PROGRESS.format(n=n) for n in range(1, 201)))
    append(output, SAVING.format(n=200) + SAVED.format(n=200))
    append(output, "".join(PROGRESS.format(n=n) for n in range(201, 260)))
    scan.scan_cluster(cluster, T0 + timedelta(minutes=5))


def requeue(cluster, job, at: datetime) -> None:
    """Slurm requeues the job after a node failure: the same id, one more restart."""
    failed = dataclasses.replace(job, state=JobState.NODE_FAIL, end_time=at)
    services.record_snapshot("controller:site", cluster, ClusterSnapshot(at, (failed,), ()))
    again = dataclasses.replace(job, restart_count=1, start_time=at + timedelta(seconds=30))
    services.record_snapshot("controller:site", cluster, ClusterSnapshot(at, (again,), ()))


def test_the_last_checkpoint_written_is_kept_with_its_step_and_time(site) -> None:
    cluster, output, _ = site
    run_until_checkpoint(cluster, output)
    monitor = AttemptMonitor.objects.get()
    assert monitor.checkpoint_step == 200 and monitor.checkpoint_at is not None
    assert monitor.progress["checkpoint"]["saved_path"] == "/lustre/ckpt/gpt"


def test_a_save_begun_but_not_finished_is_not_a_checkpoint(site) -> None:
    cluster, output, _ = site
    append(output, PROGRESS.format(n=1) + SAVING.format(n=100) + PROGRESS.format(n=101))
    scan.scan_cluster(cluster, T0 + timedelta(minutes=1))
    assert AttemptMonitor.objects.get().checkpoint_step is None


def test_a_requeued_attempt_that_started_from_scratch_is_flagged_and_audited(site) -> None:
    cluster, output, job = site
    run_until_checkpoint(cluster, output)
    requeue(cluster, job, T0 + timedelta(minutes=6))
    append(output, FRESH + PROGRESS.format(n=1))
    scan.scan_cluster(cluster, T0 + timedelta(minutes=8))
    restarted = AttemptMonitor.objects.get(attempt__attempt_index=1)
    assert restarted.resume == "from_scratch"
    assert "step 200" in restarted.resume_summary
    entry = AuditEntry.objects.get(verb="attempt.not_resumed")
    assert (entry.attempt_id, entry.payload["last_checkpoint_step"]) == (restarted.attempt_id, 200)


def test_a_requeued_attempt_that_loaded_the_last_checkpoint_resumed(site) -> None:
    cluster, output, job = site
    run_until_checkpoint(cluster, output)
    requeue(cluster, job, T0 + timedelta(minutes=6))
    append(output, LOADED.format(n=200) + PROGRESS.format(n=201))
    scan.scan_cluster(cluster, T0 + timedelta(minutes=8))
    restarted = AttemptMonitor.objects.get(attempt__attempt_index=1)
    assert (restarted.resume, restarted.resume_summary) == ("resumed", "resumed from step 200")
    assert not AuditEntry.objects.filter(verb="attempt.not_resumed").exists()


def test_loading_an_older_checkpoint_is_flagged(site) -> None:
    cluster, output, job = site
    run_until_checkpoint(cluster, output)
    requeue(cluster, job, T0 + timedelta(minutes=6))
    append(output, LOADED.format(n=100) + PROGRESS.format(n=101))
    scan.scan_cluster(cluster, T0 + timedelta(minutes=8))
    restarted = AttemptMonitor.objects.get(attempt__attempt_index=1)
    assert restarted.resume == "older_checkpoint"
    assert restarted.resume_summary == (
        "resumed from step 100, not from the last checkpoint (step 200)"
    )


def test_a_first_attempt_has_nothing_to_resume_from(site) -> None:
    cluster, output, _ = site
    append(output, FRESH + PROGRESS.format(n=1))
    scan.scan_cluster(cluster, T0 + timedelta(minutes=1))
    assert AttemptMonitor.objects.get().resume == ""
