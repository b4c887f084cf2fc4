"""Celery tasks that tie the loop together: thin wrappers that call one service each.

Beat runs ``dispatch_cycles`` every second; it enqueues one ``run_cycle`` per cluster whose poll
interval has elapsed and that has no cycle queued or running. A cycle scans the cluster's
telemetry within a time budget (what is left is read next cycle), then advises on what it found.
So a busy cluster holds at most one worker process at a time, for about its budget, and its
cycles never pile up in the queue ahead of other clusters'.

A large cluster's scan may be split into shards (its ``scan_shards`` detection setting): then
``run_cycle`` scans shard 0 and advises, and one ``run_scan_shard`` per further shard scans the
others, each on whichever worker takes it, each with a queue lease and a scan lease of its own.

Each task has an explicit name: the beat schedule and queued messages refer to tasks by name,
so moving a module must not orphan them.
"""

import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from celery import shared_task
from django.conf import settings
from django.core.cache import cache
from django.db import close_old_connections, transaction
from django.utils import timezone

from detection import scan
from detection import services as detection
from fleet import services
from fleet.core.scheduler import snapshot_from_json
from fleet.models import AuditEntry, Cluster
from recovery_console.console.models import NotificationChannel
from remediation import reporters
from remediation import services as remediation

from .notifications import delivery as notifications

DISPATCH_EXPIRES_SECONDS = 5


def cycle_lease(cluster_id: int, shard: int = 0) -> str:
    return f"cycle-lease:{cluster_id}" if shard == 0 else f"cycle-lease:{cluster_id}:{shard}"


# Beat sends one a second: one that waited longer than that behind busy workers is dropped
# rather than run late in a row with the others (the next is on its way).
@shared_task(name="recovery_console.dispatch_cycles", expires=DISPATCH_EXPIRES_SECONDS)
def dispatch_cycles() -> str:
    enqueued = 0
    for cluster_id in detection.claim_due_scans(timezone.now()):
        # Held from enqueueing until the cycle ends; it runs out by itself if a worker dies.
        if cache.add(cycle_lease(cluster_id), "queued", settings.CYCLE_LEASE_SECONDS):
            run_cycle.delay(cluster_id)
            enqueued += 1
        for shard in range(1, detection.scan_shards_of(cluster_id)):
            if cache.add(cycle_lease(cluster_id, shard), "queued", settings.CYCLE_LEASE_SECONDS):
                run_scan_shard.delay(cluster_id, shard)
    return f"{enqueued} cycles enqueued"


# No retries: the next dispatch, a poll interval later, is the retry.
@shared_task(name="recovery_console.run_cycle")
def run_cycle(cluster_id: int) -> str:
    """One turn of the loop for one cluster: detect, then advise."""
    try:
        cluster = Cluster.objects.get(pk=cluster_id)
        deadline = time.monotonic() + settings.CYCLE_BUDGET_SECONDS
        scanned = scan.scan_cluster(cluster, timezone.now(), deadline=deadline)
        advised = remediation.advise_cluster(cluster, timezone.now())
        # Here, not in beat: a cluster whose cycles run has its controller's silence noticed.
        reporters.check_silence(cluster, timezone.now())
    finally:
        cache.delete(cycle_lease(cluster_id))
    return f"{cluster.name}: {scanned}; {advised} advice"


@shared_task(name="recovery_console.run_scan_shard")
def run_scan_shard(cluster_id: int, shard: int) -> str:
    """One shard (1 and up) of a cluster's scan; advice follows from shard 0's cycle."""
    try:
        cluster = Cluster.objects.get(pk=cluster_id)
        deadline = time.monotonic() + settings.CYCLE_BUDGET_SECONDS
        scanned = scan.scan_cluster(cluster, timezone.now(), deadline=deadline, shard=shard)
    finally:
        cache.delete(cycle_lease(cluster_id, shard))
    return f"{cluster.name} shard {shard}: {scanned}"


# Acknowledged once done: a worker lost mid-task leaves the snapshot queued, not dropped.
@shared_task(name="recovery_console.record_snapshot", acks_late=True)
def record_snapshot(cluster_id: int, snapshot: dict[str, Any], actor: str) -> str:
    """Record a scheduler snapshot (JSON, as ``snapshot_to_json`` writes it)."""
    cluster = Cluster.objects.get(pk=cluster_id)
    result = services.record_snapshot(actor, cluster, snapshot_from_json(snapshot))
    return (
        f"{cluster.name}: {result.new_attempts} new attempts, "
        f"{result.changed_attempts} changed, {result.changed_nodes} nodes changed"
    )


@shared_task(name="recovery_console.notify")
def notify(entry_id: int) -> str:
    """Fan one audit entry out to its cluster's notification channels."""
    return f"{fan_out(entry_id)} notifications enqueued"


@shared_task(
    name="recovery_console.deliver_notification",
    autoretry_for=(notifications.DeliveryFailed,),
    retry_backoff=True,
    retry_backoff_max=notifications.BACKOFF_MAX_SECONDS,
    retry_jitter=True,
    max_retries=notifications.MAX_ATTEMPTS - 1,
    # A crash after sending may deliver twice: the message id lets a receiver drop the copy.
    acks_late=True,
)
def deliver_notification(channel_id: int, entry_id: int, event: str) -> str:
    """Send one notification; a failure worth retrying is retried with backoff."""
    return notifications.deliver(channel_id, entry_id, event)


# --- notifications: hung off the audit trail, never in the loop's way ---------------------


def enqueue_notifications(entry: AuditEntry, created: bool) -> None:
    """Called for every new audit entry; enqueues ``notify`` after the commit when it matters."""
    # Channels belong to clusters: an entry of no cluster has nobody to tell.
    if not created or entry.cluster_id is None or entry.verb not in notifications.VERBS:
        return
    if not notifications.events_of(entry.verb, entry.payload):
        return
    # Only the id goes along: the task reads the committed row itself.
    entry_id = entry.pk
    # robust: a broker hiccup must not turn into an error of the change that committed.
    transaction.on_commit(lambda: _enqueue(entry_id), robust=True)


_background = ThreadPoolExecutor(max_workers=2, thread_name_prefix="notify")


def _enqueue(entry_id: int) -> Future[Any] | None:
    # Eager tasks would run in the request that committed: hand them to a thread instead.
    if settings.NOTIFY_IN_BACKGROUND_THREAD and notify.app.conf.task_always_eager:
        return _background.submit(_notify_in_background, entry_id)
    notify.delay(entry_id)
    return None


def _notify_in_background(entry_id: int) -> None:
    try:
        notify.apply(args=(entry_id,), throw=False)
    finally:
        # No request cycle closes this thread's database connection: do it here.
        close_old_connections()


def fan_out(entry_id: int) -> int:
    """Enqueue one delivery per enabled channel of the entry's cluster that wants it."""
    entry = AuditEntry.objects.select_related("cluster").get(pk=entry_id)
    count = 0
    for channel in NotificationChannel.objects.filter(cluster=entry.cluster, enabled=True):
        event = notifications.event_for(channel, entry)
        if event is None:
            continue
        if deliver_notification.app.conf.task_always_eager:
            # Celery's eager mode cannot retry reliably (nor wait between tries): retry here.
            notifications.deliver_with_retries(channel.pk, entry_id, event)
        else:
            deliver_notification.delay(channel.pk, entry_id, event)
        count += 1
    return count
