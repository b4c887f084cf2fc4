from datetime import UTC, datetime

import pytest
from django.test import Client

from detection.telemetry import ClusterSnapshot, JobState, NodeRecord, NodeState
from recovery_console import services
from tests.factories import JobRecordFactory

pytestmark = pytest.mark.django_db
T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


@pytest.fixture
def cluster():
    cluster = services.create_cluster("user:alice", "research")
    failed = JobRecordFactory(
        job_id="81", name="llama", state=JobState.NODE_FAIL, reason="NodeFail", end_time=T0
    )
    node = NodeRecord("gpu-node-001", NodeState.DOWN, reason="Not responding", gpus=8)
    services.record_snapshot("test", cluster, ClusterSnapshot(T0, (failed,), (node,)))
    return cluster


def test_the_overview_lists_clusters_with_their_mode(cluster, client: Client) -> None:
    page = client.get("/").content.decode()
    assert 'href="/clusters/research/"' in page
    assert "monitor" in page


def test_the_cluster_page_shows_workloads_nodes_and_bad_endings(cluster, client: Client) -> None:
    response = client.get("/clusters/research/")
    page = response.content.decode()
    assert response.status_code == 200
    assert "llama" in page
    assert "DOWN 1" in page
    assert "NodeFail" in page


def test_the_workload_partial_lists_attempts(cluster, client: Client) -> None:
    workload = cluster.workloads.get()
    page = client.get(f"/workloads/{workload.pk}/_attempts").content.decode()
    assert "NODE_FAIL" in page and "gpu-node-001, gpu-node-002" in page


def test_unknown_pages_are_404(client: Client) -> None:
    assert client.get("/clusters/nope/").status_code == 404
    assert client.get("/workloads/999/").status_code == 404
