"""Scans of a cluster whose logs are Slurm output files on disk, as at a real site."""

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from django.core.exceptions import ValidationError
from django_celery_beat.models import PeriodicTask

from detection import scan
from detection import services as detection
from detection.models import Anomaly, AttemptMonitor, SourceCursor
from fleet import services
from fleet.core.scheduler import ClusterSnapshot, JobState
from fleet.models import AuditEntry
from recovery_console.console.tasks import dispatch_cycles
from tests.detection.sites import files_cluster
from tests.factories import JobRecordFactory

pytestmark = pytest.mark.django_db
T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
PROGRESS = " iteration {n:8d}/  100000 | elapsed time per iteration (ms): 900.0 | lm loss: 2.1 |\n"
CUDA_ECC = "[rank9]: RuntimeError: CUDA error: uncorrectable ECC error encountered\n"


@pytest.fixture
def site(tmp_path: Path):
    cluster, logs, _ = files_cluster(tmp_path)
    job = JobRecordFactory(job_id="9001", nodes=("gpu-node-001", "gpu-node-002"), start_time=T0)
    services.record_snapshot("controller:site", cluster, ClusterSnapshot(T0, (job,), ()))
    return cluster, logs / "slurm-9001.out", job


def append(path: Path, text: str) -> None:
    with path.open("a") as handle:
        handle.write(text)


def test_a_restarted_scan_neither_loses_nor_repeats_lines(site) -> None:
    cluster, output, _ = site
    append(output, "".join(PROGRESS.format(n=n) for n in range(1, 4)))
    first = scan.scan_cluster(cluster, T0 + timedelta(minutes=1))
    append(output, PROGRESS.format(n=4) + "half a line without its newline")
    second = scan.scan_cluster(cluster, T0 + timedelta(minutes=2))  # fresh sources: a restart
    assert (first.lines, second.lines) == (3, 1)
    monitor = AttemptMonitor.objects.get()
    assert (monitor.lines_seen, monitor.last_step) == (4, 4)
    assert scan.scan_cluster(cluster, T0 + timedelta(minutes=3)).lines == 0


def test_a_crash_in_the_output_file_becomes_one_anomaly_however_often_it_repeats(site) -> None:
    cluster, output, _ = site
    append(output, PROGRESS.format(n=1) + CUDA_ECC * 50)
    summary = scan.scan_cluster(cluster, T0 + timedelta(minutes=1))
    append(output, CUDA_ECC * 50)
    scan.scan_cluster(cluster, T0 + timedelta(minutes=2))
    anomaly = Anomaly.objects.get()
    assert summary.new_anomalies == 1
    assert (anomaly.kind, anomaly.category) == ("crash", "gpu_hardware")
    assert anomaly.evidence[0]["signature"]
    assert AuditEntry.objects.filter(verb="anomaly.detected").count() == 1


def test_a_missing_log_directory_marks_the_source_unhealthy_and_keeps_its_cursor(site) -> None:
    cluster, output, _ = site
    append(output, PROGRESS.format(n=1))
    scan.scan_cluster(cluster, T0 + timedelta(minutes=1))
    cursor = SourceCursor.objects.get(source="job-files").cursor
    renamed = output.parent.rename(output.parent.with_name("moved"))
    summary = scan.scan_cluster(cluster, T0 + timedelta(minutes=2))
    row = SourceCursor.objects.get(source="job-files")
    assert summary.failed_sources and "missing or not readable" in summary.failed_sources[0]
    assert (row.healthy, row.cursor) == (False, cursor)
    assert "missing or not readable" in row.last_error
    renamed.rename(output.parent)
    append(output, PROGRESS.format(n=2))
    assert scan.scan_cluster(cluster, T0 + timedelta(minutes=3)).lines == 1
    assert SourceCursor.objects.get(source="job-files").healthy


def test_lines_read_before_the_scheduler_reports_their_job_are_kept_for_it(site) -> None:
    cluster, output, _ = site
    early = output.with_name("slurm-9002.out")
    append(early, PROGRESS.format(n=1) + CUDA_ECC)
    scan.scan_cluster(cluster, T0 + timedelta(seconds=10))
    assert not Anomaly.objects.exists()
    job = JobRecordFactory(job_id="9002", start_time=T0)
    services.record_snapshot("controller:site", cluster, ClusterSnapshot(T0, (job,), ()))
    scan.scan_cluster(cluster, T0 + timedelta(seconds=20))
    assert Anomaly.objects.get().attempt.job_id == "9002"


