"""Notifications: a real HTTP server on 127.0.0.1 receives the webhooks, Django's locmem backend
the email. They are driven by the loop's own services through the audit trail."""

import json
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from celery.contrib.testing.worker import start_worker
from django.core import mail
from django.core.exceptions import ValidationError
from django.db import transaction
from rest_framework.test import APIClient

from fleet import services
from fleet.core.scheduler import ClusterSnapshot, NodeRecord, NodeState
from fleet.models import AuditEntry, Cluster, ClusterMode
from recovery_console.celery import app
from recovery_console.console import approval, reviews
from recovery_console.console.models import NotificationChannel
from recovery_console.console.notifications import channels, delivery
from remediation import services as remediation
from remediation.models import Advice
from tests.factories import UserFactory
from tests.remediation.conftest import anomaly_on, running_attempt

pytestmark = pytest.mark.django_db
T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


class Receiver:
    """A webhook receiver: answers with the queued statuses (then 200) and keeps each body."""

    def __init__(self) -> None:
        self.bodies: list[dict] = []
        self.headers: list[dict] = []
        self.statuses: list[int] = []
        self.delay = 0.0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.bodies.append(json.loads(body))
                receiver.headers.append(dict(self.headers))
                time.sleep(receiver.delay)
                status = receiver.statuses.pop(0) if receiver.statuses else 200
                self.send_response(status)
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hooks/T000/B000/secret"

    def wait_for(self, count: int, timeout: float = 10.0) -> list[dict]:
        deadline = time.monotonic() + timeout
        while len(self.bodies) < count and time.monotonic() < deadline:
            time.sleep(0.02)
        return self.bodies


@pytest.fixture(autouse=True)
def no_waiting_between_retries(settings) -> None:
    settings.NOTIFICATION_RETRY_BASE_SECONDS = 0


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    receiver = Receiver()
    thread = threading.Thread(target=receiver.server.serve_forever, daemon=True)
    thread.start()
    yield receiver
    receiver.server.shutdown()
    receiver.server.server_close()


@pytest.fixture
def admin():
    return UserFactory(username="root", roles=["admin"])


@pytest.fixture
def cluster():
    """A cluster whose policy stops at the first failure, and twenty nodes."""
    cluster = services.create_cluster(
        "user:root", "research", policy={"max_restarts_per_workload": 0}
    )
    nodes = tuple(NodeRecord(f"n{i}", NodeState.ALLOCATED, gpus=8) for i in range(1, 21))
    services.record_snapshot("test", cluster, ClusterSnapshot(T0, (), nodes))
    return cluster


def webhook(admin, cluster, receiver, events=None) -> NotificationChannel:
    return channels.add_channel(
        admin, cluster=cluster, kind="webhook", target=receiver.url, events=events
    )


def stop_advice(cluster, on_commit=None) -> Advice:
    """Advise on a failure; with ``on_commit`` (the capture fixture), what waits for the commit
    runs as if it committed."""
    anomaly_on(running_attempt(cluster))
    if on_commit is None:
        remediation.advise_cluster(cluster, T0)
    else:
        with on_commit(execute=True):
            remediation.advise_cluster(cluster, T0)
    return Advice.objects.get()


def test_a_stop_advice_reaches_the_webhook_as_json_with_slack_text(
    admin, cluster, receiver, django_capture_on_commit_callbacks
) -> None:
    webhook(admin, cluster, receiver)
    advice = stop_advice(cluster, django_capture_on_commit_callbacks)
    assert advice.action == "stop"
    [body] = receiver.bodies  # one message, though the advice also waits for review
    assert body["event"] == "stop"
    assert body["text"] == (
        "[research] Stop advised for job 100 attempt 0 of llama (gpu_hardware):"
        " the workload was restarted 0 times without getting further (limit 0)"
    )
    assert (body["cluster"], body["verb"], body["actor"]) == (
        "research",
        "advice.proposed",
        "system:remediation",
    )
    assert body["object"] == {"type": "advice", "id": str(advice.pk)}
    assert (body["workload"], body["attempt"]) == (advice.workload_id, advice.attempt_id)
    assert body["payload"]["action"] == "stop"
    assert receiver.headers[0]["Content-Type"] == "application/json"


