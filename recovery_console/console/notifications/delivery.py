"""Notifications: per-cluster webhooks (JSON with a Slack-compatible ``text``), Slack incoming
webhooks (``text`` and Block Kit ``blocks``, escaped) and email, on a stop advice, a drain, a
mode change, advice waiting for review and a telemetry gap.

They hang off the audit trail, which every one of those events already writes, so no service
of the loop knows about them: ``console.tasks`` enqueues one ``notify`` after the commit of an
``AuditEntry`` whose verb matters, fans it out into one delivery per channel, and each delivery
retries with backoff on its own. This module says which entries are which events, what the
message says and how it is sent.
"""

from __future__ import annotations

import json
import logging
import random
import smtplib
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.mail import send_mail
from django.urls import NoReverseMatch, reverse

from fleet.core.outbound import NO_REDIRECTS, url_host, url_problem
from fleet.models import AuditEntry
from fleet.outbound import allowed_hosts
from recovery_console.console.models import (
    NotificationChannel,
    NotificationEvent,
    NotificationKind,
)

log = logging.getLogger(__name__)

# When an entry is several events at once (a stop advice also waits for review), a channel
# gets one message: the first of these it subscribes to.
PRIORITY = (
    NotificationEvent.STOP,
    NotificationEvent.DRAIN,
    NotificationEvent.MODE_CHANGE,
    NotificationEvent.REVIEW_NEEDED,
    NotificationEvent.TELEMETRY_GAP,
    NotificationEvent.REPORTER_SILENT,
)
VERBS = {
    "advice.proposed",
    "advice.dispatched",
    "advice.revised",
    "controller.drain_node",
    "cluster.mode_changed",
    "telemetry.gap_opened",
    "controller.silent",
}


MAX_ATTEMPTS = 9  # the first try and the task's ``max_retries`` (8)
BACKOFF_MAX_SECONDS = 600


class DeliveryFailed(Exception):
    """A delivery that may succeed later (network trouble, 5xx, 429): retried with backoff."""


class DeliveryRefused(Exception):
    """A delivery that will not succeed as configured (4xx): logged, not retried."""


def events_of(verb: str, payload: dict[str, Any]) -> list[str]:
    """The notification events an audit entry is, in ``PRIORITY`` order."""
    found: list[str] = []
    # Proposed (not enforced) and dispatched (enforced) are exclusive: a stop is told once.
    if verb in ("advice.proposed", "advice.dispatched") and payload.get("action") == "stop":
        found.append(NotificationEvent.STOP)
    # A revision records each changed field as {from, to}: a stop only if it became one.
    revised = payload.get("action")
    if verb == "advice.revised" and isinstance(revised, dict) and revised.get("to") == "stop":
        found.append(NotificationEvent.STOP)
    if verb == "controller.drain_node":
        found.append(NotificationEvent.DRAIN)
    if verb == "cluster.mode_changed":
        found.append(NotificationEvent.MODE_CHANGE)
    if verb == "advice.proposed":
        found.append(NotificationEvent.REVIEW_NEEDED)
    if verb == "telemetry.gap_opened":
        found.append(NotificationEvent.TELEMETRY_GAP)
    if verb == "controller.silent":
        found.append(NotificationEvent.REPORTER_SILENT)
    return found


def event_for(channel: NotificationChannel, entry: AuditEntry) -> str | None:
    """The one event of ``entry`` this channel hears about, if any."""
    wanted = set(channel.events)
    return next((e for e in events_of(entry.verb, entry.payload) if e in wanted), None)


# --- messages and delivery -------------------------------------------------------------------


@dataclass(frozen=True)
class Message:
    subject: str
    text: str
    body: dict[str, Any]


def message_for(entry: AuditEntry, event: str, channel_id: int = 0) -> Message:
    """The message of one event: a line for people (Slack's ``text``) and the facts as JSON."""
    cluster = entry.cluster.name if entry.cluster else ""
    text = f"[{cluster}] {_describe(entry, event)}"
    url = _link(entry, event)
    body = {
        # Stable per (entry, channel): a receiver can drop a retried duplicate.
        "id": f"{entry.sequence}-{channel_id}",
        "event": event,
        "text": f"{text} <{url}>" if url else text,
        "cluster": cluster,
        "verb": entry.verb,
        "actor": entry.actor,
        "at": entry.at.isoformat(),
        "object": {"type": entry.object_type, "id": entry.object_id},
        "workload": entry.workload_id,
        "attempt": entry.attempt_id,
        "payload": entry.payload,
        "url": url,
    }
    return Message(subject=f"Recovery Console: {text}"[:200], text=text, body=body)


