"""One path through a real Celery worker on Redis: the task travels as JSON through the broker
and the worker writes to the same database the test reads."""

import pytest
from celery.contrib.testing.worker import start_worker
from django.conf import settings

from recovery_console.celery import app
from recovery_console.console import tasks
from recovery_console.fleet import services
from recovery_console.fleet.core.scheduler import ClusterSnapshot, snapshot_to_json
from recovery_console.fleet.models import Attempt
from tests.factories import JobRecordFactory


@pytest.mark.django_db(transaction=True)
def test_a_snapshot_task_runs_on_a_real_worker_through_redis() -> None:
    assert settings.CELERY_BROKER_URL.startswith("redis://"), "run with REDIS_URL (make test)"
    cluster = services.create_cluster("user:alice", "research")
    job = JobRecordFactory(job_id="4242", comment='{"workload": "bert-large"}')
    snapshot = ClusterSnapshot(taken_at=job.start_time, jobs=(job,), nodes=())
    app.conf.task_always_eager = False
    with start_worker(app, pool="solo", perform_ping_check=False, shutdown_timeout=10):
        result = tasks.record_snapshot.delay(cluster.pk, snapshot_to_json(snapshot), "test")
        summary = result.get(timeout=30)
    assert summary == "research: 1 new attempts, 0 changed, 0 nodes changed"
    assert Attempt.objects.get().workload.key == "bert-large"
