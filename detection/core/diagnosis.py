"""Diagnose a log excerpt: what failed, where the evidence puts the fault, and how sure we are.
What to do about it is the policy's (``remediation``); this only reads the evidence.

Pure functions over decoded lines (or raw bytes, see ``diagnose_bytes``). The rule set:

* The **earliest initiating** finding is the root cause; NCCL timeouts, "remote process exited",
  launcher reports and "previous CUDA error" lines are cascades and only decide the diagnosis when
  nothing initiating was logged. Context lines (``CUDA_LAUNCH_BLOCKING`` hints, flight-recorder
  dumps) never cause anything, with one exception: a node-local event that is no failure by
  itself (a link that went down) explains cascades that follow it.
* One exception to "earliest": evidence that a node failed (a graded Xid, ECC, a node failure)
  outranks an earlier application-level symptom, because a failing GPU surfaces in the job as a
  CUDA error before the kernel's line reaches the log. Among such evidence, the kind that names
  its node comes first, then the graver, then the earlier.
* Node-local evidence names its node where the excerpt allows: in the line, by the log it was
  read from, through the rank -> node layout (the caller's, or the excerpt's own NCCL init and
  report lines), as the node whose log the excerpt is, or as the only node the excerpt shows.
  It is node-local even when no host is known. Relative evidence (an InfiniBand completion
  error between peers, a rank slower than the others) is node-local only where it names a host,
  and not when several hosts report it (the peer they share is the culprit).
* Only NCCL timeouts everywhere: a hang; a node is suspected only when exactly one rank is
  missing from the timeouts or disagrees about the collective's sequence number.
* A cancellation (``scancel``, a requeue) followed only by the teardown it causes is no failure.
* Values across lines are findings too (``trends``): a loss that jumped and stayed up, and a
  performance report with one member far behind.
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from collections.abc import Sequence

from detection.core.constants import (
    MAX_CLASSIFIED_LINES,
    SEVERITY_RANK,
    Role,
    Severity,
)
from detection.core.context import DiagnosisContext, hosts_of
from detection.core.decoding import DecodeReport, decode_bytes
from detection.core.explanations import (
    describe,
    detail_of,
    evidence_of,
    label,
    others_sentence,
    where_sentence,
)
from detection.core.interruption import Confidence, Evidence, HostOrigin, Interruption
from detection.core.shape import read_shape
from detection.core.signatures import (
    MatchGroup,
    ScanResult,
    SignatureLibrary,
    default_library,
    scan_lines,
)
from detection.core.telemetry import LogLine
from detection.core.trends import LAGGING_MEMBER, trend_findings
from fleet.core.taxonomy import Attribution, Category, ConfidenceLabel, Kind

# --- entry points ---------------------------------------------------------------------------


def diagnose_lines(
    lines: Sequence[str],
    context: DiagnosisContext | None = None,
    *,
    library: SignatureLibrary | None = None,
    host_hints: Sequence[str | None] | None = None,
    silent: bool = False,
) -> Interruption:
    """Diagnose decoded lines (one entry per line). ``silent``: the job is known to have gone
    silent, a consequence the lines themselves may not show."""
    scan = scan_lines(lines, library=library, host_hints=host_hints)
    found = trend_findings(lines)
    if found:
        groups = sorted((*scan.groups, *found), key=lambda g: (g.first_line, g.signature))
        scan = dataclasses.replace(scan, groups=tuple(groups))
    return read_shape(diagnose_scan(scan, context, silent=silent), lines)


def diagnose_bytes(
    data: bytes,
    context: DiagnosisContext | None = None,
    *,
    library: SignatureLibrary | None = None,
) -> tuple[Interruption, DecodeReport]:
    """Any bytes in, the excerpt's interruption and what decoding changed out."""
    lines, report = decode_bytes(data)
    return diagnose_lines(lines, context, library=library), report


