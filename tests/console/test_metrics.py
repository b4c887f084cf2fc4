"""``/metrics``: scraped over HTTP and parsed with Prometheus' own parser."""

from datetime import timedelta

import pytest
import time_machine
from django.test import Client
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from detection.models import SourceCursor
from fleet import services
from fleet.models import Cluster, ClusterMode
from recovery_console.console import reviews
from remediation.models import ControllerToken
from tests.factories import T0, AdviceFactory, UserFactory

pytestmark = pytest.mark.django_db


def scrape(client: Client | None = None, **headers) -> dict[str, dict]:
    response = (client or Client()).get("/metrics", **headers)
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain; version=")
    samples: dict[str, dict] = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            key = tuple(sorted(sample.labels.items()))
            samples.setdefault(sample.name, {})[key] = sample.value
    return samples


def labels(**values: str) -> tuple:
    return tuple(sorted(values.items()))


@pytest.fixture
def cluster():
    return services.create_cluster("user:root", "research")


def advice_on(cluster, **fields):
    return AdviceFactory(anomaly__attempt__workload__cluster=cluster, **fields)


def test_anomalies_are_counted_by_kind_and_category_per_cluster(cluster) -> None:
    advice_on(cluster)
    advice_on(cluster, anomaly__state="resolved")
    advice_on(cluster, anomaly__kind="hang", anomaly__category="nccl_timeout_hang")
    metrics = scrape()
    xid = labels(cluster="research", kind="crash", category="gpu_hardware")
    hang = labels(cluster="research", kind="hang", category="nccl_timeout_hang")
    assert metrics["recovery_console_anomalies_total"] == {xid: 2.0, hang: 1.0}
    assert metrics["recovery_console_open_anomalies"] == {xid: 1.0, hang: 1.0}


def test_advice_is_counted_by_action_and_state(cluster) -> None:
    advice_on(cluster)
    advice_on(cluster, action="stop", state="executed", executed_at=T0 + timedelta(seconds=20))
    metrics = scrape()
    assert metrics["recovery_console_advice"] == {
        labels(cluster="research", action="restart_excluding_node", state="proposed"): 1.0,
        labels(cluster="research", action="stop", state="executed"): 1.0,
    }
    assert metrics["recovery_console_advice_awaiting_review"] == {labels(cluster="research"): 2.0}


def test_detection_latency_is_a_histogram(cluster) -> None:
    advice_on(cluster)  # detected 4 s after its first evidence
    advice_on(cluster, anomaly__detected_at=T0 + timedelta(seconds=40))
    metrics = scrape()
    buckets = metrics["recovery_console_detection_latency_seconds_bucket"]

    def le(bound: str) -> float:
        return buckets[labels(cluster="research", le=bound)]

    assert (le("2.0"), le("5.0"), le("30.0"), le("60.0"), le("+Inf")) == (0, 1, 1, 2, 2)
    assert metrics["recovery_console_detection_latency_seconds_count"] == {
        labels(cluster="research"): 2.0
    }
    assert metrics["recovery_console_detection_latency_seconds_sum"] == {
        labels(cluster="research"): 44.0
    }


def test_action_latency_counts_executed_advice_only(cluster) -> None:
    advice_on(cluster)  # proposed: not acted on
    advice_on(cluster, state="executed", executed_at=T0 + timedelta(seconds=4 + 25))
    metrics = scrape()
    buckets = metrics["recovery_console_action_latency_seconds_bucket"]
    assert buckets[labels(cluster="research", le="15.0")] == 0
    assert buckets[labels(cluster="research", le="30.0")] == 1
    assert metrics["recovery_console_action_latency_seconds_sum"] == {
        labels(cluster="research"): 25.0
    }


