"""The health of a cluster's reporters: its controllers and watchdogs, each under its own
token. They heartbeat and report Slurm's state; this module keeps those reports, answers what a
watchdog needs to know (is anyone else reporting, which hold timeout), tells when one has gone
silent (audited once, which notifies) and sums each one up for the page, the API and /metrics.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import Max

from fleet import audit, events
from fleet.models import Cluster
from remediation.core.policy import InvalidPolicy, Policy, parse_policy

from .models import ControllerToken

ACTOR = "system:console"
ROLES = ("controller", "watchdog")
DEFAULT_INTERVAL_S = 5.0
# Silent after this many of its own intervals without a heartbeat, and never sooner than this:
# a controller busy with a slow Slurm for a cycle or two is not silent.
SILENT_AFTER_INTERVALS = 6
SILENT_AFTER_MIN_S = 30.0


def heartbeat(token: ControllerToken, info: dict[str, Any], now: datetime) -> dict[str, Any]:
    """Keep the heartbeat; a reporter that was silent is heard again (audited). The answer
    tells the sender how fresh the others' snapshots are, and the hold timeouts."""
    with transaction.atomic():
        ControllerToken.objects.filter(pk=token.pk).update(last_heartbeat_at=now, heartbeat=info)
        # Conditional: of two heartbeats at once, only one records the return.
        if ControllerToken.objects.filter(pk=token.pk, silent_since__isnull=False).update(
            silent_since=None
        ):
            audit.record(
                ACTOR,
                "controller.heard_again",
                token,
                cluster=token.cluster,
                payload={"name": token.name, "role": _role(info)},
            )
            events.send_cluster_changed(token.cluster_id, "reporters")
    return {
        "snapshot_age_s": _others_snapshot_age(token, now),
        "hold_timeouts": hold_timeouts(token.cluster),
    }


def snapshot_reported(token: ControllerToken, taken_at: datetime) -> None:
    """Remember when the Slurm state this reporter last sent was taken."""
    ControllerToken.objects.filter(pk=token.pk).update(last_snapshot_at=taken_at)


def whoami(token: ControllerToken) -> dict[str, Any]:
    """What a reporter started with only a URL and a token needs to know."""
    return {
        "cluster": token.cluster.name,
        "name": token.name,
        "mode": token.cluster.mode,
        "hold_timeouts": hold_timeouts(token.cluster),
    }


def hold_timeouts(cluster: Cluster) -> dict[str, Any]:
    """The policy's hold timeout, and each partition's own."""
    try:
        policy = parse_policy(cluster.policy)
    except InvalidPolicy:
        policy = Policy()  # saved policies are validated; an old one must not stop the watchdog
    return {
        "default": policy.limits.hold_timeout_seconds,
        "partitions": {
            name: limits.hold_timeout_seconds for name, limits in policy.partitions.items()
        },
    }


def _others_snapshot_age(token: ControllerToken, now: datetime) -> float | None:
    latest = (
        _live(token.cluster)
        .exclude(pk=token.pk)
        .aggregate(latest=Max("last_snapshot_at"))["latest"]
    )
    return None if latest is None else max(0.0, (now - latest).total_seconds())


# --- silence -----------------------------------------------------------------------------------


def silent_after_s(info: dict[str, Any]) -> float:
    interval = info.get("interval_s")
    interval = float(interval) if isinstance(interval, int | float) else DEFAULT_INTERVAL_S
    return max(SILENT_AFTER_MIN_S, SILENT_AFTER_INTERVALS * interval)


def check_silence(cluster: Cluster, now: datetime) -> list[str]:
    """Mark each reporter whose heartbeats stopped as silent, once (audited: the notification
    hangs off that entry). A token that never sent a heartbeat is not silent, only unused.
    Returns the names marked."""
    marked = []
    for token in _live(cluster).filter(last_heartbeat_at__isnull=False, silent_since__isnull=True):
        last = token.last_heartbeat_at
        quiet_for = (now - last).total_seconds() if last is not None else 0.0
        if quiet_for <= silent_after_s(token.heartbeat):
            continue
        with transaction.atomic():
            # Conditional: two cycles checking at once mark (and notify) it once.
            if not ControllerToken.objects.filter(
                pk=token.pk, silent_since__isnull=True, last_heartbeat_at=last
            ).update(silent_since=now):
                continue
            audit.record(
                ACTOR,
                "controller.silent",
                token,
                cluster=cluster,
                payload={
                    "name": token.name,
                    "role": _role(token.heartbeat),
                    "last_heartbeat_at": last.isoformat() if last else None,
                    "silent_for_s": round(quiet_for),
                },
            )
            events.send_cluster_changed(cluster.pk, "reporters")
        marked.append(token.name)
    return marked


# --- health, for the page, the API and /metrics ------------------------------------------------


@dataclass(frozen=True)
class ReporterHealth:
    """One controller or watchdog as the console last heard from it."""

    cluster: str
    name: str
    role: str
    status: str  # ok | failing (alive, reporting an error) | silent | unused (never heard)
    last_heartbeat_at: datetime | None
    heartbeat_age_s: float | None
    last_snapshot_at: datetime | None
    silent_since: datetime | None
    silent_after_s: float
    version: str
    transport: str
    last_error: str

    def as_json(self) -> dict[str, Any]:
        data = {k: getattr(self, k) for k in self.__dataclass_fields__}
        for key in ("last_heartbeat_at", "last_snapshot_at", "silent_since"):
            data[key] = data[key].isoformat() if data[key] else None
        return data


def health(clusters: Any, now: datetime) -> list[ReporterHealth]:
    """Every unrevoked token of these clusters (a queryset or list), by cluster and name."""
    tokens = (
        ControllerToken.objects.filter(cluster__in=clusters, revoked_at__isnull=True)
        .select_related("cluster")
        .order_by("cluster__name", "name")
    )
    return [_health_of(token, now) for token in tokens]


def _health_of(token: ControllerToken, now: datetime) -> ReporterHealth:
    info, last = token.heartbeat or {}, token.last_heartbeat_at
    age = None if last is None else max(0.0, (now - last).total_seconds())
    limit = silent_after_s(info)
    if last is None:
        status = "unused"
    elif token.silent_since is not None or (age is not None and age > limit):
        status = "silent"
    else:
        status = "failing" if info.get("last_error") else "ok"
    return ReporterHealth(
        cluster=token.cluster.name,
        name=token.name,
        role=_role(info) if last is not None else "",
        status=status,
        last_heartbeat_at=last,
        heartbeat_age_s=age,
        last_snapshot_at=token.last_snapshot_at,
        silent_since=token.silent_since,
        silent_after_s=limit,
        version=str(info.get("controller_version", "")),
        transport=str(info.get("transport", "")),
        last_error=str(info.get("last_error", "")),
    )


def _role(info: dict[str, Any]) -> str:
    role = info.get("role")
    return role if role in ROLES else "controller"  # heartbeats from before roles: controllers


def _live(cluster: Cluster) -> Any:
    return ControllerToken.objects.filter(cluster=cluster, revoked_at__isnull=True)
