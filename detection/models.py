"""Detection's rows: where each telemetry source got to, what we know of each running attempt,
and the anomalies found. Written only by ``detection.services``."""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar

from django.core.exceptions import ValidationError
from django.db import models

from detection.core.checkpoints import Resume
from detection.core.config import DetectorConfig, InvalidDetectorSettings, build_detector_config
from detection.core.constants import MAX_EVIDENCE
from detection.core.interruption import Confidence, Evidence, Interruption
from detection.core.sharding import scan_shards_problems
from detection.core.telemetry import LogLine
from fleet.core.taxonomy import Attribution, Category, ConfidenceLabel, Kind
from fleet.models import Attempt, Cluster, Workload


class SourceCursor(models.Model):
    """How far one telemetry source of a cluster has been read, and whether it is healthy.

    The cursor is saved in the same transaction as what was read, so a restart neither loses
    nor repeats lines."""

    # Bookkeeping, not history: cursors go with their cluster.
    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="source_cursors")
    source = models.CharField(max_length=64)
    # Each scan shard reads every source from its own cursor (``detection.scan``).
    shard = models.PositiveSmallIntegerField(default=0)
    cursor = models.JSONField(default=dict, blank=True)
    healthy = models.BooleanField(default=True)
    last_error = models.TextField(blank=True)
    last_success_at = models.DateTimeField(null=True, blank=True)
    # The newest line's own time: a shipper that falls behind delivers lines, but old ones.
    newest_line_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(
                fields=["cluster", "source", "shard"], name="source_cursor_shard_unique"
            )
        ]

    def __str__(self) -> str:
        shard = f"#{self.shard}" if self.shard else ""
        return f"{self.cluster}:{self.source}{shard}"


class ResumeChoice(models.TextChoices):
    RESUMED = Resume.RESUMED.value, "Resumed from the last checkpoint"
    FROM_SCRATCH = Resume.FROM_SCRATCH.value, "Started from scratch"
    OLDER_CHECKPOINT = Resume.OLDER_CHECKPOINT.value, "Resumed from an older checkpoint"