# Slack's limit on a section block's text; the fallback ``text`` may be longer.
SLACK_SECTION_CHARS = 3000


def slack_escape(text: str) -> str:
    """Text as Slack shows it literally: ``&``, ``<`` and ``>`` escaped, so a job name or a log
    line cannot make a link or a mention (``<!channel>``) of itself."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def slack_body(message: Message) -> dict[str, Any]:
    """An incoming-webhook payload: ``text`` (notifications, and clients without blocks) and
    blocks with the message, a link to the console and the event's facts."""
    url = message.body["url"]
    # The URL is ours (CONSOLE_BASE_URL and a route); only what came from the cluster is escaped.
    link = f" <{url}|Open in the console>" if url else ""
    text = slack_escape(message.text)
    section = text[: SLACK_SECTION_CHARS - len(link)] + link
    facts = [message.body["event"], message.body["verb"], message.body["actor"]]
    context = " · ".join(slack_escape(str(f)) for f in [*facts, message.body["at"]])
    return {
        "text": text + link,
        "blocks": [
            {"type": "section", "text": {"type": "mrkdwn", "text": section}},
            {"type": "context", "elements": [{"type": "mrkdwn", "text": context}]},
        ],
    }


def _describe(entry: AuditEntry, event: str) -> str:
    p, job = entry.payload, _job(entry)
    if event == NotificationEvent.STOP:
        reasons = p.get("reasons") or []
        why = f": {reasons[0]}" if reasons and isinstance(reasons, list) else ""
        return f"Stop advised for {job} ({p.get('category', 'unknown cause')}){why}"
    if event == NotificationEvent.DRAIN:
        node = p.get("node", "a node")
        return f"Node {node} drained by {entry.actor}" + (
            f": {p['reason']}" if p.get("reason") else ""
        )
    if event == NotificationEvent.MODE_CHANGE:
        said = f" by {entry.actor}"
        extra = f" ({p['reason']})" if p.get("reason") else ""
        if p.get("requested_by"):
            rate = p.get("agreement_rate")
            measured = (
                f", agreement {rate:.0%} over {p.get('labelled')}" if rate is not None else ""
            )
            extra = f" (requested by {p['requested_by']}{measured})"
        return f"Mode changed from {p.get('from')} to {p.get('to')}{said}{extra}"
    if event == NotificationEvent.REPORTER_SILENT:
        return (
            f"The {p.get('role', 'controller')} {p.get('name')} has sent no heartbeat for"
            f" {p.get('silent_for_s')} s (last at {p.get('last_heartbeat_at')})"
        )
    if event == NotificationEvent.TELEMETRY_GAP:
        return (
            f"Telemetry gap on {p.get('source')}: {p.get('reason')}; hang and slowdown verdicts"
            f" wait for it ({p.get('suspended_jobs', 0)} running jobs)"
        )
    return (
        f"Advice waiting for review: {p.get('action')} for {job}"
        f" ({p.get('category')}, {p.get('confidence_label')})"
    )


def _job(entry: AuditEntry) -> str:
    attempt = entry.attempt
    if attempt is None:
        return "an attempt"
    return f"job {attempt.job_id} attempt {attempt.attempt_index} of {attempt.workload.key}"


def _link(entry: AuditEntry, event: str) -> str:
    base = str(settings.CONSOLE_BASE_URL)
    if not base or entry.cluster is None:
        return ""
    name = entry.cluster.name
    try:
        if event == NotificationEvent.STOP and entry.workload_id:
            path = reverse("workload", args=[entry.workload_id])
        elif event == NotificationEvent.DRAIN:
            path = reverse("nodes", args=[name])
        elif event == NotificationEvent.MODE_CHANGE:
            path = reverse("mode", args=[name])
        elif event == NotificationEvent.REVIEW_NEEDED:
            path = reverse("review-queue")
        else:
            path = reverse("cluster", args=[name])
    except NoReverseMatch:
        return ""
    return base + path


