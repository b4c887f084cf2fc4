"""What the parts of a scan share: its limits and timings, the shard a scan is, and the summary
of what it did."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from detection.core.sharding import shard_of

from ..anomalies import Recorded
from ..models import Anomaly

ACTOR = "system:detection"
# Lines of an attempt may arrive after the scheduler reports its end (slow shippers, buffers).
LATE_LINES = timedelta(minutes=15)
# How far a node's system-log line may fall outside an attempt's run and still be its own: the
# clocks of nodes and the scheduler differ a little, and unstamped lines carry their read time.
NODE_LINE_SLACK = timedelta(seconds=60)
# An ended attempt the scheduler calls a failure gets an anomaly if it ended this recently.
RECENT_ENDINGS = timedelta(days=1)
MAX_BATCHES_PER_SCAN = 10
FAILED_JOB_STATES = ("FAILED", "NODE_FAIL", "TIMEOUT", "OUT_OF_MEMORY", "PREEMPTED")
UNHEALTHY_NODE_STATES = ("DOWN", "DRAINED", "DRAINING")
NODE_LOG_SOURCES = ("node-logs",)
# The longest host name a node's rows keep (NodeGpuState.host).
MAX_HOST_CHARS = 255


@dataclass(frozen=True)
class Shard:
    """One shard of a cluster's scan: it owns the jobs whose id hashes to ``number``."""

    number: int = 0
    of: int = 1

    def owns(self, job_id: str) -> bool:
        return shard_of(job_id, self.of) == self.number

    def owns_host(self, host: str) -> bool:
        """The shard that keeps ``host``'s GPU state and finds its metric faults."""
        return shard_of(host, self.of) == self.number

    @property
    def leads(self) -> bool:
        """Shard 0 does the cluster-wide part of a scan."""
        return self.number == 0


WHOLE = Shard()


@dataclass
class ScanSummary:
    """What one scan of a cluster did."""

    lines: int = 0
    new_anomalies: int = 0
    updated_anomalies: int = 0
    resolved_anomalies: int = 0
    # Running attempts whose hang, slowdown and divergence the scan checked (its shard's own).
    attempts_checked: int = 0
    failed_sources: list[str] = field(default_factory=list)
    skipped: bool = False
    out_of_time: bool = False

    def count(self, recorded: tuple[Anomaly | None, Recorded]) -> None:
        _, outcome = recorded
        if outcome is Recorded.NEW:
            self.new_anomalies += 1
        elif outcome is Recorded.SHARPENED:
            self.updated_anomalies += 1

    def __str__(self) -> str:
        if self.skipped:
            return "skipped: another scan of this cluster is running"
        failed = f", sources down: {'; '.join(self.failed_sources)}" if self.failed_sources else ""
        late = ", time budget spent (reading on next cycle)" if self.out_of_time else ""
        return (
            f"{self.lines} lines, {self.new_anomalies} new anomalies, "
            f"{self.updated_anomalies} updated, {self.resolved_anomalies} resolved, "
            f"{self.attempts_checked} running attempts checked{failed}{late}"
        )