@pytest.mark.parametrize("requeue_seen_first", [True, False], ids=["requeue-first", "lines-first"])
def test_a_job_line_belongs_to_the_attempt_running_when_it_was_written(
    site, requeue_seen_first: bool
) -> None:
    """Slurm requeues a job after a node failure: the failure's lines are its first attempt's
    whether the new (pending) attempt is recorded before they are read or after."""
    cluster, output, job = site
    pending = JobRecordFactory(
        job_id="9001", nodes=(), state=JobState.PENDING, restart_count=1, start_time=None
    )

    def requeue_seen() -> None:
        snapshot = ClusterSnapshot(T0 + timedelta(seconds=31), (pending,), ())
        services.record_snapshot("controller:site", cluster, snapshot)

    if requeue_seen_first:
        requeue_seen()
    append(output, "2026-11-29T12:00:30Z srun: error: Node failure on gpu-node-002\n")
    scan.scan_cluster(cluster, T0 + timedelta(seconds=32))
    if not requeue_seen_first:
        requeue_seen()
    assert Anomaly.objects.get().attempt.attempt_index == 0
    rerun = JobRecordFactory(job_id="9001", restart_count=1, start_time=T0 + timedelta(minutes=1))
    services.record_snapshot(
        "controller:site", cluster, ClusterSnapshot(rerun.start_time, (rerun,), ())
    )
    append(output, "2026-11-29T12:01:10Z " + CUDA_ECC)
    scan.scan_cluster(cluster, T0 + timedelta(minutes=2))
    assert sorted(Anomaly.objects.values_list("attempt__attempt_index", flat=True)) == [0, 1]


def test_a_failed_job_with_a_silent_log_is_still_an_interruption(site) -> None:
    cluster, _, job = site
    failed = job.__class__(
        **{**job.__dict__, "state": JobState.FAILED, "exit_code": 1, "end_time": T0}
    )
    services.record_snapshot("controller:site", cluster, ClusterSnapshot(T0, (failed,), ()))
    scan.scan_cluster(cluster, T0 + timedelta(seconds=5))
    anomaly = Anomaly.objects.get()
    assert (anomaly.kind, anomaly.confidence_label, anomaly.root_cause) == (
        "crash",
        "hypothesis",
        "slurm:FAILED",
    )


def test_a_hung_job_is_found_when_its_progress_stops(site) -> None:
    cluster, output, _ = site
    append(output, "".join(PROGRESS.format(n=n) for n in range(1, 30)))
    scan.scan_cluster(cluster, T0 + timedelta(minutes=1))
    assert not Anomaly.objects.exists()
    scan.scan_cluster(cluster, T0 + timedelta(hours=1))
    anomaly = Anomaly.objects.get()
    assert (anomaly.kind, anomaly.root_cause) == ("hang", "hang:no-progress")


def test_custom_signatures_are_validated_and_used(site) -> None:
    cluster, output, _ = site
    spec = {
        "name": "site_fs_fence",
        "pattern": r"GPFS: fence lost on (?P<host>\S+)",
        "kind": "crash",
        "category": "filesystem_io",
        "attribution": "system_software",
        "role": "initiating",
    }
    with pytest.raises(ValidationError, match="RE2"):
        detection.update_detection_settings(
            "user:bob", cluster, signatures=[spec | {"pattern": "(a"}]
        )
    assert detection.detection_settings_of(cluster).signatures == []
    detection.update_detection_settings("user:bob", cluster, signatures=[spec])
    append(output, "GPFS: fence lost on gpu-node-002\n")
    scan.scan_cluster(cluster, T0 + timedelta(minutes=1))
    assert Anomaly.objects.get().category == "filesystem_io"
    assert AuditEntry.objects.filter(verb="detection.settings_changed").exists()


def test_beat_runs_the_dispatcher_and_each_cluster_is_claimed_once_per_interval(site) -> None:
    cluster, _, _ = site
    assert PeriodicTask.objects.filter(task="recovery_console.dispatch_cycles").exists()
    now = T0 + timedelta(hours=1)
    assert detection.claim_due_scans(now) == [cluster.pk]
    assert detection.claim_due_scans(now + timedelta(seconds=1)) == []
    assert detection.claim_due_scans(now + timedelta(seconds=6)) == [cluster.pk]


