"""Live updates: a page's websocket receives the event after the change commits."""

from datetime import UTC, datetime

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.testing import WebsocketCommunicator

from detection.telemetry import ClusterSnapshot
from recovery_console import services
from recovery_console.asgi import application
from tests.factories import JobRecordFactory

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


@pytest.mark.django_db(transaction=True)
def test_a_recorded_snapshot_reaches_the_cluster_page_socket() -> None:
    cluster = services.create_cluster("user:alice", "research")

    async def scenario() -> dict:
        socket = WebsocketCommunicator(
            application, f"/ws/clusters/{cluster.pk}/", headers=[(b"origin", b"http://localhost")]
        )
        connected, _ = await socket.connect()
        assert connected
        snapshot = ClusterSnapshot(T0, (JobRecordFactory(job_id="5"),), ())
        await sync_to_async(services.record_snapshot)("test", cluster, snapshot)
        event = await socket.receive_json_from(timeout=5)
        await socket.disconnect()
        return event

    event = async_to_sync(scenario)()
    assert event["type"] == "workloads.changed"
    assert event["cluster"] == cluster.pk
    assert len(event["workloads"]) == 1