def test_advice_waiting_for_review_goes_to_channels_that_want_it(
    admin, cluster, receiver, django_capture_on_commit_callbacks
) -> None:
    cluster = services.update_cluster_settings("user:root", cluster, policy={})
    webhook(admin, cluster, receiver, events=["review_needed"])
    webhook(admin, cluster, receiver, events=["stop", "drain"])
    anomaly_on(running_attempt(cluster))
    with django_capture_on_commit_callbacks(execute=True):
        remediation.advise_cluster(cluster, T0)
    [body] = receiver.bodies
    assert body["event"] == "review_needed"
    assert body["text"] == (
        "[research] Advice waiting for review: restart_excluding_node for job 100 attempt 0"
        " of llama (gpu_hardware, established)"
    )


def test_a_drain_is_announced(admin, cluster, receiver, django_capture_on_commit_callbacks) -> None:
    advice = stop_advice(cluster)
    webhook(admin, cluster, receiver, events=["drain"])
    controller = remediation.issue_controller_token("user:root", cluster, "c1").token
    with django_capture_on_commit_callbacks(execute=True):
        remediation.record_milestone(
            controller, advice.pk, "k1", "drain_node", T0, {"node": "n2", "reason": "3 strikes"}
        )
    [body] = receiver.bodies
    assert body["event"] == "drain"
    assert body["text"] == "[research] Node n2 drained by controller:research/c1: 3 strikes"


def test_a_mode_change_is_emailed(
    admin, cluster, settings, django_capture_on_commit_callbacks
) -> None:
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
    channels.add_channel(
        admin, cluster=cluster, kind="email", target="oncall@example.org, lead@example.org"
    )
    Cluster.objects.filter(pk=cluster.pk).update(mode=ClusterMode.ACTION)
    alice = UserFactory(username="alice", roles=["operator"])
    with django_capture_on_commit_callbacks(execute=True):
        approval.back_to_monitor(alice, cluster, "canary misbehaved")
    [message] = mail.outbox
    assert message.to == ["oncall@example.org", "lead@example.org"]
    assert message.subject == (
        "Recovery Console: [research] Mode changed from action to monitor by user:alice"
        " (canary misbehaved)"
    )
    assert '"reason": "canary misbehaved"' in message.body


def test_a_failed_delivery_is_retried_until_it_gets_through(
    admin, cluster, receiver, django_capture_on_commit_callbacks
) -> None:
    receiver.statuses = [503, 502]
    webhook(admin, cluster, receiver)
    stop_advice(cluster, django_capture_on_commit_callbacks)
    assert len(receiver.bodies) == 3
    assert len({b["id"] for b in receiver.bodies}) == 1  # a receiver can drop the duplicates


def test_a_webhook_that_refuses_is_not_retried(
    admin, cluster, receiver, django_capture_on_commit_callbacks
) -> None:
    receiver.statuses = [404]
    webhook(admin, cluster, receiver)
    stop_advice(cluster, django_capture_on_commit_callbacks)
    assert len(receiver.bodies) == 1


def test_a_dead_webhook_never_fails_the_change_that_set_it_off(
    admin, cluster, django_capture_on_commit_callbacks, caplog
) -> None:
    channels.add_channel(
        admin, cluster=cluster, kind="webhook", target="http://127.0.0.1:9/nobody-listens"
    )
    advice = stop_advice(cluster, django_capture_on_commit_callbacks)
    assert advice.action == "stop"
    assert "failed" in caplog.text


def test_disabled_channels_and_other_clusters_hear_nothing(
    admin, cluster, receiver, django_capture_on_commit_callbacks
) -> None:
    other = services.create_cluster("user:root", "other")
    channels.add_channel(admin, cluster=other, kind="webhook", target=receiver.url)
    channels.add_channel(admin, cluster=cluster, kind="webhook", target=receiver.url, enabled=False)
    stop_advice(cluster, django_capture_on_commit_callbacks)
    assert receiver.bodies == []


def test_nothing_is_sent_for_a_change_that_rolled_back(
    admin, cluster, receiver, django_capture_on_commit_callbacks
) -> None:
    webhook(admin, cluster, receiver)
    Cluster.objects.filter(pk=cluster.pk).update(mode=ClusterMode.ACTION)
    alice = UserFactory(username="alice", roles=["operator"])
    with django_capture_on_commit_callbacks(execute=True):
        try:
            with transaction.atomic():
                approval.back_to_monitor(alice, cluster, "oops")
                raise RuntimeError("the rest of the change failed")
        except RuntimeError:
            pass
    assert receiver.bodies == []