class AttemptMonitor(models.Model):
    """Detector state of one attempt between scans: its progress tracker, throughput history
    and the matched log lines so far (bounded), as JSON."""

    attempt = models.OneToOneField(Attempt, on_delete=models.CASCADE, related_name="monitor")
    progress = models.JSONField(default=dict, blank=True)
    throughput = models.JSONField(default=dict, blank=True)
    matched_lines = models.JSONField(default=list, blank=True)
    lines_seen = models.PositiveBigIntegerField(default=0)
    # Remediation reads it too: retries that get no further count toward the policy's limit.
    last_step = models.BigIntegerField(null=True, blank=True)
    last_progress_at = models.DateTimeField(null=True, blank=True)
    # The last checkpoint the attempt's log says was written (step and when).
    checkpoint_step = models.BigIntegerField(null=True, blank=True)
    checkpoint_at = models.DateTimeField(null=True, blank=True)
    # A restarted attempt: whether it resumed from the workload's last checkpoint (blank: not
    # known, or nothing to resume from), and what its log showed.
    resume = models.CharField(max_length=16, choices=ResumeChoice.choices, blank=True)
    resume_summary = models.CharField(max_length=200, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"monitor of {self.attempt}"


class DetectionSettings(models.Model):
    """A cluster's detector settings, editable at runtime and validated on save: its own
    signatures (specs for ``detection.signatures.compile_signature``), a progress-line pattern,
    the hang and straggler knobs, and the poll interval."""

    cluster = models.OneToOneField(Cluster, on_delete=models.CASCADE, related_name="detection")
    signatures = models.JSONField(default=list, blank=True)
    progress_pattern = models.CharField(max_length=500, blank=True)
    hang = models.JSONField(default=dict, blank=True)
    straggler = models.JSONField(default=dict, blank=True)
    poll_seconds = models.FloatField(default=5.0)
    # How many Celery tasks share a scan of the cluster, each owning the jobs that hash to it.
    scan_shards = models.PositiveSmallIntegerField(default=1)
    # Shard 0's scan holds this lease so two workers never run it at once (ScanShardLease for
    # the other shards).
    scan_lease_until = models.DateTimeField(null=True, blank=True)
    # When the dispatcher next enqueues a scan (claimed with a conditional update).
    next_scan_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"detection settings of {self.cluster}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        # Validated on every save, so the scan loop never meets settings it cannot compile.
        self.full_clean(exclude=["cluster"])
        super().save(*args, **kwargs)

    def clean(self) -> None:
        problems: dict[str, list[str]] = {}
        try:
            self.detector_config()
        except InvalidDetectorSettings as exc:
            problems.update(exc.problems)
        if shards := scan_shards_problems(self.scan_shards):
            problems["scan_shards"] = shards
        if problems:
            raise ValidationError(problems)

    def detector_config(self) -> DetectorConfig:
        return build_detector_config(
            signatures=self.signatures,
            progress_pattern=self.progress_pattern,
            hang=self.hang,
            straggler=self.straggler,
            poll_seconds=self.poll_seconds,
        )


class ScanShardLease(models.Model):
    """The lease of one scan shard (1 and up) of a cluster, so two workers never run the same
    shard at once; a crashed worker's lease runs out and the shard's next dispatch runs it."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="scan_shard_leases")
    shard = models.PositiveSmallIntegerField()
    lease_until = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(fields=["cluster", "shard"], name="scan_shard_lease_unique")
        ]

    def __str__(self) -> str:
        return f"{self.cluster}: scan shard {self.shard}"


class AnomalyFamily(models.TextChoices):
    INTERRUPTION = "interruption", "Interruption (crash or hang)"
    STRAGGLER = "straggler"


class AnomalyState(models.TextChoices):
    OPEN = "open"
    RESOLVED = "resolved"


class AnomalyOutcome(models.TextChoices):
    """How an interruption ended (``anomalies.resolve_settled``)."""

    RECOVERED = "recovered", "Recovered (a later attempt ran healthy)"
    STOPPED = "stopped", "Stopped (the workload was stopped)"
    COMPLETED = "completed", "Completed (the workload finished)"


class Anomaly(models.Model):
    """One detected interruption of an attempt: a crash, a hang or a straggler.

    An attempt is interrupted once: all evidence of its interruption (log lines, metrics, the
    scheduler's view) makes one anomaly, whose root cause sharpens as evidence arrives; repeats
    (a flood of one Xid, one watchdog line on 512 ranks) only count. A slowdown is a separate
    family. ``first_evidence_at`` → ``detected_at`` is the detection latency."""

    # PROTECT: anomalies are history (advice points at them); what they are about must stay.
    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="anomalies")
    workload = models.ForeignKey(Workload, on_delete=models.PROTECT, related_name="anomalies")
    attempt = models.ForeignKey(Attempt, on_delete=models.PROTECT, related_name="anomalies")
    family = models.CharField(max_length=16, choices=AnomalyFamily.choices)
    kind = models.CharField(max_length=16, choices=[(k.value, k.value) for k in Kind])
    category = models.CharField(max_length=32, choices=[(c.value, c.value) for c in Category])
    attribution = models.CharField(max_length=32, choices=[(a.value, a.value) for a in Attribution])
    confidence = models.FloatField(default=0.0)
    confidence_label = models.CharField(
        max_length=16, choices=[(c.value, c.value) for c in ConfidenceLabel]
    )
    root_cause = models.CharField(max_length=200)
    implicated_hosts = models.JSONField(default=list, blank=True)
    summary = models.CharField(max_length=500)
    explanation = models.TextField(blank=True)
    evidence = models.JSONField(default=list, blank=True)
    occurrences = models.PositiveIntegerField(default=1)
    # What the policy's rule table matches on, and what attribution starts from.
    signature = models.CharField(max_length=64, blank=True)
    node_local = models.BooleanField(default=False)
    host_origins = models.JSONField(default=list, blank=True)
    pci_ids = models.JSONField(default=list, blank=True)
    detail = models.CharField(max_length=500, blank=True)
    state = models.CharField(max_length=16, choices=AnomalyState.choices, default=AnomalyState.OPEN)
    outcome = models.CharField(max_length=16, choices=AnomalyOutcome.choices, blank=True)
    # What showed the outcome: "job 12#1 reached step 1,200, past step 900 where this failed".
    resolution = models.CharField(max_length=500, blank=True)
    resolved_at = models.DateTimeField(null=True, blank=True)
    first_evidence_at = models.DateTimeField()
    detected_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        constraints: ClassVar = [
            # One row per attempt and family: new evidence updates it instead of adding another.
            models.UniqueConstraint(fields=["attempt", "family"], name="anomaly_one_per_family")
        ]
        indexes: ClassVar = [models.Index(fields=["cluster", "detected_at"])]
        ordering: ClassVar = ["-detected_at"]
        verbose_name_plural = "anomalies"

    def __str__(self) -> str:
        return f"{self.kind} of {self.attempt}: {self.category}"

    @property
    def detection_latency_seconds(self) -> float:
        return (self.detected_at - self.first_evidence_at).total_seconds()

    def as_interruption(self) -> Interruption:
        """The stored anomaly as the record detection hands on (for attribution)."""
        return Interruption(
            kind=Kind(self.kind),
            category=Category(self.category),
            attribution=Attribution(self.attribution),
            confidence=Confidence(self.confidence, ConfidenceLabel(self.confidence_label)),
            root_cause=self.root_cause,
            summary=self.summary,
            explanation=self.explanation,
            hosts=tuple(self.implicated_hosts),
            evidence=tuple(_evidence_of(item) for item in self.evidence[:MAX_EVIDENCE]),
            first_evidence_at=self.first_evidence_at,
            occurrences=self.occurrences,
            signature=self.signature,
            node_local=self.node_local,
            host_origins=tuple((str(h), str(o)) for h, o in self.host_origins),
            pci_ids=tuple(self.pci_ids),
            detail=self.detail,
        )


def _evidence_of(item: dict[str, Any]) -> Evidence:
    at = item.get("at")
    return Evidence(
        text=str(item.get("text", "")),
        signature=str(item.get("signature", "")),
        source=str(item.get("source", "log")),
        at=datetime.fromisoformat(at) if isinstance(at, str) else None,
        host=item.get("host"),
        line=item.get("line"),
    )


class TelemetryGap(models.Model):
    """A time a telemetry source of a cluster was unreachable, silent or late. While it lasts,
    hang and slowdown verdicts for the jobs it feeds wait; it is reported once, for the source,
    instead of as a hang of every job."""

    # PROTECT: gaps are history (they explain advice that was not given).
    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="telemetry_gaps")
    source = models.CharField(max_length=64)
    reason = models.CharField(max_length=500)
    started_at = models.DateTimeField()
    ended_at = models.DateTimeField(null=True, blank=True)
    # The most running jobs whose verdicts waited on it at once.
    suspended_jobs = models.PositiveIntegerField(default=0)

    class Meta:
        indexes: ClassVar = [models.Index(fields=["cluster", "source", "ended_at"])]
        ordering: ClassVar = ["-started_at"]

    def __str__(self) -> str:
        return f"telemetry gap of {self.cluster}:{self.source} since {self.started_at}"

    @property
    def is_open(self) -> bool:
        return self.ended_at is None


class NodeGpuState(models.Model):
    """What one node's GPUs last showed in the metrics (their job, PCI address, last Xid code and
    double-bit ECC count), kept between scrapes to see what changed. One row per node, so the
    state of a large cluster never grows into one value past the database's packet limit, and a
    scrape rewrites only the nodes whose GPUs changed."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="+")
    host = models.CharField(max_length=255)
    # ``sharding.stable_hash(host)``: a scan shard reads its own nodes' rows (hash mod shards).
    host_hash = models.PositiveBigIntegerField()
    # GPU index -> {"job", "pci", "xid", "dbe"}, as ``gpu_faults.read_scrape`` reads them.
    gpus = models.JSONField(default=dict)

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(fields=["cluster", "host"], name="node_gpu_state_unique")
        ]

    def __str__(self) -> str:
        return f"{self.cluster}:{self.host} GPUs"


