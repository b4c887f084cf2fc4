"""Diagnose a log excerpt: what failed, who is to blame, what to do, and how sure we are.

Pure functions over decoded lines (or raw bytes, see ``diagnose_bytes``). The rule set:

* The **earliest initiating** finding is the root cause; NCCL timeouts, "remote process exited",
  launcher reports and "previous CUDA error" lines are cascades and only decide the diagnosis when
  nothing initiating was logged. Context lines (``CUDA_LAUNCH_BLOCKING`` hints, flight-recorder
  dumps) never cause anything.
* One exception to "earliest": GPU hardware evidence that names a node (Xid 79, uncorrectable
  ECC, NVLink) outranks an earlier application-level symptom, because a failing GPU surfaces in
  the job as a CUDA error before the kernel's Xid line reaches the log.
* ``restart_excluding_node`` only when evidence implicating a node names a host (directly, via
  the rank -> node mapping of the attempt, or because the log is that node's own system log).
  InfiniBand errors reported by more than one host do not name a culprit: the common peer does.
* ``stop`` only when the log establishes an application error a retry cannot fix (import or
  syntax errors, shape mismatches, configuration errors raised by the user's own code).
* Only NCCL timeouts everywhere: a hang, restarted; a node is named only when exactly one rank
  is missing from the timeouts or disagrees about the collective's sequence number.
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from detection.core.constants import (
    MAX_CLASSIFIED_LINES,
    SEVERITY_RANK,
    Role,
    Severity,
)
from detection.core.context import DiagnosisContext, hosts_of
from detection.core.decoding import DecodeReport, decode_bytes
from detection.core.explanations import (
    action_sentence,
    describe,
    evidence_of,
    label,
    others_sentence,
)
from detection.core.interruption import Confidence, Evidence, Interruption
from detection.core.signatures import (
    MatchGroup,
    ScanResult,
    SignatureLibrary,
    default_library,
    scan_lines,
)
from detection.core.telemetry import LogLine
from recovery_console.fleet.core.taxonomy import (
    Action,
    Attribution,
    Category,
    ConfidenceLabel,
    Kind,
)

# --- records --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Diagnosis:
    """What one log excerpt says: the interruption (kind ``none`` when nothing failed) and the
    action its evidence alone suggests. ``to_dict`` is the JSON ``manage.py diagnose`` prints
    (DESIGN.md §3)."""

    interruption: Interruption
    action: Action

    @property
    def kind(self) -> Kind:
        return self.interruption.kind

    @property
    def category(self) -> Category:
        return self.interruption.category

    @property
    def attribution(self) -> Attribution:
        return self.interruption.attribution

    @property
    def implicated_hosts(self) -> tuple[str, ...]:
        return self.interruption.hosts

    @property
    def confidence(self) -> Confidence:
        return self.interruption.confidence

    @property
    def evidence(self) -> tuple[Evidence, ...]:
        return self.interruption.evidence

    @property
    def explanation(self) -> str:
        return self.interruption.explanation

    def to_dict(self) -> dict[str, object]:
        found = self.interruption
        return {
            "kind": found.kind.value,
            "category": found.category.value,
            "attribution": found.attribution.value,
            "action": self.action.value,
            "implicated_hosts": list(found.hosts),
            "confidence": found.confidence.to_dict(),
            "evidence": [
                {"line": item.line, "text": item.text, "signature": item.signature}
                for item in found.evidence
            ],
            "explanation": found.explanation,
        }


# --- entry points ---------------------------------------------------------------------------


def diagnose_lines(
    lines: Sequence[str],
    context: DiagnosisContext | None = None,
    *,
    library: SignatureLibrary | None = None,
    host_hints: Sequence[str | None] | None = None,
) -> Diagnosis:
    """Diagnose decoded lines (one entry per line)."""
    scan = scan_lines(lines, library=library, host_hints=host_hints)
    return diagnose_scan(scan, context)


def diagnose_bytes(
    data: bytes,
    context: DiagnosisContext | None = None,
    *,
    library: SignatureLibrary | None = None,
) -> tuple[Diagnosis, DecodeReport]:
    """The entry point for ``manage.py diagnose``: any bytes in, a diagnosis and a report out."""
    lines, report = decode_bytes(data)
    return diagnose_lines(lines, context, library=library), report


def diagnose_log_lines(
    log_lines: Sequence[LogLine],
    context: DiagnosisContext | None = None,
    *,
    library: SignatureLibrary | None = None,
) -> Diagnosis:
    """Diagnose telemetry records; a record's ``host`` says which node's system log it is."""
    texts = [line.text for line in log_lines]
    hints = [line.host for line in log_lines]
    return diagnose_lines(texts, context, library=library or default_library(), host_hints=hints)


def diagnose_scan(scan: ScanResult, context: DiagnosisContext | None = None) -> Diagnosis:
    """The decision step: findings in, diagnosis out."""
    ctx = context or DiagnosisContext()
    initiating = scan.by_role(Role.INITIATING)
    cascades = scan.by_role(Role.CASCADE)
    hints = scan.by_role(Role.CONTEXT)
    endings = [f for f in initiating if f.attribution is Attribution.SCHEDULER]
    hung = any(f.category is Category.NCCL_TIMEOUT_HANG for f in cascades)
    if endings and (len(endings) < len(initiating) or hung):
        # The scheduler ended an attempt that had already failed or hung: the time limit or
        # preemption is how it ended, not why.
        initiating = tuple(f for f in initiating if f.attribution is not Attribution.SCHEDULER)
        cascades = (*cascades, *endings)
    if initiating:
        diagnosis = _from_initiating(_primary(initiating), initiating, cascades, hints, ctx)
    elif cascades:
        diagnosis = _from_cascades(cascades, hints, ctx)
    else:
        diagnosis = _healthy(scan, hints)
    if scan.stopped_at_line is None:
        return diagnosis
    note = (
        f" The scan stopped at line {scan.stopped_at_line} after {MAX_CLASSIFIED_LINES} matching"
        f" lines; {scan.lines_not_examined} line(s) from there on were not examined."
    )
    found = diagnosis.interruption
    return Diagnosis(
        dataclasses.replace(found, explanation=found.explanation + note), diagnosis.action
    )


# --- decisions ------------------------------------------------------------------------------

# Line numbers belong to the excerpt; a summary stands without them.
_LINE_REFERENCE = re.compile(r" at line \d+")


def _diagnosis(
    kind: Kind,
    category: Category,
    attribution: Attribution,
    action: Action,
    hosts: tuple[str, ...],
    confidence: Confidence,
    evidence: tuple[Evidence, ...],
    explanation: str,
    repeats_on_retry: bool = False,
) -> Diagnosis:
    signature = evidence[0].signature if evidence else category.value
    root_cause = f"{signature}:{','.join(hosts)}" if hosts else signature
    interruption = Interruption(
        kind=kind,
        category=category,
        attribution=attribution,
        confidence=confidence,
        root_cause=root_cause,
        summary=_LINE_REFERENCE.sub("", explanation.split(". ")[0])[:500],
        explanation=explanation,
        hosts=hosts,
        evidence=evidence,
        repeats_on_retry=repeats_on_retry,
    )
    return Diagnosis(interruption, action)


def _primary(initiating: Sequence[MatchGroup]) -> MatchGroup:
    """The root cause among initiating findings (they arrive sorted by first line)."""
    hardware = [
        f
        for f in initiating
        if f.category is Category.GPU_HARDWARE
        and f.implicates_node
        and SEVERITY_RANK[f.severity] >= SEVERITY_RANK[Severity.ERROR]
    ]
    if hardware:
        return hardware[0]
    serious = [f for f in initiating if SEVERITY_RANK[f.severity] >= SEVERITY_RANK[Severity.ERROR]]
    return serious[0] if serious else initiating[0]


def _implicated(
    primary: MatchGroup, initiating: Sequence[MatchGroup], ctx: DiagnosisContext
) -> tuple[tuple[str, ...], bool]:
    """(hosts with evidence against them, whether the evidence was ambiguous)."""
    if not primary.implicates_node:
        return (), False
    related = [f for f in initiating if f.implicates_node and f.category is primary.category]
    hosts: set[str] = set()
    for finding in related:
        hosts |= hosts_of(finding, ctx)
    if primary.category is Category.INTERCONNECT_NETWORK and len(hosts) > 1:
        # Several hosts see completion errors: the fault is on the peer they share, which the
        # log names only by address.
        return (), True
    return tuple(sorted(hosts)), False


def _confidence(primary: MatchGroup, ambiguous: bool) -> Confidence:
    if primary.classification.unrecoverable:
        return Confidence(0.9, ConfidenceLabel.ESTABLISHED)
    if ambiguous:
        return Confidence(0.45, ConfidenceLabel.HYPOTHESIS)
    if primary.severity is Severity.CRITICAL:
        return Confidence(0.95, ConfidenceLabel.ESTABLISHED)
    if primary.severity is Severity.ERROR:
        return Confidence(0.75, ConfidenceLabel.SUPPORTED)
    return Confidence(0.5, ConfidenceLabel.HYPOTHESIS)


def _from_initiating(
    primary: MatchGroup,
    initiating: Sequence[MatchGroup],
    cascades: Sequence[MatchGroup],
    hints: Sequence[MatchGroup],
    ctx: DiagnosisContext,
) -> Diagnosis:
    hosts, ambiguous = _implicated(primary, initiating, ctx)
    if hosts:
        action = Action.RESTART_EXCLUDING_NODE
    elif primary.classification.unrecoverable:
        action = Action.STOP
    else:
        action = Action.RESTART
    others = [f for f in initiating if f is not primary]
    explanation = " ".join(
        part
        for part in (
            describe(primary, ctx) + ".",
            others_sentence(others, cascades, hints),
            action_sentence(action, primary, hosts, ambiguous),
        )
        if part
    )
    return _diagnosis(
        kind=primary.kind,
        category=primary.category,
        attribution=primary.attribution,
        action=action,
        hosts=hosts,
        confidence=_confidence(primary, ambiguous),
        evidence=evidence_of([primary, *others, *cascades, *hints]),
        explanation=explanation,
        repeats_on_retry=primary.classification.unrecoverable,
    )


_CASCADE_PREFERENCE = (
    Category.INTERCONNECT_NETWORK,
    Category.GPU_HARDWARE,
    Category.APPLICATION_ERROR,
    Category.NODE_OR_PROCESS_FAILURE,
)


def _from_cascades(
    cascades: Sequence[MatchGroup], hints: Sequence[MatchGroup], ctx: DiagnosisContext
) -> Diagnosis:
    hangs = [f for f in cascades if f.category is Category.NCCL_TIMEOUT_HANG]
    if hangs:
        return _hang(hangs, cascades, hints, ctx)
    ordered = sorted(
        cascades,
        key=lambda f: (
            _CASCADE_PREFERENCE.index(f.category)
            if f.category in _CASCADE_PREFERENCE
            else len(_CASCADE_PREFERENCE),
            f.first_line,
        ),
    )
    lead = ordered[0]
    explanation = (
        f"Only consequences of a failure were logged, the first at line {lead.first_line}"
        f" ({label(lead)}); the root cause is not in this excerpt. Restarting without excluding"
        " a node, since no host is shown to be at fault."
    )
    return _diagnosis(
        kind=Kind.CRASH,
        category=lead.category,
        attribution=lead.attribution,
        action=Action.RESTART,
        hosts=(),
        confidence=Confidence(0.4, ConfidenceLabel.HYPOTHESIS),
        evidence=evidence_of([*ordered, *hints]),
        explanation=explanation,
    )


def _hang(
    hangs: Sequence[MatchGroup],
    cascades: Sequence[MatchGroup],
    hints: Sequence[MatchGroup],
    ctx: DiagnosisContext,
) -> Diagnosis:
    reporting = sorted({rank for finding in hangs for rank in finding.ranks})
    suspect = _suspect_rank(hangs, reporting, ctx)
    host = ctx.host_of_rank(suspect[0]) if suspect is not None else None
    parts = [
        f"NCCL collectives timed out (first at line {hangs[0].first_line}"
        + (f", on {len(reporting)} rank(s)" if reporting else "")
        + ") and nothing logged says why: a hang."
    ]
    if suspect is not None:
        parts.append(suspect[1] + (f", which ran on {host}." if host else "."))
    hosts: tuple[str, ...] = ()
    if host:
        parts.append(f"Restarting without {host}; this is a hypothesis, not established.")
        action, hosts = Action.RESTART_EXCLUDING_NODE, (host,)
        confidence = Confidence(0.45, ConfidenceLabel.HYPOTHESIS)
    else:
        parts.append("Restarting without excluding a node.")
        action = Action.RESTART
        label = ConfidenceLabel.SUPPORTED if len(reporting) >= 2 else ConfidenceLabel.HYPOTHESIS
        confidence = Confidence(0.7 if len(reporting) >= 2 else 0.5, label)
    others = [f for f in cascades if f not in hangs]
    return _diagnosis(
        kind=Kind.HANG,
        category=Category.NCCL_TIMEOUT_HANG,
        attribution=Attribution.INTERCONNECT,
        action=action,
        hosts=hosts,
        confidence=confidence,
        evidence=evidence_of([*hangs, *others, *hints]),
        explanation=" ".join(parts),
    )


def _suspect_rank(
    hangs: Sequence[MatchGroup], reporting: Sequence[int], ctx: DiagnosisContext
) -> tuple[int, str] | None:
    """The one rank that is clearly missing from the timeouts, or disagrees with the others."""
    values: dict[int, str] = {}
    for finding in hangs:
        for rank, value in finding.rank_values:
            values.setdefault(rank, value)
    if len(values) >= 3:
        common, agreeing = Counter(values.values()).most_common(1)[0]
        odd = [rank for rank, value in values.items() if value != common]
        if len(odd) == 1 and agreeing >= 2:
            return odd[0], (
                f"Rank {odd[0]} timed out on collective {values[odd[0]]} while"
                f" {agreeing} ranks timed out on {common}"
            )
    world = ctx.expected_world_size
    if world is not None and world >= 4 and len(reporting) == world - 1:
        missing = sorted(set(range(world)) - set(reporting))
        if len(missing) == 1:
            return missing[0], f"Every rank but {missing[0]} reported the timeout"
    return None


def _healthy(scan: ScanResult, hints: Sequence[MatchGroup]) -> Diagnosis:
    benign = f"; {scan.benign_lines} known-benign line(s) ignored" if scan.benign_lines else ""
    noted = f"; {len(hints)} context line group(s) noted" if hints else ""
    label = ConfidenceLabel.SUPPORTED if scan.lines_scanned else ConfidenceLabel.HYPOTHESIS
    return _diagnosis(
        kind=Kind.NONE,
        category=Category.BENIGN,
        attribution=Attribution.NONE,
        action=Action.NONE,
        hosts=(),
        confidence=Confidence(0.7 if scan.lines_scanned else 0.3, label),
        evidence=evidence_of(hints),
        explanation=(
            f"No failure signature matched in {scan.lines_scanned} line(s){benign}{noted}."
        ),
    )