def diagnose_log_lines(
    log_lines: Sequence[LogLine],
    context: DiagnosisContext | None = None,
    *,
    library: SignatureLibrary | None = None,
) -> Interruption:
    """Diagnose telemetry records; a record's ``host`` says which node's system log it is."""
    texts = [line.text for line in log_lines]
    hints = [line.host for line in log_lines]
    return diagnose_lines(texts, context, library=library or default_library(), host_hints=hints)


def diagnose_scan(
    scan: ScanResult, context: DiagnosisContext | None = None, *, silent: bool = False
) -> Interruption:
    """The decision step: match groups in, the interruption (kind ``none`` if healthy) out."""
    ctx = (context or DiagnosisContext()).with_excerpt_layout(scan.placements)
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
    explaining = [h for h in hints if h.implicates_node]
    if not initiating and (cascades or silent) and explaining:
        # Only consequences were logged (or the job fell silent), but a node-local event (its
        # link went down) came first: that event is why.
        initiating, hints = tuple(explaining), tuple(h for h in hints if h not in explaining)
    if initiating:
        found = _from_initiating(_primary(initiating, ctx), initiating, cascades, hints, ctx)
    elif _cancelled_by_a_person(cascades, hints):
        found = _cancelled(cascades, hints)
    elif cascades:
        found = _from_cascades(cascades, hints, ctx)
    else:
        found = _healthy(scan, hints)
    if scan.stopped_at_line is None:
        return found
    note = (
        f" The scan stopped at line {scan.stopped_at_line} after {MAX_CLASSIFIED_LINES} matching"
        f" lines; {scan.lines_not_examined} line(s) from there on were not examined."
    )
    return dataclasses.replace(found, explanation=found.explanation + note)


# --- decisions ------------------------------------------------------------------------------

# Line numbers belong to the excerpt; a summary stands without them.
_LINE_REFERENCE = re.compile(r" at line \d+")


def _interruption(
    primary: MatchGroup | None,
    kind: Kind,
    category: Category,
    attribution: Attribution,
    confidence: Confidence,
    evidence: tuple[Evidence, ...],
    explanation: str,
    hosts: dict[str, str] | None = None,
    node_local: bool = False,
    detail: str = "",
) -> Interruption:
    named = tuple(sorted(hosts or {}))
    signature = primary.signature if primary else (evidence[0].signature if evidence else "")
    cause = signature or category.value
    return Interruption(
        kind=kind,
        category=category,
        attribution=attribution,
        confidence=confidence,
        root_cause=f"{cause}:{','.join(named)}" if named else cause,
        summary=_LINE_REFERENCE.sub("", explanation.split(". ")[0])[:500],
        explanation=explanation,
        hosts=named,
        evidence=evidence,
        signature=signature,
        node_local=node_local,
        host_origins=tuple(sorted((hosts or {}).items())),
        pci_ids=primary.pci_ids if primary else (),
        detail=detail,
    )


# Evidence that is relative (a completion error between two peers, a rank slower than the
# others) puts the fault on a node only where it singles the node out; a node's own adapter
# failing (an HCA's fatal event, its link going down) does so whether or not it is named.
_RELATIVE = frozenset({"nccl_ib_completion_error", "straggler_warning", LAGGING_MEMBER})
# A node's own failure outranks the earlier symptoms it causes in the job.
_NODE_FAULTS = frozenset({Category.GPU_HARDWARE, Category.NODE_OR_PROCESS_FAILURE})


def _primary(initiating: Sequence[MatchGroup], ctx: DiagnosisContext) -> MatchGroup:
    """The root cause among initiating findings (they arrive sorted by first line)."""
    node_faults = [
        f
        for f in initiating
        if f.category in _NODE_FAULTS
        and f.implicates_node
        and SEVERITY_RANK[f.severity] >= SEVERITY_RANK[Severity.ERROR]
    ]
    if node_faults:
        # The evidence that says which node beats evidence that only says "a node"; then the
        # graver (a fallen-off GPU over the launch failure it caused); then the earlier.
        return min(
            node_faults,
            key=lambda f: (not hosts_of(f, ctx), -SEVERITY_RANK[f.severity], f.first_line),
        )
    serious = [f for f in initiating if SEVERITY_RANK[f.severity] >= SEVERITY_RANK[Severity.ERROR]]
    return serious[0] if serious else initiating[0]


