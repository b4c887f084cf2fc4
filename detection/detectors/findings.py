"""What a detector reports: one suspected interruption of one job, with its evidence."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class Evidence:
    """One piece of evidence: a log line, a scheduler state or a metric reading."""

    at: datetime
    source: str  # "log", "scheduler", "metrics"
    text: str
    signature: str = ""
    host: str | None = None
    line: int | None = None


@dataclass(frozen=True)
class Finding:
    """A detected interruption. ``root_cause`` groups repeats: the same job and root cause make
    one anomaly however often they are seen. ``first_evidence_at`` starts the latency clock."""

    kind: str  # crash | hang | straggler
    category: str
    job_id: str
    root_cause: str
    first_evidence_at: datetime
    summary: str
    evidence: tuple[Evidence, ...]
    hosts: tuple[str, ...] = ()
