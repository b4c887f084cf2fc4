"""``/metrics``: the console's own figures for Prometheus, read from the database at scrape time,
so every process answers the same and a restart loses nothing. Sites alert on the recovery
service itself with these: a dead telemetry source, a silent controller, slow detection.

Every series carries the ``cluster`` label. Rows are counted with a few grouped queries per
scrape (no per-row work in Python), so a scrape stays cheap on a long history.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterable, Iterator
from datetime import timedelta
from typing import Any, cast

from django.conf import settings
from django.db.models import Count, DurationField, ExpressionWrapper, F, Min, Q, QuerySet, Sum
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from detection import costs
from detection.models import (
    Anomaly,
    AnomalyState,
    AttemptMonitor,
    ResumeChoice,
    SourceCursor,
    TelemetryGap,
)
from fleet.models import Cluster, ClusterMode
from recovery_console.console import reviews
from remediation import reporters
from remediation.models import Advice, AdviceState

PREFIX = "recovery_console"
# Detection targets p95 <= 15 s (DESIGN.md §5) and action p95 <= 30 s: buckets around them.
DETECTION_BUCKETS = (1.0, 2.0, 5.0, 10.0, 15.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0)
ACTION_BUCKETS = (5.0, 10.0, 15.0, 30.0, 60.0, 90.0, 120.0, 300.0, 600.0, 1800.0)


class ConsoleCollector(Collector):
    """Collects every console metric from the database on each scrape."""

    def collect(self) -> Iterator[Metric]:
        # Loaded once per scrape and shared, so every family lists the same clusters.
        clusters = list(Cluster.objects.all())
        yield from _clusters(clusters)
        yield from _anomalies()
        yield from _advice(clusters)
        yield _histogram(
            f"{PREFIX}_detection_latency_seconds",
            "From the first evidence of an interruption to its anomaly being stored.",
            Anomaly.objects.all(),
            "first_evidence_at",
            "detected_at",
            DETECTION_BUCKETS,
        )
        yield _histogram(
            f"{PREFIX}_action_latency_seconds",
            "From an anomaly's detection to its advice being executed by a controller.",
            Advice.objects.filter(executed_at__isnull=False),
            "anomaly__detected_at",
            "executed_at",
            ACTION_BUCKETS,
        )
        yield from _sources()
        yield from _controllers(clusters)
        yield from _losses(clusters)


def _clusters(clusters: list[Cluster]) -> Iterator[Metric]:
    mode = GaugeMetricFamily(
        f"{PREFIX}_cluster_action_mode",
        "1 when the cluster is in action mode (advice is carried out), 0 in monitor mode.",
        labels=["cluster"],
    )
    for cluster in clusters:
        mode.add_metric([cluster.name], 1.0 if cluster.mode == ClusterMode.ACTION else 0.0)
    yield mode
    agreement = GaugeMetricFamily(
        f"{PREFIX}_review_agreement_ratio",
        "Share of labelled advice reviewers agreed with, over the policy's approval window.",
        labels=["cluster"],
    )
    labelled = GaugeMetricFamily(
        f"{PREFIX}_review_labelled_advice",
        "Advice labelled by reviewers over the policy's approval window.",
        labels=["cluster"],
    )
    for cluster in clusters:
        measured = reviews.agreement(cluster)
        labelled.add_metric([cluster.name], measured.labelled)
        # No sample rather than 0 when nothing was labelled: an alert on a low ratio must not fire.
        if measured.rate is not None:
            agreement.add_metric([cluster.name], measured.rate)
    yield agreement
    yield labelled
    yield from _precision(clusters)


def _precision(clusters: list[Cluster]) -> Iterator[Metric]:
    ratio = GaugeMetricFamily(
        f"{PREFIX}_advice_precision_ratio",
        "Share of labelled advice reviewers agreed with, per category, action or rule "
        "(label by), over the policy's approval window.",
        labels=["cluster", "by", "value"],
    )
    labelled = GaugeMetricFamily(
        f"{PREFIX}_advice_labelled",
        "Advice labelled by reviewers per category, action or rule, over the approval window.",
        labels=["cluster", "by", "value"],
    )
    for cluster in clusters:
        for row in reviews.precision(cluster):
            labels = [cluster.name, row.dimension, row.value]
            labelled.add_metric(labels, row.labelled)
            if row.precision is not None:
                ratio.add_metric(labels, row.precision)
    yield ratio
    yield labelled


def _anomalies() -> Iterator[Metric]:
    total = CounterMetricFamily(
        f"{PREFIX}_anomalies",
        "Anomalies detected (crashes, hangs, stragglers), by kind and category.",
        labels=["cluster", "kind", "category"],
    )
    open_ = GaugeMetricFamily(
        f"{PREFIX}_open_anomalies",
        "Anomalies still open, by kind and category.",
        labels=["cluster", "kind", "category"],
    )
    rows = (
        Anomaly.objects.values("cluster__name", "kind", "category")
        .annotate(n=Count("pk"), still_open=Count("pk", filter=Q(state=AnomalyState.OPEN)))
        .order_by()
    )
    for row in rows:
        labels = [row["cluster__name"], row["kind"], row["category"]]
        total.add_metric(labels, row["n"])
        open_.add_metric(labels, row["still_open"])
    yield total
    yield open_


def _advice(clusters: list[Cluster]) -> Iterator[Metric]:
    advice = GaugeMetricFamily(
        f"{PREFIX}_advice",
        "Advice by recommended action and lifecycle state.",
        labels=["cluster", "action", "state"],
    )
    rows = Advice.objects.values("cluster__name", "action", "state").annotate(n=Count("pk"))
    for row in rows.order_by():
        advice.add_metric([row["cluster__name"], row["action"], row["state"]], row["n"])
    yield advice
    waiting = GaugeMetricFamily(
        f"{PREFIX}_advice_awaiting_review",
        "Advice with no reviewer's label on its current generation.",
        labels=["cluster"],
    )
    for cluster in clusters:
        # Labelled by nobody, as on the overview's card: the gauge and the page agree.
        waiting.add_metric([cluster.name], reviews.awaiting_review(cluster).count())
    yield waiting
    yield _stuck_advice()


def _stuck_advice() -> Metric:
    """How long the oldest advice in flight (dispatched or claimed) has waited since its last
    step: advice a controller never finishes shows here, however busy the cluster is."""
    oldest = GaugeMetricFamily(
        f"{PREFIX}_advice_in_flight_oldest_age_seconds",
        "Seconds since the last step of the oldest dispatched or claimed advice.",
        labels=["cluster"],
    )
    now = timezone.now()
    in_flight = Advice.objects.filter(state__in=[AdviceState.DISPATCHED, AdviceState.CLAIMED])
    rows = in_flight.values("cluster__name").annotate(since=Min("updated_at")).order_by()
    for row in rows:
        oldest.add_metric([row["cluster__name"]], (now - row["since"]).total_seconds())
    return oldest


def _histogram(
    name: str,
    documentation: str,
    queryset: QuerySet[Anomaly] | QuerySet[Advice],
    start: str,
    end: str,
    buckets: Iterable[float],
) -> Metric:
    """A Prometheus histogram of ``end - start`` per cluster, counted in the database."""
    bounds = tuple(buckets)
    latency = ExpressionWrapper(F(end) - F(start), output_field=DurationField())
    # Cumulative buckets, as Prometheus expects: each counts every row at or below its bound.
    counts = {
        f"le_{i}": Count("pk", filter=Q(latency__lte=timedelta(seconds=b)))
        for i, b in enumerate(bounds)
    }
    rows = (
        queryset.annotate(latency=latency)
        .values("cluster__name")
        .annotate(count=Count("pk"), total=Sum("latency"), **counts)
        .order_by()
    )
    family = HistogramMetricFamily(name, documentation, labels=["cluster"])
    for row in cast(Iterable[dict[str, Any]], rows):
        points = [(_le(b), float(row[f"le_{i}"])) for i, b in enumerate(bounds)]
        points.append(("+Inf", float(row["count"])))
        total = row["total"] or timedelta(0)
        family.add_metric([row["cluster__name"]], points, sum_value=total.total_seconds())
    return family


# Bucket labels as the Prometheus client writes them (1.0, 2.5), so queries match.
def _le(bound: float) -> str:
    return f"{bound:g}" if bound != int(bound) else f"{bound:.1f}"


def _losses(clusters: list[Cluster]) -> Iterator[Metric]:
    """Per cluster, not per workload: a label per workload would be a series per training run,
    which Prometheus cannot keep at 10,000 of them (the REST API gives each workload's)."""
    lost = GaugeMetricFamily(
        f"{PREFIX}_gpu_hours_lost",
        "GPU-hours lost to interruptions, by kind: idle (a failed attempt's GPUs from its last "
        "progress to its end, then the wait for the next attempt from the failure's first "
        "evidence) and recompute (a failed attempt's work since its last checkpoint).",
        labels=["cluster", "kind"],
    )
    for cluster in clusters:
        measured = costs.cluster_gpu_hours_lost(cluster)
        lost.add_metric([cluster.name, "idle"], measured.idle)
        lost.add_metric([cluster.name, "recompute"], measured.recompute)
    yield lost
    not_resumed = GaugeMetricFamily(
        f"{PREFIX}_attempts_not_resumed",
        "Restarted attempts that did not resume from their workload's last checkpoint, by how "
        "(from_scratch, older_checkpoint).",
        labels=["cluster", "resume"],
    )
    rows = (
        AttemptMonitor.objects.exclude(resume__in=("", ResumeChoice.RESUMED))
        .values("attempt__cluster__name", "resume")
        .annotate(n=Count("pk"))
        .order_by()
    )
    for row in rows:
        not_resumed.add_metric([row["attempt__cluster__name"], row["resume"]], row["n"])
    yield not_resumed


def _sources() -> Iterator[Metric]:
    healthy = GaugeMetricFamily(
        f"{PREFIX}_source_healthy",
        "1 when the telemetry source's last read succeeded, 0 when it failed.",
        labels=["cluster", "source"],
    )
    success = GaugeMetricFamily(
        f"{PREFIX}_source_last_success_timestamp_seconds",
        "When the telemetry source was last read successfully (Unix time).",
        labels=["cluster", "source"],
    )
    rows = SourceCursor.objects.values_list("cluster__name", "source", "healthy", "last_success_at")
    # A sharded scan keeps a cursor per shard: a source is as healthy and as recent as its
    # worst shard, one series each.
    worst: dict[tuple[str, str], tuple[bool, float | None]] = {}
    for cluster, source, ok, last in rows:
        stamp = None if last is None else last.timestamp()
        seen_ok, seen_last = worst.get((cluster, source), (True, stamp))
        older = [t for t in (seen_last, stamp) if t is not None]
        worst[cluster, source] = (seen_ok and ok, min(older) if older else None)
    for (cluster, source), (ok, stamp) in worst.items():
        healthy.add_metric([cluster, source], 1.0 if ok else 0.0)
        if stamp is not None:
            success.add_metric([cluster, source], stamp)
    gap = GaugeMetricFamily(
        f"{PREFIX}_telemetry_gap_open",
        "1 while the source is in a telemetry gap (unreachable, silent or late): hang and "
        "slowdown verdicts of the jobs it feeds wait.",
        labels=["cluster", "source"],
    )
    for cluster, source in TelemetryGap.objects.filter(ended_at__isnull=True).values_list(
        "cluster__name", "source"
    ):
        gap.add_metric([cluster, source], 1.0)
    yield healthy
    yield success
    yield gap


def _controllers(clusters: list[Cluster]) -> Iterator[Metric]:
    """Each controller and watchdog that has been heard from; a token never used has no
    series (its age would be +Inf and page someone for a process that was never started)."""
    labels = ["cluster", "controller", "role"]
    age = GaugeMetricFamily(
        f"{PREFIX}_controller_heartbeat_age_seconds",
        "Seconds since each controller's or watchdog's last heartbeat.",
        labels=labels,
    )
    snapshot = GaugeMetricFamily(
        f"{PREFIX}_controller_last_snapshot_timestamp_seconds",
        "When the Slurm state a controller or watchdog last reported was taken (Unix time).",
        labels=labels,
    )
    silent = GaugeMetricFamily(
        f"{PREFIX}_controller_silent",
        "1 once a controller or watchdog has missed its heartbeats (notified), else 0.",
        labels=labels,
    )
    failing = GaugeMetricFamily(
        f"{PREFIX}_controller_failing",
        "1 when the last heartbeat reported an error (Slurm or the console unreachable).",
        labels=labels,
    )
    info = InfoMetricFamily(
        f"{PREFIX}_controller",
        "The version and transport each controller and watchdog last reported.",
        labels=labels,
    )
    for h in reporters.health(clusters, timezone.now()):
        if h.heartbeat_age_s is None:
            continue
        key = [h.cluster, h.name, h.role]
        age.add_metric(key, h.heartbeat_age_s)
        silent.add_metric(key, 1.0 if h.status == "silent" else 0.0)
        failing.add_metric(key, 1.0 if h.last_error else 0.0)
        info.add_metric(key, {"version": h.version, "transport": h.transport})
        if h.last_snapshot_at is not None:
            snapshot.add_metric(key, h.last_snapshot_at.timestamp())
    yield from (age, snapshot, silent, failing, info)


# A registry of our own, without the default one's process metrics, which differ between
# processes. No auto-describe: registering would run a whole collect, querying at import.
registry = CollectorRegistry(auto_describe=False)
registry.register(ConsoleCollector())


@require_GET
def metrics_view(request: HttpRequest) -> HttpResponse:
    """The Prometheus text format. With ``METRICS_TOKEN`` set, a scrape must send it as
    ``Authorization: Bearer <token>`` (Prometheus' ``authorization`` setting)."""
    expected = settings.METRICS_TOKEN
    if expected:
        sent = request.headers.get("Authorization", "")
        # Constant-time: the token cannot be guessed byte by byte from response times.
        if not hmac.compare_digest(sent.encode(), f"Bearer {expected}".encode()):
            response = HttpResponse("a metrics token is required\n", status=401)
            response["WWW-Authenticate"] = "Bearer"
            return response
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