@pytest.mark.django_db(transaction=True)
def test_the_loop_does_not_wait_for_a_slow_webhook(receiver, settings) -> None:
    settings.NOTIFY_IN_BACKGROUND_THREAD = True  # as in the embedded console
    receiver.delay = 1.5
    admin = UserFactory(username="root", roles=["admin"])
    cluster = services.create_cluster("user:root", "research")
    webhook(admin, cluster, receiver, events=["mode_change"])
    Cluster.objects.filter(pk=cluster.pk).update(mode=ClusterMode.ACTION)
    alice = UserFactory(username="alice", roles=["operator"])
    started = time.monotonic()
    approval.back_to_monitor(alice, cluster, "now")
    assert time.monotonic() - started < 1.0
    [body] = receiver.wait_for(1)
    assert body["event"] == "mode_change"


# --- channels --------------------------------------------------------------------------------


def test_a_channel_is_validated(admin, cluster) -> None:
    with pytest.raises(ValidationError) as bad_url:
        channels.add_channel(admin, cluster=cluster, kind="webhook", target="ftp://x")
    assert bad_url.value.message_dict == {"target": ["a webhook needs an http:// or https:// URL"]}
    with pytest.raises(ValidationError) as bad_mail:
        channels.add_channel(admin, cluster=cluster, kind="email", target="ops, a@b.org")
    assert bad_mail.value.message_dict == {"target": ["not an email address: ops"]}
    with pytest.raises(ValidationError) as bad_event:
        channels.add_channel(
            admin, cluster=cluster, kind="email", target="a@b.org", events=["fire"]
        )
    assert "events" in bad_event.value.message_dict


def test_managing_channels_needs_the_admin_role_and_is_audited_without_secrets(
    admin, cluster, receiver
) -> None:
    with pytest.raises(reviews.RoleMissing):
        channels.add_channel(
            UserFactory(username="olga", roles=["operator"]),
            cluster=cluster,
            kind="webhook",
            target=receiver.url,
        )
    channel = webhook(admin, cluster, receiver)
    channels.change_channel(admin, channel, enabled=False)
    channels.remove_channel(admin, channel)
    entries = AuditEntry.objects.filter(verb__startswith="notification_channel.")
    assert [e.verb for e in entries] == [
        "notification_channel.added",
        "notification_channel.changed",
        "notification_channel.removed",
    ]
    assert all("secret" not in json.dumps(e.payload) for e in entries)
    assert entries[0].payload["target"] == f"http://127.0.0.1:{receiver.server.server_port}/…"


def test_admins_manage_channels_through_the_api(admin, cluster, receiver) -> None:
    client = APIClient()
    client.force_login(admin)
    created = client.post(
        "/api/v1/notification-channels/",
        {"cluster": "research", "kind": "webhook", "target": receiver.url, "events": ["stop"]},
        format="json",
    )
    assert created.status_code == 201
    body = created.json()
    assert (body["cluster"], body["kind"], body["events"], body["enabled"]) == (
        "research",
        "webhook",
        ["stop"],
        True,
    )
    changed = client.patch(
        f"/api/v1/notification-channels/{body['id']}/", {"enabled": False}, format="json"
    )
    assert (changed.status_code, changed.json()["enabled"]) == (200, False)
    operator = APIClient()
    operator.force_login(UserFactory(username="olga", roles=["operator"]))
    refused = operator.delete(f"/api/v1/notification-channels/{body['id']}/")
    assert refused.status_code == 403
    assert refused.json() == {"detail": "this needs the admin role"}
    assert client.delete(f"/api/v1/notification-channels/{body['id']}/").status_code == 204
    assert not NotificationChannel.objects.exists()


def reroute() -> None:
    """Make the app route by ``task_routes`` as it stands (Celery caches its router)."""
    app.amqp.flush_routes()
    app.amqp.router = app.amqp.Router()


