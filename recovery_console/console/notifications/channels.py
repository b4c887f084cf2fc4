"""Notification channels: where a cluster's notifications go (a webhook or email addresses,
and which events). Only admins manage them; every change is audited, with a webhook's secret
path left out of the trail."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from fleet import audit
from fleet.events import send_cluster_changed
from fleet.models import Cluster

from ..models import NotificationChannel
from ..reviews import RoleMissing, actor_of
from ..roles import ADMIN, has_role


def _require_admin(user: Any) -> None:
    if not has_role(user, ADMIN):
        raise RoleMissing("managing notification channels needs the admin role")


@transaction.atomic
def add_channel(
    user: Any,
    *,
    cluster: Cluster,
    kind: str,
    target: str,
    events: list[str] | None = None,
    enabled: bool = True,
) -> NotificationChannel:
    """Add a webhook or email channel to a cluster (validated)."""
    _require_admin(user)
    channel = NotificationChannel(cluster=cluster, kind=kind, target=target, enabled=enabled)
    # Left out, a channel hears every event (the model's default).
    if events is not None:
        channel.events = events
    channel.save()
    _audit(user, "notification_channel.added", channel)
    return channel


@transaction.atomic
def change_channel(user: Any, channel: NotificationChannel, **changes: Any) -> NotificationChannel:
    """Change a channel's kind, target, events or whether it is enabled."""
    _require_admin(user)
    # Read again and locked: the caller's copy may predate another admin's change.
    channel = NotificationChannel.objects.select_for_update().get(pk=channel.pk)
    for field in ("cluster", "kind", "target", "events", "enabled"):
        if field in changes:
            setattr(channel, field, changes[field])
    channel.save()
    _audit(user, "notification_channel.changed", channel)
    return channel


@transaction.atomic
def remove_channel(user: Any, channel: NotificationChannel) -> None:
    _require_admin(user)
    # Audited first: once deleted, the channel has no pk for the entry to name.
    _audit(user, "notification_channel.removed", channel)
    channel.delete()


def _audit(user: Any, verb: str, channel: NotificationChannel) -> None:
    audit.record(
        actor_of(user),
        verb,
        channel,
        cluster=channel.cluster,
        payload={
            "kind": channel.kind,
            "target": channel.safe_target,
            "events": channel.events,
            "enabled": channel.enabled,
        },
    )
    send_cluster_changed(channel.cluster_id, "notifications")