def test_the_dispatch_task_runs_a_cycle_of_each_due_cluster(site) -> None:
    cluster, output, _ = site
    append(output, PROGRESS.format(n=1))
    assert dispatch_cycles.delay().get() == "1 cycles enqueued"
    assert SourceCursor.objects.get(source="job-files").last_success_at is not None


def test_a_job_that_falls_silent_after_a_link_of_its_node_went_down_hangs_because_of_it(
    tmp_path: Path,
) -> None:
    cluster, logs, node_logs = files_cluster(tmp_path, "fabric", node_logs=True)
    job = JobRecordFactory(job_id="9101", nodes=("gpu-node-001", "gpu-node-002"), start_time=T0)
    services.record_snapshot("controller:site", cluster, ClusterSnapshot(T0, (job,), ()))
    output = logs / "slurm-9101.out"
    for minute in range(5):
        append(output, PROGRESS.format(n=minute + 1))
        scan.scan_cluster(cluster, T0 + timedelta(minutes=minute))
    append(
        node_logs / "gpu-node-002.log",
        "Nov 29 12:05:10 gpu-node-002 kernel: mlx5_core 0000:5e:00.0: Port module event: "
        "module 0, Cable unplugged\n",
    )
    scan.scan_cluster(cluster, T0 + timedelta(minutes=6))
    assert not Anomaly.objects.exists()  # a link event alone fails nothing
    scan.scan_cluster(cluster, T0 + timedelta(hours=1))
    hang = Anomaly.objects.get()
    assert (hang.kind, hang.category, hang.implicated_hosts, hang.node_local) == (
        "hang",
        "interconnect_network",
        ["gpu-node-002"],
        True,
    )
    assert {e["signature"] for e in hang.evidence} >= {"ib_link_down", "progress"}


def test_a_kernel_error_after_a_job_ended_is_the_next_jobs_not_evidence_against_it(
    tmp_path: Path,
) -> None:
    cluster, logs, node_logs = files_cluster(tmp_path, "reuse", node_logs=True)
    nodes = ("gpu-node-001", "gpu-node-002")
    ended = T0 + timedelta(minutes=10)
    first = JobRecordFactory(
        job_id="9201",
        nodes=nodes,
        start_time=T0,
        state=JobState.FAILED,
        end_time=ended,
        exit_code=1,
    )
    second = JobRecordFactory(job_id="9202", nodes=nodes, start_time=ended + timedelta(minutes=1))
    services.record_snapshot(
        "controller:site",
        cluster,
        ClusterSnapshot(ended + timedelta(minutes=1), (first, second), ()),
    )
    append(
        node_logs / "gpu-node-002.log",
        "Nov 29 12:13:00 gpu-node-002 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, "
        "name=python3, GPU has fallen off the bus.\n",
    )
    scan.scan_cluster(cluster, T0 + timedelta(minutes=13, seconds=5))
    xid = Anomaly.objects.get(root_cause__startswith="nvrm_xid")
    assert (xid.attempt.job_id, xid.implicated_hosts) == ("9202", ["gpu-node-002"])
    assert not Anomaly.objects.filter(attempt__job_id="9201", root_cause__startswith="nvrm_xid")


def test_a_slowdown_after_one_nodes_link_flapped_names_that_node(tmp_path: Path) -> None:
    cluster, logs, node_logs = files_cluster(tmp_path, "degraded", node_logs=True)
    job = JobRecordFactory(job_id="9301", nodes=("gpu-node-001", "gpu-node-002"), start_time=T0)
    services.record_snapshot("controller:site", cluster, ClusterSnapshot(T0, (job,), ()))
    output = logs / "slurm-9301.out"
    step = (
        " iteration {n:8d}/  100000 | elapsed time per iteration (ms): {ms:.1f} | lm loss: 2.1 |\n"
    )
    append(output, "".join(step.format(n=n, ms=900.0) for n in range(1, 31)))
    scan.scan_cluster(cluster, T0 + timedelta(minutes=1))
    append(
        node_logs / "gpu-node-002.log",
        "Nov 29 12:01:10 gpu-node-002 kernel: mlx5_core 0000:5e:00.0 mlx5_3: Port: 1 Link DOWN\n"
        "Nov 29 12:01:13 gpu-node-002 kernel: mlx5_core 0000:5e:00.0 mlx5_3: Port: 1 Link ACTIVE\n",
    )
    append(output, "".join(step.format(n=n, ms=1400.0) for n in range(31, 41)))
    scan.scan_cluster(cluster, T0 + timedelta(minutes=2))
    slow = Anomaly.objects.get()
    assert (slow.kind, slow.category, slow.implicated_hosts, slow.node_local) == (
        "straggler",
        "straggler",
        ["gpu-node-002"],
        True,
    )
    assert "gpu-node-002" in slow.summary
    assert {e["signature"] for e in slow.evidence} >= {"ib_link_down", "throughput_drop"}


