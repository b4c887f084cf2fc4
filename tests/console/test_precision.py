"""Measured precision: of the advice reviewers labelled, per category, action and rule, the
share they agreed with; on the cluster page, the review queue, /metrics and the API."""

from datetime import UTC, datetime

import pytest
import time_machine
from django.test import Client

from fleet import services
from recovery_console.console import reviews
from tests.factories import AdviceFactory, UserFactory

pytestmark = pytest.mark.django_db
NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


@pytest.fixture(autouse=True)
def frozen_time():
    with time_machine.travel(NOW, tick=False):
        yield


@pytest.fixture
def cluster():
    return services.create_cluster("user:admin", "research")


@pytest.fixture
def labelled(cluster):
    """Three exclusions (one disputed) and two stops (both agreed with)."""
    rita = UserFactory(username="rita", roles=["reviewer", "viewer"])
    sam = UserFactory(username="sam", roles=["reviewer"])

    def advice(**fields):
        return AdviceFactory(anomaly__attempt__workload__cluster=cluster, **fields)

    for n in range(3):
        excluded = advice(rule="node_local")
        reviews.label_advice(rita, excluded, agrees=True)
        if n == 0:
            # One dissent makes it a disagreement, as in the agreement that gates action mode.
            reviews.label_advice(sam, excluded, agrees=False, preferred_action="restart")
    for _ in range(2):
        stop = advice(action="stop", category="cuda_oom", rule="cuda_oom", exclude_nodes=[])
        reviews.label_advice(rita, stop, agrees=True)
    advice(rule="node_local")  # never labelled: not counted
    return rita


def rows(cluster) -> dict[tuple[str, str], tuple[int, int]]:
    return {(r.dimension, r.value): (r.agreed, r.labelled) for r in reviews.precision(cluster)}


def test_precision_is_counted_per_category_action_and_rule(cluster, labelled) -> None:
    assert rows(cluster) == {
        ("category", "cuda_oom"): (2, 2),
        ("category", "gpu_hardware"): (2, 3),
        ("action", "restart_excluding_node"): (2, 3),
        ("action", "stop"): (2, 2),
        ("rule", "cuda_oom"): (2, 2),
        ("rule", "node_local"): (2, 3),
    }


def test_the_api_gives_each_rows_precision(cluster, labelled) -> None:
    client = Client()
    client.force_login(labelled)
    body = client.get("/api/v1/clusters/research/precision/").json()
    found = {(r["dimension"], r["value"]): r["precision"] for r in body["rows"]}
    assert found[("rule", "node_local")] == pytest.approx(2 / 3)
    assert found[("action", "stop")] == 1.0
    assert body["window_days"] == 28


def test_metrics_export_precision_and_the_labelled_count(cluster, labelled) -> None:
    body = Client().get("/metrics").content.decode()
    assert (
        'recovery_console_advice_precision_ratio{by="rule",cluster="research",value="node_local"}'
        " 0.6666666666666666" in body
    )
    assert (
        'recovery_console_advice_labelled{by="action",cluster="research",value="stop"} 2.0' in body
    )


def test_the_cluster_page_and_the_review_queue_show_it(cluster, labelled) -> None:
    client = Client()
    client.force_login(labelled)
    for path in ("/clusters/research/", "/reviews/"):
        page = client.get(path).content.decode()
        assert 'data-dimension="rule"' in page, path
        assert 'data-value="node_local"' in page and "66.7%" in page, path