class PendingLines(models.Model):
    """Lines of a job the scheduler has not reported yet (its output can be read before the
    next snapshot names it). Bounded, and adopted by the job's first attempt when it appears."""

    MAX_LINES = 500

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="+")
    job_id = models.CharField(max_length=64)
    lines = models.JSONField(default=list)
    first_at = models.DateTimeField()

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(fields=["cluster", "job_id"], name="pending_lines_unique")
        ]

    def __str__(self) -> str:
        return f"{len(self.lines)} pending lines of job {self.job_id}"

    @classmethod
    def hold(cls, cluster: Cluster, job_id: str, lines: list[LogLine]) -> None:
        # Locked: two scans of one job's output would otherwise lose each other's lines.
        row, _ = cls.objects.select_for_update().get_or_create(
            cluster=cluster, job_id=job_id, defaults={"first_at": lines[0].at}
        )
        # The newest lines are kept: the end of a job's output is where its failure shows.
        row.lines = (row.lines + [[line.at.isoformat(), line.text] for line in lines])[
            -cls.MAX_LINES :
        ]
        row.save()

    @classmethod
    def take(cls, cluster: Cluster, job_id: str) -> list[LogLine]:
        row = cls.objects.select_for_update().filter(cluster=cluster, job_id=job_id).first()
        if row is None:
            return []
        # Taken once: the first attempt adopts the lines, and a later one must not see them again.
        row.delete()
        return [
            LogLine(at=datetime.fromisoformat(at), text=text, job_id=job_id)
            for at, text in row.lines
        ]