def test_source_health_and_controller_heartbeats_are_exported(cluster) -> None:
    now = timezone.now()
    SourceCursor.objects.create(cluster=cluster, source="logs", healthy=True, last_success_at=now)
    SourceCursor.objects.create(cluster=cluster, source="metrics", healthy=False)
    ControllerToken.objects.create(
        cluster=cluster,
        name="c1",
        digest="a" * 64,
        created_at=now,
        last_heartbeat_at=now - timedelta(seconds=90),
        last_snapshot_at=now - timedelta(seconds=95),
        heartbeat={"role": "controller", "controller_version": "1.0", "transport": "ssh"},
        silent_since=now - timedelta(seconds=20),
    )
    ControllerToken.objects.create(
        cluster=cluster,
        name="w1",
        digest="c" * 64,
        created_at=now,
        last_heartbeat_at=now - timedelta(seconds=2),
        heartbeat={"role": "watchdog", "last_error": "console: connection refused"},
    )
    # Issued, never started: no series, rather than an age of +Inf that pages someone.
    ControllerToken.objects.create(cluster=cluster, name="c2", digest="b" * 64, created_at=now)
    with time_machine.travel(now, tick=False):
        metrics = scrape()
    assert metrics["recovery_console_source_healthy"] == {
        labels(cluster="research", source="logs"): 1.0,
        labels(cluster="research", source="metrics"): 0.0,
    }
    assert metrics["recovery_console_source_last_success_timestamp_seconds"] == {
        labels(cluster="research", source="logs"): pytest.approx(now.timestamp())
    }
    c1 = labels(cluster="research", controller="c1", role="controller")
    w1 = labels(cluster="research", controller="w1", role="watchdog")
    assert metrics["recovery_console_controller_heartbeat_age_seconds"] == {
        c1: pytest.approx(90.0),
        w1: pytest.approx(2.0),
    }
    assert metrics["recovery_console_controller_last_snapshot_timestamp_seconds"] == {
        c1: pytest.approx((now - timedelta(seconds=95)).timestamp())
    }
    assert metrics["recovery_console_controller_silent"] == {c1: 1.0, w1: 0.0}
    assert metrics["recovery_console_controller_failing"] == {c1: 0.0, w1: 1.0}
    info = metrics["recovery_console_controller_info"]
    assert info[labels(**dict(c1), version="1.0", transport="ssh")] == 1.0


def test_a_sharded_source_is_one_series_as_healthy_and_recent_as_its_worst_shard(cluster) -> None:
    now = timezone.now()
    for shard, healthy, ago in ((0, True, 5), (1, False, 60), (2, True, 10)):
        SourceCursor.objects.create(
            cluster=cluster,
            source="logs",
            shard=shard,
            healthy=healthy,
            last_success_at=now - timedelta(seconds=ago),
        )
    metrics = scrape()
    assert metrics["recovery_console_source_healthy"] == {
        labels(cluster="research", source="logs"): 0.0
    }
    assert metrics["recovery_console_source_last_success_timestamp_seconds"] == {
        labels(cluster="research", source="logs"): pytest.approx(now.timestamp() - 60)
    }


def test_the_mode_and_the_agreement_are_exported(cluster) -> None:
    Cluster.objects.filter(pk=cluster.pk).update(mode=ClusterMode.ACTION)
    other = services.create_cluster("user:root", "other")
    rita = UserFactory(username="rita", roles=["reviewer"])
    reviews.label_advice(rita, advice_on(other), agrees=True)
    reviews.label_advice(rita, advice_on(other), agrees=False, preferred_action="stop")
    metrics = scrape()
    assert metrics["recovery_console_cluster_action_mode"] == {
        labels(cluster="research"): 1.0,
        labels(cluster="other"): 0.0,
    }
    assert metrics["recovery_console_review_agreement_ratio"] == {labels(cluster="other"): 0.5}
    assert metrics["recovery_console_review_labelled_advice"][labels(cluster="other")] == 2.0


def test_an_empty_console_scrapes_cleanly() -> None:
    metrics = scrape()
    assert metrics.get("recovery_console_anomalies_total", {}) == {}


def test_a_metrics_token_when_set_is_required(cluster, settings) -> None:
    settings.METRICS_TOKEN = "s3cret"
    refused = Client().get("/metrics")
    assert refused.status_code == 401
    assert refused["WWW-Authenticate"] == "Bearer"
    wrong = Client().get("/metrics", HTTP_AUTHORIZATION="Bearer nope")
    assert wrong.status_code == 401
    metrics = scrape(HTTP_AUTHORIZATION="Bearer s3cret")
    assert labels(cluster="research") in metrics["recovery_console_cluster_action_mode"]


def test_the_oldest_advice_in_flight_shows_how_long_it_has_waited(cluster) -> None:
    now = timezone.now()
    advice_on(cluster, state="claimed", updated_at=now - timedelta(minutes=15))
    advice_on(cluster, state="dispatched", updated_at=now - timedelta(minutes=2))
    advice_on(cluster, state="executed", updated_at=now - timedelta(hours=3))
    with time_machine.travel(now, tick=False):
        metrics = scrape()
    assert metrics["recovery_console_advice_in_flight_oldest_age_seconds"] == {
        labels(cluster="research"): 900.0
    }
