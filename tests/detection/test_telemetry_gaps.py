"""A telemetry source that goes down or quiet is a gap of the source, not a hang of every job
it feeds: one gap is reported, and hang and slowdown verdicts wait until the source is back."""

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from detection import scan
from detection.models import Anomaly, TelemetryGap
from fleet import services
from fleet.core.scheduler import ClusterSnapshot
from fleet.models import AuditEntry
from recovery_console.console.notifications.delivery import events_of
from tests.detection.sites import files_cluster
from tests.factories import JobRecordFactory

pytestmark = pytest.mark.django_db
T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
PROGRESS = " iteration {n:8d}/  100000 | elapsed time per iteration (ms): 900.0 | lm loss: 2.1 |\n"
JOBS = ("7001", "7002", "7003")


@pytest.fixture
def site(tmp_path: Path):
    cluster, logs, _ = files_cluster(tmp_path)
    jobs = tuple(
        JobRecordFactory(job_id=job, nodes=(f"gpu-node-0{i}",), start_time=T0)
        for i, job in enumerate(JOBS)
    )
    services.record_snapshot("controller:site", cluster, ClusterSnapshot(T0, jobs, ()))
    return cluster, logs


def progress(logs: Path, job: str, step: int) -> None:
    with (logs / f"slurm-{job}.out").open("a") as handle:
        handle.write(PROGRESS.format(n=step))


def scan_every_minute(cluster, start: datetime, minutes: int, logs: Path, writing=()) -> None:
    for minute in range(1, minutes + 1):
        for job in writing:
            progress(logs, job, 1000 + minute)
        scan.scan_cluster(cluster, start + timedelta(minutes=minute))


def started(cluster, logs: Path) -> datetime:
    """Every job has made progress for ten minutes, once a minute."""
    for minute in range(10):
        for job in JOBS:
            progress(logs, job, minute + 1)
        scan.scan_cluster(cluster, T0 + timedelta(minutes=minute))
    return T0 + timedelta(minutes=9)


def test_an_unreachable_log_source_is_one_gap_and_no_job_is_called_hung(site) -> None:
    cluster, logs = site
    at = started(cluster, logs)
    moved = logs.rename(logs.with_name("moved"))
    scan_every_minute(cluster, at, 60, logs)
    assert not Anomaly.objects.exists()
    gap = TelemetryGap.objects.get()
    assert (gap.source, gap.ended_at, gap.suspended_jobs) == ("job-files", None, 3)
    assert gap.reason.startswith("unreachable")
    opened = AuditEntry.objects.filter(verb="telemetry.gap_opened")
    assert opened.count() == 1
    assert events_of(opened.get().verb, opened.get().payload) == ["telemetry_gap"]
    moved.rename(logs)
    back = at + timedelta(minutes=61)
    scan_every_minute(cluster, back, 2, logs, writing=JOBS)
    gap.refresh_from_db()
    assert gap.ended_at is not None
    assert AuditEntry.objects.filter(verb="telemetry.gap_closed").count() == 1
    assert not Anomaly.objects.exists()


def test_a_silent_source_is_a_gap_when_several_jobs_fall_silent_at_once(site) -> None:
    cluster, logs = site
    at = started(cluster, logs)
    scan_every_minute(cluster, at, 60, logs)  # nobody writes a line for an hour
    assert not Anomaly.objects.exists()
    gap = TelemetryGap.objects.get()
    assert gap.reason.startswith("silent") and gap.ended_at is None


def test_one_job_falling_silent_among_busy_ones_is_a_hang_not_a_gap(site) -> None:
    cluster, logs = site
    at = started(cluster, logs)
    scan_every_minute(cluster, at, 10, logs, writing=JOBS[:2])
    assert not TelemetryGap.objects.exists()
    hung = Anomaly.objects.get()
    assert (hung.attempt.job_id, hung.kind) == (JOBS[2], "hang")


def test_after_a_gap_a_job_that_stays_silent_is_found_counting_from_the_gap_end(site) -> None:
    cluster, logs = site
    at = started(cluster, logs)
    moved = logs.rename(logs.with_name("moved"))
    scan_every_minute(cluster, at, 30, logs)
    moved.rename(logs)
    back = at + timedelta(minutes=30)
    # Two jobs come back; the third hung during the gap. Its silence counts from the gap's
    # end, so it is not called hung at once, but within the allowed silence after it.
    scan_every_minute(cluster, back, 2, logs, writing=JOBS[:2])
    assert not Anomaly.objects.exists()
    scan_every_minute(cluster, back + timedelta(minutes=2), 8, logs, writing=JOBS[:2])
    hung = Anomaly.objects.get()
    assert (hung.attempt.job_id, hung.kind) == (JOBS[2], "hang")
    # Five times its one-minute step: the silence it is allowed, counted from the gap's end.
    assert hung.detected_at - TelemetryGap.objects.get().ended_at > timedelta(minutes=5)


def test_the_cluster_page_shows_an_open_gap(site, client, django_user_model) -> None:
    cluster, logs = site
    at = started(cluster, logs)
    logs.rename(logs.with_name("moved"))
    scan_every_minute(cluster, at, 2, logs)
    client.force_login(django_user_model.objects.create_superuser("root", "r@x.org", "pw"))
    page = client.get(f"/clusters/{cluster.name}/").content.decode()
    assert 'data-telemetry-gap="job-files"' in page
    assert "Hang and slowdown verdicts wait for it (3 running jobs)" in page


def test_metrics_say_which_source_is_in_a_gap(site, client) -> None:
    cluster, logs = site
    at = started(cluster, logs)
    logs.rename(logs.with_name("moved"))
    scan_every_minute(cluster, at, 2, logs)
    exposition = client.get("/metrics").content.decode()
    gap = 'recovery_console_telemetry_gap_open{cluster="site",source="job-files"} 1.0'
    assert gap in exposition


def test_rest_clients_read_the_gaps(site, django_user_model) -> None:
    from rest_framework.test import APIClient

    cluster, logs = site
    at = started(cluster, logs)
    logs.rename(logs.with_name("moved"))
    scan_every_minute(cluster, at, 2, logs)
    api = APIClient()
    api.force_authenticate(django_user_model.objects.create_superuser("root", "r@x.org", "pw"))
    body = api.get("/api/v1/telemetry-gaps/", {"cluster": "site", "open": "true"}).json()
    (gap,) = body["results"]
    assert (gap["source"], gap["ended_at"], gap["suspended_jobs"]) == ("job-files", None, 3)