def _implicated(
    primary: MatchGroup, initiating: Sequence[MatchGroup], ctx: DiagnosisContext
) -> tuple[dict[str, str], bool]:
    """(hosts with evidence against them and how each was named, whether it was ambiguous)."""
    if not primary.implicates_node:
        return {}, False
    related = [f for f in initiating if f.implicates_node and f.category is primary.category]
    hosts: dict[str, str] = {}
    for finding in related:
        for host, origin in hosts_of(finding, ctx).items():
            hosts.setdefault(host, origin)
    if primary.category is Category.INTERCONNECT_NETWORK and len(hosts) > 1:
        # Several hosts see completion errors: the fault is on the peer they share, which the
        # log names only by address.
        return {}, True
    return hosts, False


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
) -> Interruption:
    hosts, ambiguous = _implicated(primary, initiating, ctx)
    others = [f for f in initiating if f is not primary]
    unnamed_relative = primary.signature in _RELATIVE and not hosts
    node_local = primary.implicates_node and not ambiguous and not unnamed_relative
    attribution = primary.attribution
    if unnamed_relative and primary.category is Category.STRAGGLER:
        # A slowdown no node is named for is nobody's fault yet: it is reported.
        attribution = Attribution.NONE
    explanation = " ".join(
        part
        for part in (
            describe(primary, ctx) + ".",
            others_sentence(others, cascades, hints),
            where_sentence(primary, hosts, ambiguous, node_local),
        )
        if part
    )
    return _interruption(
        primary,
        kind=primary.kind,
        category=primary.category,
        attribution=attribution,
        confidence=_confidence(primary, ambiguous),
        evidence=evidence_of([primary, *others, *cascades, *hints]),
        explanation=explanation,
        hosts=hosts,
        node_local=node_local,
        detail=detail_of(primary),
    )


_CASCADE_PREFERENCE = (
    Category.INTERCONNECT_NETWORK,
    Category.GPU_HARDWARE,
    Category.APPLICATION_ERROR,
    Category.NODE_OR_PROCESS_FAILURE,
)


def _from_cascades(
    cascades: Sequence[MatchGroup], hints: Sequence[MatchGroup], ctx: DiagnosisContext
) -> Interruption:
    hangs = [f for f in cascades if f.category is Category.NCCL_TIMEOUT_HANG]
    if hangs and not _network_failed_first(hangs, cascades):
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
        f" ({label(lead)}); the root cause is not in this excerpt, and no host is shown to be"
        " at fault."
    )
    return _interruption(
        lead,
        kind=Kind.CRASH,
        category=lead.category,
        attribution=lead.attribution,
        confidence=Confidence(0.4, ConfidenceLabel.HYPOTHESIS),
        evidence=evidence_of([*ordered, *hints]),
        explanation=explanation,
    )


# The process group taking its process down "after an error or timeout": it says neither.
_TEARDOWN_ONLY = frozenset({"nccl_abort_aftermath"})


def _network_failed_first(hangs: Sequence[MatchGroup], cascades: Sequence[MatchGroup]) -> bool:
    """No collective timed out (only the teardown that follows an error or a timeout), and the
    network's errors came before it: the collectives failed on the network, they did not hang."""
    if any(f.signature not in _TEARDOWN_ONLY for f in hangs):
        return False
    first_hang = min(f.first_line for f in hangs)
    return any(
        f.category is Category.INTERCONNECT_NETWORK and f.first_line < first_hang for f in cascades
    )


# What a hang's first timeout waited on, where it is not NCCL's collectives.
_WAITED_ON = {
    "device_stream_timeout": "An accelerator stream's tasks",
    "expert_dispatch_timeout": "An expert-parallel dispatch or combine",
}


