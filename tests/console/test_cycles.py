"""Fairness between clusters: a busy cluster's cycles neither pile up in the queue nor hold a
worker past their time budget."""

import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest
import redis
from django.conf import settings
from django.core.cache import cache

from detection import scan
from detection.core.telemetry import LogLine
from detection.models import DetectionSettings
from detection.sources.config import ClusterSources
from detection.sources.memory import MemoryLogSource
from recovery_console.celery import app
from recovery_console.console.tasks import cycle_lease, dispatch_cycles, run_cycle
from recovery_console.fleet import services
from recovery_console.fleet.models import Cluster
from tests.console.test_notifications import reroute

pytestmark = pytest.mark.django_db
T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


@pytest.fixture
def busy(tmp_path: Path):
    return services.create_cluster(
        "user:alice",
        "busy",
        telemetry={"logs": {"type": "files", "path": str(tmp_path)}, "metrics": {"type": "none"}},
        scheduler={"backend": "slurm"},
    )


@pytest.fixture
def cycle_queue():
    """Cycles go to a queue of this test's own on the real broker (nothing consumes it)."""
    assert settings.CELERY_BROKER_URL.startswith("redis://"), "run with REDIS_URL (make test)"
    queue = f"cycles-{uuid.uuid4().hex}"
    app.conf.task_routes, app.conf.task_always_eager = (
        {"recovery_console.run_cycle": {"queue": queue}},
        False,
    )
    reroute()
    broker = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    try:
        yield lambda: broker.llen(queue)
    finally:
        broker.delete(queue)
        app.conf.task_routes = None
        reroute()


def fall_due(cluster) -> None:
    """The cluster's poll interval elapsed (as it does every few seconds)."""
    DetectionSettings.objects.filter(cluster=cluster).update(next_scan_at=None)


def test_a_cluster_has_one_cycle_queued_however_often_it_falls_due(busy, cycle_queue) -> None:
    for _ in range(5):
        fall_due(busy)
        dispatch_cycles()
    assert cycle_queue() == 1
    run_cycle(busy.pk)  # what the worker does with it; once it is over, the next may be queued
    fall_due(busy)
    assert dispatch_cycles() == "1 cycles enqueued"
    assert cycle_queue() == 2


def test_a_cycle_that_fails_gives_its_lease_back(busy, cycle_queue) -> None:
    fall_due(busy)
    dispatch_cycles()
    assert cache.get(cycle_lease(busy.pk)) == "queued"
    # Written past the API's validation, as a bug would: the scan raises.
    Cluster.objects.filter(pk=busy.pk).update(telemetry={"logs": {"type": "kafka"}})
    with pytest.raises(ValueError, match="unknown log source type"):
        run_cycle(busy.pk)
    assert cache.get(cycle_lease(busy.pk)) is None


def test_past_its_budget_a_scan_stops_reading_and_carries_on_next_cycle(busy) -> None:
    source = MemoryLogSource(batch=2)
    source.push(LogLine(at=T0, text=f"line {n}\n", job_id="1") for n in range(10))
    sources = ClusterSources(logs={"memory": source})
    spent = scan.scan_cluster(busy, T0, sources, deadline=time.monotonic())
    assert (spent.lines, spent.out_of_time) == (2, True)
    assert "time budget spent" in str(spent)
    rest = scan.scan_cluster(busy, T0, sources)
    assert (rest.lines, rest.out_of_time) == (8, False)
