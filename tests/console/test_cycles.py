"""Fairness between clusters: a busy cluster's cycles neither pile up in the queue nor hold a
worker past their time budget."""

import json
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import redis
from django.conf import settings
from django.core.cache import cache

from detection import scan
from detection.core.config import InvalidDetectorSettings
from detection.core.telemetry import LogLine
from detection.models import DetectionSettings
from detection.sources.config import ClusterSources
from detection.sources.memory import MemoryLogSource
from fleet import services
from recovery_console.celery import app
from recovery_console.console.tasks import cycle_lease, dispatch_cycles, run_cycle
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
    names = ("recovery_console.run_cycle", "recovery_console.dispatch_cycles")
    app.conf.task_routes = {name: {"queue": queue} for name in names}
    app.conf.task_always_eager = False
    reroute()
    broker = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    try:
        yield Queue(broker, queue)
    finally:
        broker.delete(queue, f"_kombu.binding.{queue}", f"_kombu.binding_permanent.{queue}")
        app.conf.task_routes = None
        reroute()


@dataclass
class Queue:
    broker: redis.Redis
    name: str

    def __call__(self) -> int:
        return int(self.broker.llen(self.name))

    def headers(self) -> list[dict[str, Any]]:
        return [json.loads(m)["headers"] for m in self.broker.lrange(self.name, 0, -1)]


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
    # Written past the settings' validation, as a bug would: the scan raises.
    DetectionSettings.objects.filter(cluster=busy).update(progress_pattern="(unclosed")
    with pytest.raises(InvalidDetectorSettings):
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


def test_a_dispatch_that_waited_behind_busy_workers_is_dropped(cycle_queue) -> None:
    sent = datetime.now(UTC)
    dispatch_cycles.apply_async()  # as beat sends it, every second
    [headers] = cycle_queue.headers()
    assert headers["task"] == "recovery_console.dispatch_cycles"
    expires = datetime.fromisoformat(headers["expires"])
    assert 0 < (expires - sent).total_seconds() <= 6
