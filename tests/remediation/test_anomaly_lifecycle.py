"""An anomaly closes when its interruption is over: a later attempt of the workload ran healthy
(got past where the failed one was, or ran ten minutes without an interruption), or the
workload was stopped or completed. A workload stopped on advice says why."""

from datetime import timedelta

import pytest
from django.utils import timezone

from detection.anomalies import resolve_settled
from detection.models import Anomaly, AttemptMonitor
from fleet import services as fleet
from fleet.core.scheduler import ClusterSnapshot, JobState
from fleet.models import AuditEntry, ClusterMode, Workload
from remediation import services
from remediation.models import Advice
from tests.factories import JobRecordFactory
from tests.remediation.conftest import T0, anomaly_on, running_attempt

pytestmark = pytest.mark.django_db


def failed_then_restarted(cluster, failed_step=900):
    first = running_attempt(cluster)
    anomaly = anomaly_on(first)
    AttemptMonitor.objects.create(attempt=first, last_step=failed_step)
    second = running_attempt(cluster, restart=1)
    return anomaly, second


def open_count(cluster) -> int:
    return Anomaly.objects.filter(cluster=cluster, state="open").count()


def test_an_anomaly_resolves_when_the_next_attempt_gets_past_the_failure(cluster) -> None:
    anomaly, second = failed_then_restarted(cluster)
    monitor = AttemptMonitor.objects.create(attempt=second, last_step=850)
    assert resolve_settled(cluster.pk, T0 + timedelta(minutes=1)) == 0
    assert open_count(cluster) == 1
    monitor.last_step = 1000
    monitor.save()
    assert resolve_settled(cluster.pk, T0 + timedelta(minutes=2)) == 1
    anomaly.refresh_from_db()
    assert (anomaly.state, anomaly.outcome) == ("resolved", "recovered")
    assert anomaly.resolution == "job 100#1 reached step 1,000, past step 900 where it failed"
    assert anomaly.resolved_at == T0 + timedelta(minutes=2)
    assert open_count(cluster) == 0
    entry = AuditEntry.objects.get(verb="anomaly.resolved")
    assert entry.payload["outcome"] == "recovered" and entry.attempt_id == anomaly.attempt_id
    assert resolve_settled(cluster.pk, T0 + timedelta(minutes=3)) == 0  # once


def test_an_anomaly_resolves_after_the_next_attempt_ran_ten_minutes_without_one(cluster) -> None:
    anomaly, _ = failed_then_restarted(cluster)
    assert resolve_settled(cluster.pk, T0 + timedelta(minutes=9)) == 0
    assert resolve_settled(cluster.pk, T0 + timedelta(minutes=10)) == 1
    anomaly.refresh_from_db()
    assert anomaly.outcome == "recovered" and "ran 10 min" in anomaly.resolution


def test_an_anomaly_stays_open_while_the_next_attempt_fails_too(cluster) -> None:
    anomaly, second = failed_then_restarted(cluster)
    anomaly_on(second, at=T0 + timedelta(minutes=1))
    assert resolve_settled(cluster.pk, T0 + timedelta(hours=1)) == 0
    assert open_count(cluster) == 2
    # The third attempt runs healthy: both interruptions are over.
    running_attempt(cluster, restart=2)
    assert resolve_settled(cluster.pk, T0 + timedelta(hours=2)) == 2


def stop_on_advice(cluster):
    cluster.mode = ClusterMode.ACTION
    cluster.save()
    attempt = running_attempt(cluster)
    anomaly = anomaly_on(
        attempt,
        category="cuda_oom",
        attribution="application",
        hosts=(),
        root_cause="cuda_oom",
        node_local=False,
    )
    services.advise_cluster(cluster, T0)
    advice = Advice.objects.get()
    assert advice.action == "stop"
    controller = services.issue_controller_token("user:alice", cluster, "ctl").token
    services.reconcile(controller, advice.pk, 1, "converged", "cancelled")
    return anomaly, advice


