"""Live updates: sockets only for logged-in viewers; events reach them after the commit."""

from datetime import UTC, datetime

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import Group
from django.test import Client

from fleet import services
from fleet.core.scheduler import ClusterSnapshot
from fleet.events import send_cluster_changed
from recovery_console.asgi import application
from tests.factories import JobRecordFactory, UserFactory

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
ORIGIN = (b"origin", b"http://localhost")


def session_cookie(*roles: str) -> tuple[bytes, bytes]:
    # Transactional tests empty the tables afterwards, the role groups of the migration too.
    for role in roles:
        Group.objects.get_or_create(name=role)
    client = Client()
    client.force_login(UserFactory(username="-".join(roles) or "nobody", roles=roles))
    return (b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode())


def connect(path: str, headers: list[tuple[bytes, bytes]]) -> tuple[bool, object]:
    async def scenario() -> tuple[bool, object]:
        socket = WebsocketCommunicator(application, path, headers=headers)
        connected, code = await socket.connect()
        await socket.disconnect()
        return connected, code

    return async_to_sync(scenario)()


@pytest.mark.django_db(transaction=True)
def test_an_anonymous_socket_is_closed() -> None:
    cluster = services.create_cluster("user:alice", "research")
    connected, code = connect(f"/ws/clusters/{cluster.pk}/", [ORIGIN])
    assert not connected and code == 4403


@pytest.mark.django_db(transaction=True)
def test_a_user_without_a_role_is_closed_too() -> None:
    cluster = services.create_cluster("user:alice", "research")
    connected, _ = connect(f"/ws/clusters/{cluster.pk}/", [ORIGIN, session_cookie()])
    assert not connected


@pytest.mark.django_db(transaction=True)
def test_a_viewer_receives_the_workload_event_after_the_commit() -> None:
    cluster = services.create_cluster("user:alice", "research")
    headers = [ORIGIN, session_cookie("viewer")]

    async def scenario() -> list[dict]:
        socket = WebsocketCommunicator(application, f"/ws/clusters/{cluster.pk}/", headers=headers)
        connected, _ = await socket.connect()
        assert connected
        snapshot = ClusterSnapshot(T0, (JobRecordFactory(job_id="5"),), ())
        await sync_to_async(services.record_snapshot)("test", cluster, snapshot)
        await sync_to_async(send_cluster_changed)(cluster.pk, "reviews")
        events = [await socket.receive_json_from(timeout=5) for _ in range(2)]
        await socket.disconnect()
        return events

    workloads, changed = async_to_sync(scenario)()
    assert workloads["type"] == "workloads.changed" and len(workloads["workloads"]) == 1
    assert changed == {"type": "cluster.changed", "cluster": cluster.pk, "what": "reviews"}