def _hang(
    hangs: Sequence[MatchGroup],
    cascades: Sequence[MatchGroup],
    hints: Sequence[MatchGroup],
    ctx: DiagnosisContext,
) -> Interruption:
    reporting = sorted({rank for finding in hangs for rank in finding.ranks})
    suspect = _suspect_rank(hangs, reporting, ctx)
    host = ctx.host_of_rank(suspect[0]) if suspect is not None else None
    parts = [
        f"{_WAITED_ON.get(hangs[0].signature, 'NCCL collectives')} timed out"
        f" (first at line {hangs[0].first_line}"
        + (f", on {len(reporting)} rank(s)" if reporting else "")
        + ") and nothing logged says why: a hang."
    ]
    if suspect is not None:
        parts.append(suspect[1] + (f", which ran on {host}." if host else "."))
    hosts: dict[str, str] = {}
    if host:
        parts.append(f"{host} is suspected; this is a hypothesis, not established.")
        hosts = {host: HostOrigin.RANK}
        confidence = Confidence(0.45, ConfidenceLabel.HYPOTHESIS)
    else:
        label = ConfidenceLabel.SUPPORTED if len(reporting) >= 2 else ConfidenceLabel.HYPOTHESIS
        confidence = Confidence(0.7 if len(reporting) >= 2 else 0.5, label)
    others = [f for f in cascades if f not in hangs]
    return _interruption(
        hangs[0],
        kind=Kind.HANG,
        category=Category.NCCL_TIMEOUT_HANG,
        # A collective's watchdog reads as the network; a device runtime's own wait, as its
        # system software.
        attribution=hangs[0].attribution,
        confidence=confidence,
        evidence=evidence_of([*hangs, *others, *hints]),
        explanation=" ".join(parts),
        hosts=hosts,
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


def _cancelled_by_a_person(cascades: Sequence[MatchGroup], hints: Sequence[MatchGroup]) -> bool:
    """Only a cancellation and the teardown it causes (launchers killing their children)."""
    if not any(h.signature == "slurm_cancelled" for h in hints):
        return False
    return all(
        f.category is Category.NODE_OR_PROCESS_FAILURE and f.attribution is Attribution.NONE
        for f in cascades
    )


def _cancelled(cascades: Sequence[MatchGroup], hints: Sequence[MatchGroup]) -> Interruption:
    cancel = next(h for h in hints if h.signature == "slurm_cancelled")
    return _interruption(
        cancel,
        kind=Kind.NONE,
        category=Category.BENIGN,
        attribution=Attribution.NONE,
        confidence=Confidence(0.7, ConfidenceLabel.SUPPORTED),
        evidence=evidence_of([cancel, *cascades, *hints]),
        explanation=(
            f"The job was cancelled at line {cancel.first_line} ({label(cancel)}) and nothing"
            " failed before it; the processes that ended after it are its teardown."
        ),
    )


def _healthy(scan: ScanResult, hints: Sequence[MatchGroup]) -> Interruption:
    logged = [h for h in hints if h.category is Category.GPU_HARDWARE and h.xids]
    if logged:
        # A non-fatal hardware event (a corrected NVLink error, a row remap that is already in
        # effect): worth recording against the node, nothing failed.
        return _interruption(
            logged[0],
            kind=Kind.NONE,
            category=Category.GPU_HARDWARE,
            attribution=Attribution.HARDWARE,
            confidence=Confidence(0.7, ConfidenceLabel.SUPPORTED),
            evidence=evidence_of(hints),
            explanation=(
                f"A non-fatal GPU event was logged at line {logged[0].first_line}"
                f" ({label(logged[0])}); nothing failed."
            ),
        )
    benign = f"; {scan.benign_lines} known-benign line(s) ignored" if scan.benign_lines else ""
    noted = f"; {len(hints)} context line group(s) noted" if hints else ""
    sureness = ConfidenceLabel.SUPPORTED if scan.lines_scanned else ConfidenceLabel.HYPOTHESIS
    return _interruption(
        None,
        kind=Kind.NONE,
        category=Category.BENIGN,
        attribution=Attribution.NONE,
        confidence=Confidence(0.7 if scan.lines_scanned else 0.3, sureness),
        evidence=evidence_of(hints),
        explanation=(
            f"No failure signature matched in {scan.lines_scanned} line(s){benign}{noted}."
        ),
    )