@pytest.mark.django_db(transaction=True)
def test_a_real_worker_retries_a_failed_webhook_with_backoff(receiver, settings) -> None:
    assert settings.CELERY_BROKER_URL.startswith("redis://"), "run with REDIS_URL (make test)"
    receiver.statuses = [503]
    admin = UserFactory(username="root", roles=["admin"])
    cluster = services.create_cluster("user:root", "research")
    webhook(admin, cluster, receiver, events=["mode_change"])
    Cluster.objects.filter(pk=cluster.pk).update(mode=ClusterMode.ACTION)
    alice = UserFactory(username="alice", roles=["operator"])
    # A queue of its own: another worker on the same Redis (a parallel test) cannot take these.
    queue = f"notifications-{uuid.uuid4().hex}"
    routes = {f"recovery_console.{n}": {"queue": queue} for n in ("notify", "deliver_notification")}
    app.conf.task_routes, app.conf.task_always_eager = routes, False
    reroute()
    try:
        with start_worker(
            app, pool="solo", perform_ping_check=False, shutdown_timeout=10, queues=[queue]
        ):
            approval.back_to_monitor(alice, cluster, "through the broker")
            bodies = receiver.wait_for(2, timeout=30)
    finally:  # the worker selected its queue on the shared app: give later workers theirs
        app.conf.task_routes = None
        reroute()
        app.amqp.queues.select([app.conf.task_default_queue])
    assert [b["event"] for b in bodies] == ["mode_change", "mode_change"]
    assert bodies[0]["id"] == bodies[1]["id"]


# --- bad input and secrets ----------------------------------------------------------------


@pytest.fixture
def admin_api(admin) -> APIClient:
    # A 500 comes back as a response, as a client would see it, rather than as an exception.
    client = APIClient(raise_request_exception=False)
    client.force_login(admin)
    return client


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"target": "not a url"}, "target"),
        ({"target": "ftp://x"}, "target"),
        ({"target": "http://"}, "target"),
        ({"target": "http://[::1"}, "target"),
        ({"target": 7}, "target"),
        ({"target": "https://user:pa55word@hooks.example.org/x"}, "target"),
        ({"events": "stop"}, "events"),
        ({"events": [1]}, "events"),
        ({"events": [{}]}, "events"),
        ({"events": [["stop"]]}, "events"),
        ({"events": ["fire"]}, "events"),
        ({"events": {"stop": True}}, "events"),
        ({"kind": "pager"}, "kind"),
    ],
)
def test_a_bad_channel_is_a_400_naming_the_field_never_a_500(
    admin_api, cluster, receiver, changes, field
) -> None:
    good = {"cluster": "research", "kind": "webhook", "target": receiver.url, "events": ["stop"]}
    created = admin_api.post("/api/v1/notification-channels/", good | changes, format="json")
    assert created.status_code == 400
    assert list(created.json()) == [field]
    assert not NotificationChannel.objects.exists()
    channel = admin_api.post("/api/v1/notification-channels/", good, format="json").json()
    changed = admin_api.patch(
        f"/api/v1/notification-channels/{channel['id']}/", changes, format="json"
    )
    assert changed.status_code == 400
    assert list(changed.json()) == [field]
    stored = NotificationChannel.objects.get()
    assert (stored.target, stored.events) == (receiver.url, ["stop"])


def test_webhook_hosts_are_limited_when_set_and_when_sent(
    admin, admin_api, cluster, receiver, settings, django_capture_on_commit_callbacks
) -> None:
    settings.OUTBOUND_ALLOWED_HOSTS = ["hooks.example.org"]
    body = {"cluster": "research", "kind": "webhook", "target": receiver.url}
    refused = admin_api.post("/api/v1/notification-channels/", body, format="json")
    assert refused.status_code == 400
    assert refused.json() == {"target": ["host 127.0.0.1 is not in OUTBOUND_ALLOWED_HOSTS"]}
    settings.OUTBOUND_ALLOWED_HOSTS = []
    webhook(admin, cluster, receiver)
    # The site narrows the list later: the stored webhook is refused when it would be sent.
    settings.OUTBOUND_ALLOWED_HOSTS = ["hooks.example.org"]
    stop_advice(cluster, django_capture_on_commit_callbacks)
    assert receiver.bodies == []


