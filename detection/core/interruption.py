"""What detection hands on: one interruption of one attempt, with its evidence.

Every detector (the log diagnosis, hangs, stragglers, GPU metric faults, the scheduler's end
state) reports an ``Interruption``; ``detection.anomalies`` stores it as an Anomaly and
remediation attributes and decides on it. Frozen and plain, so the pure core can build and test
it without a database.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from fleet.core.taxonomy import Attribution, Category, ConfidenceLabel, Kind

# Stored evidence keeps this much of a line (the diagnosis output keeps less, see constants).
MAX_STORED_EVIDENCE_TEXT = 2000


@dataclass(frozen=True)
class Evidence:
    """One piece of evidence: a log line, a scheduler state or a metric reading.

    ``line`` numbers a log line (within the excerpt, or across everything the attempt wrote);
    ``host`` is where the evidence came from when known."""

    text: str
    signature: str = ""
    source: str = "log"  # log | scheduler | metrics
    at: datetime | None = None
    host: str | None = None
    line: int | None = None

    def to_record(self) -> dict[str, object]:
        """The JSON an Anomaly stores (and the API shows)."""
        record: dict[str, object] = {
            "source": self.source,
            "at": self.at.isoformat() if self.at else None,
        }
        if self.line is not None:
            record["line"] = self.line
        record.update(
            text=self.text[:MAX_STORED_EVIDENCE_TEXT], signature=self.signature, host=self.host
        )
        return record


class HostOrigin:
    """How an implicated host was named, for the explanation an operator reads."""

    TEXT = "named in the line"
    STREAM = "the line was read from its log"
    RANK = "the rank runs there"
    EXCERPT = "the excerpt is its log"
    ONLY_NODE = "the only node the excerpt shows"
    METRICS = "its GPU at that PCI address reported it"
    SCHEDULER = "the scheduler marked it unhealthy"
    DETECTOR = "its own metrics show it"


@dataclass(frozen=True)
class Confidence:
    """How sure we are: a value in [0, 1] and the label an operator reads."""

    value: float
    label: ConfidenceLabel

    def to_dict(self) -> dict[str, object]:
        return {"value": self.value, "label": self.label.value}


@dataclass(frozen=True)
class Interruption:
    """A detected interruption (or, with kind ``none``, a clean bill of health).

    ``root_cause`` groups repeats: the same attempt and root cause make one anomaly however
    often they are seen. ``first_evidence_at`` starts the detection-latency clock.
    ``signature`` names the evidence that decided it; ``node_local`` says that evidence puts the
    fault on a node (a fatal Xid, an ECC failure, a node failure), named or not, and
    ``host_origins`` how each implicated host was named (``HostOrigin``). ``detail`` is what
    the evidence says to fix (an exception and where it was raised). ``job_id`` names the
    interrupted job when the detector knows it (metrics carry it). ``phase`` says whether it
    failed before the first training step or after training had progressed."""

    kind: Kind
    category: Category
    attribution: Attribution
    confidence: Confidence
    root_cause: str
    summary: str
    explanation: str = ""
    hosts: tuple[str, ...] = ()
    evidence: tuple[Evidence, ...] = ()
    first_evidence_at: datetime | None = None
    occurrences: int = 1
    signature: str = ""
    node_local: bool = False
    host_origins: tuple[tuple[str, str], ...] = ()
    # PCI bus ids of the GPUs the evidence names (an Xid line's ``PCI:0000:3b:00``).
    pci_ids: tuple[str, ...] = ()
    detail: str = ""
    job_id: str = ""
    # When in the job's life it failed, as far as the lines tell (``detection.core.phase``):
    # "startup", "training", or "" when they do not say.
    phase: str = ""

    @property
    def is_failure(self) -> bool:
        return self.kind is not Kind.NONE
