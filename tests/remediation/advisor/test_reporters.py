"""Controllers and watchdogs as the console keeps them: who a token is, heartbeats with their
role, which snapshots are fresh, silence noticed once (and notified), health for the page, the
API and /metrics."""

from datetime import timedelta

import pytest
import time_machine
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from fleet.models import AuditEntry
from recovery_console.console.notifications.delivery import events_of, message_for
from remediation import reporters, services
from remediation.models import ControllerToken
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

SNAPSHOT = {"taken_at": "2026-11-29T12:00:00Z", "jobs": [], "nodes": []}


def client_for(cluster, name: str) -> APIClient:
    client = APIClient()
    secret = services.issue_controller_token("user:alice", cluster, name).secret
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    return client


def beat(client: APIClient, **info):
    return client.post("/api/v1/advisor/research/heartbeat", info, format="json")


def test_a_token_says_which_cluster_it_belongs_to_and_the_hold_timeouts(cluster) -> None:
    cluster.policy = {
        "hold_timeout_seconds": 120,
        "partitions": {"canary": {"hold_timeout_seconds": 30}},
    }
    cluster.save()
    response = client_for(cluster, "head").get("/api/v1/advisor/self")
    assert (response.status_code, response.json()) == (
        200,
        {
            "cluster": "research",
            "name": "head",
            "mode": "monitor",
            "hold_timeouts": {"default": 120.0, "partitions": {"canary": 30.0}},
        },
    )


def test_who_am_i_needs_a_controller_token(cluster) -> None:
    assert APIClient().get("/api/v1/advisor/self").status_code in (401, 403)
    wrong = APIClient()
    wrong.credentials(HTTP_AUTHORIZATION="Bearer rcc_not-a-token")
    assert wrong.get("/api/v1/advisor/self").status_code == 401


def test_a_watchdog_learns_how_fresh_the_controllers_snapshot_is(cluster) -> None:
    controller, watchdog = client_for(cluster, "ctl"), client_for(cluster, "wd")
    assert beat(watchdog, role="watchdog").json()["snapshot_age_s"] is None
    taken = timezone.now() - timedelta(seconds=42)
    snapshot = {**SNAPSHOT, "taken_at": taken.isoformat()}
    posted = controller.post("/api/v1/advisor/research/snapshots", snapshot, format="json")
    assert posted.status_code == 200
    age = beat(watchdog, role="watchdog").json()["snapshot_age_s"]
    assert 42 <= age < 60
    # Its own snapshots do not count: they are not someone else's report.
    assert beat(controller).json()["snapshot_age_s"] is None
    token = ControllerToken.objects.get(name="wd")
    assert token.heartbeat["role"] == "watchdog"


def test_a_heartbeat_with_an_unknown_role_is_refused(cluster) -> None:
    response = beat(client_for(cluster, "x"), role="janitor")
    assert response.status_code == 400 and "role" in response.json()


def test_silence_is_marked_once_audited_and_notified_and_a_return_clears_it(cluster) -> None:
    client = client_for(cluster, "wd")
    now = timezone.now()
    with time_machine.travel(now, tick=False):
        beat(client, role="watchdog", interval_s=5)
    assert reporters.check_silence(cluster, now + timedelta(seconds=29)) == []
    assert reporters.check_silence(cluster, now + timedelta(seconds=31)) == ["wd"]
    assert reporters.check_silence(cluster, now + timedelta(seconds=90)) == []  # once
    entry = AuditEntry.objects.get(verb="controller.silent")
    assert entry.payload["role"] == "watchdog" and entry.payload["silent_for_s"] == 31
    assert events_of(entry.verb, entry.payload) == ["reporter_silent"]
    assert (
        "watchdog wd has sent no heartbeat for 31 s" in message_for(entry, "reporter_silent").text
    )
    (health,) = reporters.health([cluster], now + timedelta(seconds=40))
    assert (health.status, health.role) == ("silent", "watchdog")
    beat(client, role="watchdog", interval_s=5)
    assert AuditEntry.objects.filter(verb="controller.heard_again").count() == 1
    (health,) = reporters.health([cluster], timezone.now())
    assert (health.status, health.silent_since) == ("ok", None)


def test_a_slow_cycle_gives_a_longer_silence_allowance(cluster) -> None:
    client = client_for(cluster, "ctl")
    now = timezone.now()
    with time_machine.travel(now, tick=False):
        beat(client, interval_s=60)
    assert reporters.check_silence(cluster, now + timedelta(seconds=300)) == []
    assert reporters.check_silence(cluster, now + timedelta(seconds=361)) == ["ctl"]


def test_a_token_never_used_is_not_silent_only_unused(cluster) -> None:
    services.issue_controller_token("user:alice", cluster, "spare")
    assert reporters.check_silence(cluster, timezone.now() + timedelta(days=1)) == []
    (health,) = reporters.health([cluster], timezone.now())
    assert (health.status, health.heartbeat_age_s, health.role) == ("unused", None, "")


def test_the_api_lists_each_reporters_health(cluster) -> None:
    client = client_for(cluster, "ctl")
    beat(client, controller_version="1.0", transport="ssh", last_error="squeue: timed out")
    client.post("/api/v1/advisor/research/snapshots", SNAPSHOT, format="json")
    services.issue_controller_token("user:alice", cluster, "spare")
    viewer = Client()
    viewer.force_login(UserFactory(username="vera", roles=["viewer"]))
    response = viewer.get("/api/v1/clusters/research/reporters/")
    assert response.status_code == 200
    ctl, spare = response.json()
    assert (ctl["name"], ctl["role"], ctl["status"], ctl["version"], ctl["transport"]) == (
        "ctl",
        "controller",
        "failing",
        "1.0",
        "ssh",
    )
    assert ctl["last_error"] == "squeue: timed out"
    assert ctl["last_snapshot_at"].startswith("2026-11-29T12:00:00")
    assert (spare["name"], spare["status"], spare["last_heartbeat_at"]) == (
        "spare",
        "unused",
        None,
    )


def test_the_cluster_page_shows_each_reporters_health(cluster) -> None:
    controller, watchdog = client_for(cluster, "head-ctl"), client_for(cluster, "head-wd")
    beat(controller, controller_version="1.0", transport="local", last_error="")
    beat(watchdog, role="watchdog", last_error="reading Slurm: squeue timed out")
    controller.post("/api/v1/advisor/research/snapshots", SNAPSHOT, format="json")
    viewer = Client()
    viewer.force_login(UserFactory(username="vera", roles=["viewer"]))
    page = viewer.get("/clusters/research/").content.decode()
    partial = viewer.get("/clusters/research/_reporters").content.decode()
    for html in (page, partial):
        assert 'data-reporter="head-ctl" data-status="ok"' in html
        assert 'data-reporter="head-wd" data-status="failing"' in html
        assert "reading Slurm: squeue timed out" in html
        assert "2026-11-29 12:00:00" in html  # the controller's last snapshot
    assert 'data-events="cluster.changed:reporters"' in page