def test_a_webhooks_secrets_never_reach_the_logs_or_other_people(
    admin, cluster, receiver, django_capture_on_commit_callbacks, caplog
) -> None:
    port = receiver.server.server_port
    receiver.statuses = [404]
    webhook(admin, cluster, receiver)
    # A webhook nobody answers: its failures are logged.
    channels.add_channel(admin, cluster=cluster, kind="webhook", target="http://127.0.0.1:9/tok3n")
    # Credentials in a URL, stored before they were refused: refused when it would be sent.
    legacy = channels.add_channel(admin, cluster=cluster, kind="webhook", target=receiver.url)
    target = f"http://hook:pa55word@127.0.0.1:{port}/hooks/T000/B000/secret"
    NotificationChannel.objects.filter(pk=legacy.pk).update(target=target)
    with caplog.at_level("DEBUG"):
        stop_advice(cluster, django_capture_on_commit_callbacks)
    assert len(receiver.bodies) == 1
    assert "refused" in caplog.text and "failed" in caplog.text
    for secret in ("/hooks/T000", "secret", "pa55word", "tok3n"):
        assert secret not in caplog.text
    viewer = APIClient()
    viewer.force_login(UserFactory(username="carol", roles=["viewer"]))
    shown = viewer.get("/api/v1/notification-channels/").json()["results"]
    assert [c["target"] for c in shown] == [
        f"http://127.0.0.1:{port}/…",
        "http://127.0.0.1:9/…",
        f"http://127.0.0.1:{port}/…",
    ]


def test_a_slack_channel_gets_text_and_blocks_with_a_link_to_the_console(
    admin, cluster, receiver, settings, django_capture_on_commit_callbacks
) -> None:
    settings.CONSOLE_BASE_URL = "https://console.example.org"
    channels.add_channel(admin, cluster=cluster, kind="slack", target=receiver.url)
    advice = stop_advice(cluster, django_capture_on_commit_callbacks)
    [body] = receiver.bodies
    link = f"<https://console.example.org/workloads/{advice.workload_id}/|Open in the console>"
    said = (
        "[research] Stop advised for job 100 attempt 0 of llama (gpu_hardware):"
        " the workload was restarted 0 times without getting further (limit 0)"
    )
    assert body["text"] == f"{said} {link}"
    section, context = body["blocks"]
    assert section == {"type": "section", "text": {"type": "mrkdwn", "text": f"{said} {link}"}}
    assert context["type"] == "context"
    assert context["elements"][0]["text"].startswith("stop · advice.proposed · system:remediation")
    assert set(body) == {"text", "blocks"}  # Slack's shape, not the generic JSON


def test_a_hostile_job_name_cannot_mention_or_link_in_slack(
    admin, cluster, receiver, django_capture_on_commit_callbacks
) -> None:
    channels.add_channel(admin, cluster=cluster, kind="slack", target=receiver.url)
    hostile = '{"workload": "<!channel> & <https://evil.example|click>"}'
    attempt = running_attempt(cluster, comment=hostile)
    anomaly_on(attempt)
    with django_capture_on_commit_callbacks(execute=True):
        remediation.advise_cluster(cluster, T0)
    [body] = receiver.bodies
    assert "<!channel>" not in body["text"] and "<https://evil" not in body["text"]
    assert "&lt;!channel&gt; &amp; &lt;https://evil.example|click&gt;" in body["text"]


def test_a_long_message_fits_slacks_section_and_keeps_its_link() -> None:
    body = {"url": "https://console.example.org/", "event": "stop", "verb": "v", "actor": "a"}
    message = delivery.Message("s", "y" * 5000, {**body, "at": "2026-11-29T12:00:00+00:00"})
    section = delivery.slack_body(message)["blocks"][0]["text"]["text"]
    assert len(section) == 3000
    assert section.endswith(" <https://console.example.org/|Open in the console>")


def test_a_watchdog_gone_silent_is_announced_once_by_the_clusters_cycle(
    admin, cluster, receiver, django_capture_on_commit_callbacks
) -> None:
    from django.utils import timezone

    from recovery_console.console.tasks import run_cycle
    from remediation.models import ControllerToken

    webhook(admin, cluster, receiver, events=["reporter_silent"])
    token = remediation.issue_controller_token("user:root", cluster, "head-watchdog").token
    quiet_since = timezone.now() - timedelta(seconds=45)
    ControllerToken.objects.filter(pk=token.pk).update(
        last_heartbeat_at=quiet_since, heartbeat={"role": "watchdog", "interval_s": 5}
    )
    with django_capture_on_commit_callbacks(execute=True):
        run_cycle(cluster.pk)
        run_cycle(cluster.pk)  # still silent: told once
    [body] = receiver.bodies
    assert body["event"] == "reporter_silent"
    said = "[research] The watchdog head-watchdog has sent no heartbeat for "
    assert body["text"].startswith(said) and body["payload"]["silent_for_s"] >= 45