def test_a_slowdown_soon_after_start_up_is_dated_by_the_link_flap_and_put_on_its_node(
    tmp_path: Path,
) -> None:
    """Two reports at full speed are too few for a baseline window; the link event on one node
    says when the job slowed, and where."""
    cluster, logs, node_logs = files_cluster(tmp_path, "early", node_logs=True)
    job = JobRecordFactory(job_id="9302", nodes=("gpu-node-001", "gpu-node-002"), start_time=T0)
    services.record_snapshot("controller:site", cluster, ClusterSnapshot(T0, (job,), ()))
    output = logs / "slurm-9302.out"
    step = (
        " iteration {n:8d}/  100000 | elapsed time per iteration (ms): {ms:.1f} | lm loss: 2.1 |\n"
    )
    append(output, "".join(step.format(n=n, ms=900.0) for n in range(1, 3)))
    scan.scan_cluster(cluster, T0 + timedelta(minutes=1))
    append(
        node_logs / "gpu-node-001.log",
        "Nov 29 12:01:10 gpu-node-001 kernel: mlx5_core 0000:5e:00.0 mlx5_3: Port: 1 Link DOWN\n"
        "Nov 29 12:01:13 gpu-node-001 kernel: mlx5_core 0000:5e:00.0 mlx5_3: Port: 1 Link ACTIVE\n",
    )
    append(output, "".join(step.format(n=n, ms=1400.0) for n in range(3, 6)))
    scan.scan_cluster(cluster, T0 + timedelta(minutes=2))
    assert not Anomaly.objects.exists()  # three slow reports: not yet sustained
    append(output, "".join(step.format(n=n, ms=1400.0) for n in range(6, 9)))
    scan.scan_cluster(cluster, T0 + timedelta(minutes=3))
    slow = Anomaly.objects.get()
    assert (slow.kind, slow.implicated_hosts, slow.node_local) == (
        "straggler",
        ["gpu-node-001"],
        True,
    )
    assert "36%" in slow.summary and "gpu-node-001" in slow.summary


def test_a_requeued_attempt_slower_from_its_first_step_than_the_one_before_is_a_slowdown(
    site,
) -> None:
    cluster, output, job = site
    step = (
        " iteration {n:8d}/  100000 | elapsed time per iteration (ms): {ms:.1f} | lm loss: 2.1 |\n"
    )
    append(output, "".join(step.format(n=n, ms=900.0) for n in range(1, 31)))
    scan.scan_cluster(cluster, T0 + timedelta(minutes=1))
    requeued_at = T0 + timedelta(minutes=2)
    again = JobRecordFactory(
        job_id="9001", nodes=job.nodes, start_time=requeued_at, restart_count=1
    )
    services.record_snapshot("controller:site", cluster, ClusterSnapshot(requeued_at, (again,), ()))
    append(output, "".join(step.format(n=n, ms=1400.0) for n in range(31, 43)))
    scan.scan_cluster(cluster, requeued_at + timedelta(minutes=1))
    slow = Anomaly.objects.get()
    assert (slow.attempt.attempt_index, slow.kind) == (1, "straggler")
    assert "36%" in slow.summary  # 1/1.4 of the first attempt's throughput