def deliver(channel_id: int, entry_id: int, event: str) -> str:
    """Send one message to one channel. Raises ``DeliveryFailed`` when it is worth retrying."""
    channel = NotificationChannel.objects.filter(pk=channel_id, enabled=True).first()
    if channel is None:
        return f"channel {channel_id} is gone or disabled"
    entry = AuditEntry.objects.select_related("cluster", "attempt__workload").get(pk=entry_id)
    message = message_for(entry, event, channel.pk)
    try:
        if channel.kind == NotificationKind.WEBHOOK:
            post_json(channel.target, message.body)
        elif channel.kind == NotificationKind.SLACK:
            post_json(channel.target, slack_body(message))
        else:
            _email(channel, message)
    except DeliveryRefused as exc:
        log.warning("notification to %s refused, not retried: %s", channel, exc)
        return f"refused: {exc}"
    return f"{event} sent to {channel.kind} {channel.safe_target}"


def deliver_with_retries(channel_id: int, entry_id: int, event: str) -> str:
    """``deliver`` for tasks run in-process, with the worker's retries: exponential backoff
    with jitter, then a logged failure (never an exception: the other channels go on)."""
    failure: DeliveryFailed | None = None
    for attempt in range(MAX_ATTEMPTS):
        try:
            return deliver(channel_id, entry_id, event)
        except DeliveryFailed as exc:
            failure = exc
            if attempt + 1 < MAX_ATTEMPTS:
                time.sleep(backoff_seconds(attempt))
    log.warning("notification %s of entry %s failed for good: %s", event, entry_id, failure)
    return f"failed: {failure}"


def backoff_seconds(attempt: int) -> float:
    """As Celery's ``retry_backoff`` with ``retry_jitter``: up to base × 2^attempt, capped."""
    ceiling = min(BACKOFF_MAX_SECONDS, settings.NOTIFICATION_RETRY_BASE_SECONDS * 2**attempt)
    return random.uniform(0, ceiling)  # noqa: S311  # jitter, not a secret


def post_json(url: str, body: dict[str, Any]) -> None:
    """POST ``body`` as JSON. A 2xx is delivered, 4xx (but 408 and 429) is refused for good,
    anything else (5xx, timeouts, connection errors) fails for a retry. Messages name the
    host only: the rest of a webhook URL is often its secret."""
    # Checked again when sent: the site's list of hosts may have narrowed since.
    if problem := url_problem(url, allowed_hosts()):
        raise DeliveryRefused(f"{url_host(url)}: {problem}")
    request = urllib.request.Request(  # noqa: S310  # the scheme is checked above
        url,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "User-Agent": "recovery-console"},
        method="POST",
    )
    try:
        with NO_REDIRECTS.open(request, timeout=settings.NOTIFICATION_TIMEOUT_SECONDS) as response:
            response.read(1024)
    except urllib.error.HTTPError as exc:
        if 300 <= exc.code < 400:
            reason = "redirects are not followed; set the URL to where it points"
            raise DeliveryRefused(f"HTTP {exc.code} from {url_host(url)}: {reason}") from exc
        if 400 <= exc.code < 500 and exc.code not in (408, 429):
            raise DeliveryRefused(f"HTTP {exc.code} from {url_host(url)}") from exc
        raise DeliveryFailed(f"HTTP {exc.code} from {url_host(url)}") from exc
    except urllib.error.URLError as exc:
        # The reason only: the error's own text may carry the URL.
        raise DeliveryFailed(f"{url_host(url)}: {exc.reason}") from None
    except OSError as exc:
        raise DeliveryFailed(f"{url_host(url)}: {exc.strerror or type(exc).__name__}") from None


def _email(channel: NotificationChannel, message: Message) -> None:
    body = message.text
    if message.body["url"]:
        body += f"\n\n{message.body['url']}"
    body += "\n\n" + json.dumps(message.body["payload"], indent=2, sort_keys=True)
    try:
        send_mail(message.subject, body, None, channel.recipients)
    except (smtplib.SMTPException, OSError) as exc:
        raise DeliveryFailed(f"email to {channel.target}: {exc}") from exc