def test_a_workload_stopped_on_advice_says_why_and_its_anomaly_closes(cluster) -> None:
    anomaly, advice = stop_on_advice(cluster)
    workload = Workload.objects.get(pk=anomaly.workload_id)
    assert workload.state == "stopped"
    assert workload.state_text == f"Stopped: {advice.reasons[0]}"
    assert "CUDA out-of-memory" in workload.state_text
    assert AuditEntry.objects.filter(verb="workload.stopped").count() == 1
    assert resolve_settled(cluster.pk, T0 + timedelta(seconds=5)) == 1
    anomaly.refresh_from_db()
    assert (anomaly.outcome, anomaly.resolution) == ("stopped", advice.reasons[0])


def test_the_stopped_run_reported_again_stays_stopped_and_a_resubmission_starts_afresh(
    cluster,
) -> None:
    anomaly, _ = stop_on_advice(cluster)
    ended = JobRecordFactory(
        job_id="100", nodes=("n1", "n2"), comment='{"workload": "llama"}', state=JobState.FAILED
    )
    later = T0 + timedelta(seconds=30)
    fleet.record_snapshot("test", cluster, ClusterSnapshot(later, (ended,), ()))
    workload = Workload.objects.get(pk=anomaly.workload_id)
    assert workload.state == "stopped" and workload.stopped_reason
    again = JobRecordFactory(job_id="200", nodes=("n3",), comment='{"workload": "llama"}')
    fleet.record_snapshot(
        # Seen after the stop (which the controller's report stamped with the real time).
        "test",
        cluster,
        ClusterSnapshot(timezone.now() + timedelta(minutes=1), (again,), ()),
    )
    workload.refresh_from_db()
    assert (workload.state, workload.stopped_reason, workload.stopped_at) == ("running", "", None)
    assert workload.state_text == "Running"


def test_the_workload_pages_count_only_open_anomalies(cluster, client) -> None:
    from tests.factories import UserFactory

    anomaly, second = failed_then_restarted(cluster)
    AttemptMonitor.objects.create(attempt=second, last_step=1000)
    client.force_login(UserFactory(roles=["viewer"]))
    row = client.get("/workloads/").content.decode()
    assert '<td class="num">1</td>\n      <td>' in row
    resolve_settled(cluster.pk, T0 + timedelta(minutes=1))
    row = client.get("/workloads/").content.decode()
    assert '<td class="num">0</td>\n      <td>' in row
    page = client.get(f"/workloads/{anomaly.workload_id}/").content.decode()
    assert 'title="job 100#1 reached step 1,000, past step 900 where it failed">recovered' in page


def test_another_cancelled_job_of_the_same_name_does_not_close_this_one(cluster) -> None:
    # A cancelled run still in the queue, seen in the same snapshot as the one that failed.
    old = JobRecordFactory(
        job_id="90", comment='{"workload": "llama"}', state=JobState.CANCELLED, restart_count=1
    )
    new = JobRecordFactory(job_id="100", nodes=("n1", "n2"), comment='{"workload": "llama"}')
    fleet.record_snapshot("test", cluster, ClusterSnapshot(T0, (old, new), ()))
    anomaly = anomaly_on(Workload.objects.get(key="llama").attempts.get(job_id="100"))
    assert resolve_settled(cluster.pk, T0 + timedelta(minutes=1)) == 0
    # Its own job cancelled: the run was stopped.
    cancelled = JobRecordFactory(
        job_id="100", nodes=("n1", "n2"), comment='{"workload": "llama"}', state=JobState.CANCELLED
    )
    fleet.record_snapshot(
        "test", cluster, ClusterSnapshot(T0 + timedelta(minutes=2), (cancelled,), ())
    )
    assert resolve_settled(cluster.pk, T0 + timedelta(minutes=3)) == 1
    anomaly.refresh_from_db()
    assert (anomaly.outcome, anomaly.resolution) == ("stopped", "job 100#0 was cancelled")
