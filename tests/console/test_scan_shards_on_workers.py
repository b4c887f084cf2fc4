"""A cluster's scan split into shards runs on two real Celery workers at once (different host
names, one MariaDB and one Redis): each worker takes some of the shards, every workload is
checked exactly once per cycle, and every line still reaches its attempt exactly once, with
every shard's cursor at the end of what was written."""

import re
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone
from kombu import Connection

from detection import scan
from detection import services as detection
from detection.models import AttemptMonitor, SourceCursor
from fleet import services
from fleet.core.scheduler import ClusterSnapshot
from recovery_console.console import tasks
from tests.console.test_celery_worker import RedisServer, broker, running_worker, wait_for
from tests.factories import JobRecordFactory

__all__ = ["broker"]  # the fixture, used by name
SHARDS = 4
JOBS = 24
ROUNDS = 6
PROGRESS = " iteration {n:8d}/  100000 | elapsed time per iteration (ms): 900.0 | lm loss: 2.1 |\n"


def write_progress(logs: Path, job_id: str, first: int, count: int) -> None:
    with (logs / f"slurm-{job_id}.out").open("a") as handle:
        handle.write("".join(PROGRESS.format(n=n) for n in range(first, first + count)))


def send_shards(broker: RedisServer, cluster_id: int) -> None:
    """What ``dispatch_cycles`` enqueues for a cluster of SHARDS shards."""
    with Connection(broker.url) as conn:
        tasks.run_cycle.apply_async((cluster_id,), connection=conn)
        for shard in range(1, SHARDS):
            tasks.run_scan_shard.apply_async((cluster_id, shard), connection=conn)


def shards_run_by(log: Path) -> set[int]:
    """The shards a worker's log says it scanned (shard 0 is the cycle's own)."""
    text = log.read_text()
    ran = {int(n) for n in re.findall(r"run_scan_shard\[[^\]]+\] succeeded .* shard (\d+):", text)}
    return ran | ({0} if re.search(r"run_cycle\[[^\]]+\] succeeded", text) else set())


def attempts_checked(logs: list[Path]) -> int:
    """Running attempts the shards' scans checked, over every task the workers finished."""
    return sum(
        int(n)
        for log in logs
        for n in re.findall(r"\] succeeded .* (\d+) running attempts checked", log.read_text())
    )


def finished(logs: list[Path], rounds: int) -> bool:
    pattern = r"(run_cycle|run_scan_shard)\[[^\]]+\] succeeded"
    done = sum(len(re.findall(pattern, log.read_text())) for log in logs)
    return done >= rounds * SHARDS


@pytest.mark.django_db(transaction=True)
def test_two_workers_share_a_clusters_shards_and_read_every_line_once(
    broker: RedisServer, tmp_path: Path
) -> None:
    logs = tmp_path / "slurm-logs"
    logs.mkdir()
    cluster = services.create_cluster(
        "user:alice",
        "big",
        telemetry={"logs": {"type": "files", "path": str(logs)}, "metrics": {"type": "none"}},
        scheduler={"backend": "slurm"},
    )
    detection.update_detection_settings("user:alice", cluster, scan_shards=SHARDS)
    started = timezone.now() - timedelta(minutes=5)
    jobs = [JobRecordFactory(job_id=str(7000 + n), start_time=started) for n in range(JOBS)]
    services.record_snapshot("controller:big", cluster, ClusterSnapshot(started, tuple(jobs), ()))
    assert {scan.Shard(0, SHARDS).owns(j.job_id) for j in jobs} == {True, False}
    written = dict.fromkeys((j.job_id for j in jobs), 0)
    worker_logs = [tmp_path / "worker-a.log", tmp_path / "worker-b.log"]
    with (
        running_worker(broker, worker_logs[0], "a"),
        running_worker(broker, worker_logs[1], "b"),
    ):
        for round_number in range(1, ROUNDS + 1):
            for n, job_id in enumerate(written):
                count = 1 + (n + round_number) % 3
                write_progress(logs, job_id, written[job_id] + 1, count)
                written[job_id] += count
            send_shards(broker, cluster.pk)
            wait_for(lambda: finished(worker_logs, round_number), "the shards did not finish")  # noqa: B023
            # Every workload checked exactly once per cycle: by its own shard, on one worker.
            assert attempts_checked(worker_logs) == round_number * JOBS

    ran = [shards_run_by(log) for log in worker_logs]
    assert ran[0] and ran[1], f"one worker did all the work: {ran}"
    assert ran[0] | ran[1] == set(range(SHARDS))
    text = "".join(log.read_text() for log in worker_logs)
    assert "skipped" not in text  # no shard met another run of itself
    runs = re.findall(r"(?:run_cycle|run_scan_shard)\[[^\]]+\] succeeded", text)
    assert len(runs) == ROUNDS * SHARDS  # each shard once a cycle, never twice
    monitors = {m.attempt.job_id: m for m in AttemptMonitor.objects.select_related("attempt")}
    assert {job: (m.lines_seen, m.last_step) for job, m in monitors.items()} == {
        job: (count, count) for job, count in written.items()
    }
    cursors = SourceCursor.objects.filter(cluster=cluster, source="job-files")
    assert sorted(cursors.values_list("shard", flat=True)) == list(range(SHARDS))
    # Every shard read to the end of every file: they stand at one place, with nothing left.
    assert len({str(row.cursor) for row in cursors}) == 1
    for shard in range(SHARDS):
        assert scan.scan_cluster(cluster, timezone.now(), shard=shard).lines == 0