def test_a_restart_that_hangs_before_its_first_step_is_found_on_its_workloads_start_up(
    site,
) -> None:
    """The first attempt reached its first step 40 s after it started: its restart, silent
    since it started, hangs after 3 x 40 s, not after the half-hour start-up grace."""
    cluster, output, job = site
    stamp = "2026-11-29T12:{m:02d}:{s:02d}Z"
    append(output, "".join(f"{stamp.format(m=0, s=39 + n)}{PROGRESS.format(n=n)}" for n in (1, 2)))
    scan.scan_cluster(cluster, T0 + timedelta(minutes=1))
    restarted_at = T0 + timedelta(minutes=5)
    again = JobRecordFactory(
        job_id="9001", nodes=job.nodes, start_time=restarted_at, restart_count=1
    )
    services.record_snapshot(
        "controller:site", cluster, ClusterSnapshot(restarted_at, (again,), ())
    )
    scan.scan_cluster(cluster, restarted_at + timedelta(seconds=115))
    assert not Anomaly.objects.exists()
    scan.scan_cluster(cluster, restarted_at + timedelta(seconds=125))
    hang = Anomaly.objects.get()
    assert (hang.attempt.attempt_index, hang.kind, hang.root_cause) == (
        1,
        "hang",
        "hang:no-progress",
    )
    assert "within 120 s of the start" in hang.summary, hang.summary


def test_a_first_attempt_has_the_whole_start_up_grace(site) -> None:
    cluster, _, _ = site
    scan.scan_cluster(cluster, T0 + timedelta(minutes=29))
    assert not Anomaly.objects.exists()
    scan.scan_cluster(cluster, T0 + timedelta(minutes=31))
    assert "within 1800 s of the start" in Anomaly.objects.get().summary


def test_a_job_whose_node_lost_its_link_before_its_first_step_hangs_a_minute_later(
    tmp_path: Path,
) -> None:
    """Not half an hour of start-up grace: a job still starting up when a link of one of its
    nodes goes down cannot get through its first collective."""
    cluster, logs, node_logs = files_cluster(tmp_path, "fabric", node_logs=True)
    job = JobRecordFactory(job_id="9102", nodes=("gpu-node-001", "gpu-node-002"), start_time=T0)
    services.record_snapshot("controller:site", cluster, ClusterSnapshot(T0, (job,), ()))
    append(logs / "slurm-9102.out", "[rank0]: loading the dataset\n")
    append(
        node_logs / "gpu-node-002.log",
        "2026-11-29T12:00:40+00:00 gpu-node-002 kernel: mlx5_core 0000:5e:00.0: Port module "
        "event: module 0, Cable unplugged\n",
    )
    scan.scan_cluster(cluster, T0 + timedelta(seconds=95))
    assert not Anomaly.objects.exists()
    scan.scan_cluster(cluster, T0 + timedelta(seconds=105))
    hang = Anomaly.objects.get()
    assert (hang.kind, hang.implicated_hosts, hang.node_local) == ("hang", ["gpu-node-002"], True)
    assert "60 s after an event on one of its nodes" in hang.summary, hang.summary


def test_a_job_that_stops_stepping_when_its_nodes_link_goes_down_hangs_two_steps_later(
    tmp_path: Path,
) -> None:
    """After healthy progress, no step since a link of one of its nodes went down is called at
    twice the job's step time after the event, not at five times it from the last step."""
    cluster, logs, node_logs = files_cluster(tmp_path, "fabric-running", node_logs=True)
    job = JobRecordFactory(job_id="9103", nodes=("gpu-node-001", "gpu-node-002"), start_time=T0)
    services.record_snapshot("controller:site", cluster, ClusterSnapshot(T0, (job,), ()))
    step = 40
    for n in range(1, 11):
        at = (T0 + timedelta(seconds=step * n)).isoformat()
        append(logs / "slurm-9103.out", f"{at} iteration {n:6d}/ 100000 | lm loss: 2.1 |\n")
    last = T0 + timedelta(seconds=step * 10)
    event = last + timedelta(seconds=5)
    append(
        node_logs / "gpu-node-002.log",
        f"{event.isoformat()} gpu-node-002 kernel: mlx5_core 0000:5e:00.0: Port module "
        "event: module 0, Cable unplugged\n",
    )
    scan.scan_cluster(cluster, event + timedelta(seconds=2 * step - 5))
    assert not Anomaly.objects.exists()
    scan.scan_cluster(cluster, event + timedelta(seconds=2 * step + 5))
    hang = Anomaly.objects.get()
    assert (hang.kind, hang.implicated_hosts, hang.node_local) == ("hang", ["gpu-node-002"], True)
    assert "80 s after an event on one of its nodes" in hang.summary, hang.summary
