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
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from detection.constants import (
    DEFAULT_GPUS_PER_NODE,
    MAX_CLASSIFIED_LINES,
    MAX_EVIDENCE,
    MAX_EVIDENCE_TEXT,
    MAX_LINE_BYTES,
    SEVERITY_RANK,
    Action,
    Attribution,
    Category,
    ConfidenceLabel,
    Kind,
    Role,
    Severity,
)
from detection.signatures import (
    Finding,
    ScanResult,
    SignatureLibrary,
    default_library,
    scan_lines,
)
from detection.telemetry import LogLine

# --- records --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Confidence:
    """How sure the diagnosis is: a value in [0, 1] and the label an operator reads."""

    value: float
    label: ConfidenceLabel

    def to_dict(self) -> dict[str, object]:
        return {"value": self.value, "label": self.label.value}


@dataclass(frozen=True)
class Evidence:
    """One log line behind a diagnosis (1-based line number)."""

    line: int
    text: str
    signature: str

    def to_dict(self) -> dict[str, object]:
        return {"line": self.line, "text": self.text, "signature": self.signature}


@dataclass(frozen=True)
class Diagnosis:
    """The answer for one log excerpt, with the fields of DESIGN.md §3."""

    kind: Kind
    category: Category
    attribution: Attribution
    action: Action
    implicated_hosts: tuple[str, ...]
    confidence: Confidence
    evidence: tuple[Evidence, ...]
    explanation: str

    def to_dict(self) -> dict[str, object]:
        """The JSON object ``manage.py diagnose`` prints."""
        return {
            "kind": self.kind.value,
            "category": self.category.value,
            "attribution": self.attribution.value,
            "action": self.action.value,
            "implicated_hosts": list(self.implicated_hosts),
            "confidence": self.confidence.to_dict(),
            "evidence": [item.to_dict() for item in self.evidence],
            "explanation": self.explanation,
        }


@dataclass(frozen=True)
class DiagnosisContext:
    """What the caller knows about the attempt the log belongs to.

    ``nodes`` is the attempt's node list in rank order: rank ``r`` ran on
    ``nodes[r // gpus_per_node]`` unless the log says otherwise. ``source_host`` is set when the
    whole excerpt is one node's own system log (kernel messages such as NVRM Xid lines).
    """

    nodes: tuple[str, ...] = ()
    gpus_per_node: int = DEFAULT_GPUS_PER_NODE
    world_size: int | None = None
    source_host: str | None = None

    def host_of_rank(self, rank: int) -> str | None:
        if self.gpus_per_node <= 0 or rank < 0:
            return None
        index = rank // self.gpus_per_node
        return self.nodes[index] if index < len(self.nodes) else None

    def canonical_host(self, host: str) -> str:
        """``gpu187.cluster.local`` is ``gpu187`` when the node list says so."""
        if host in self.nodes:
            return host
        short = host.split(".", 1)[0]
        return short if short in self.nodes else host

    @property
    def expected_world_size(self) -> int | None:
        if self.world_size:
            return self.world_size
        return len(self.nodes) * self.gpus_per_node if self.nodes else None


@dataclass(frozen=True)
class DecodeReport:
    """What decoding raw bytes skipped or changed, so a caller can say so."""

    bytes_read: int
    lines: int
    invalid_utf8_replaced: int
    nul_bytes_stripped: int
    lines_truncated: int
    bytes_truncated: int

    def to_dict(self) -> dict[str, int]:
        return {
            "bytes_read": self.bytes_read,
            "lines": self.lines,
            "invalid_utf8_replaced": self.invalid_utf8_replaced,
            "nul_bytes_stripped": self.nul_bytes_stripped,
            "lines_truncated": self.lines_truncated,
            "bytes_truncated": self.bytes_truncated,
        }


# --- decoding -------------------------------------------------------------------------------

_REPLACEMENT = "\ufffd"
_ENCODED_REPLACEMENT = _REPLACEMENT.encode()


def decode_bytes(
    data: bytes, *, max_line_bytes: int = MAX_LINE_BYTES
) -> tuple[tuple[str, ...], DecodeReport]:
    """Decode arbitrary bytes into lines; never raises, linear in ``len(data)``.

    Lines split at ``\\n``, ``\\r\\n`` and ``\\r`` (progress bars redraw with ``\\r``). NUL bytes
    are dropped, lines longer than ``max_line_bytes`` are cut (at a character boundary) before
    decoding, and invalid UTF-8 becomes U+FFFD. The report counts each of these.
    """
    nul = data.count(b"\x00")
    if nul:
        data = data.replace(b"\x00", b"")
    lines: list[str] = []
    invalid = truncated = cut_bytes = 0
    for raw in data.splitlines():
        if len(raw) > max_line_bytes:
            truncated += 1
            cut = _char_boundary(raw, max_line_bytes)
            cut_bytes += len(raw) - cut
            raw = raw[:cut]
        text = raw.decode("utf-8", "replace")
        if _REPLACEMENT in text:
            invalid += text.count(_REPLACEMENT) - raw.count(_ENCODED_REPLACEMENT)
        lines.append(text)
    report = DecodeReport(
        bytes_read=len(data) + nul,
        lines=len(lines),
        invalid_utf8_replaced=invalid,
        nul_bytes_stripped=nul,
        lines_truncated=truncated,
        bytes_truncated=cut_bytes,
    )
    return tuple(lines), report


def _char_boundary(raw: bytes, limit: int) -> int:
    """The largest cut <= limit that does not split a UTF-8 sequence."""
    cut = limit
    # Step back over continuation bytes (10xxxxxx), at most three of them.
    while cut > limit - 3 and cut > 0 and 0x80 <= raw[cut] <= 0xBF:
        cut -= 1
    return cut


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
    return dataclasses.replace(diagnosis, explanation=diagnosis.explanation + note)


# --- decisions ------------------------------------------------------------------------------


def _primary(initiating: Sequence[Finding]) -> Finding:
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


def _hosts_of(finding: Finding, ctx: DiagnosisContext) -> set[str]:
    if finding.hosts:
        return {ctx.canonical_host(host) for host in finding.hosts}
    mapped = {ctx.host_of_rank(rank) for rank in finding.ranks}
    hosts = {host for host in mapped if host is not None}
    if hosts:
        return hosts
    return {ctx.source_host} if ctx.source_host else set()


def _implicated(
    primary: Finding, initiating: Sequence[Finding], ctx: DiagnosisContext
) -> tuple[tuple[str, ...], bool]:
    """(hosts with evidence against them, whether the evidence was ambiguous)."""
    if not primary.implicates_node:
        return (), False
    related = [f for f in initiating if f.implicates_node and f.category is primary.category]
    hosts: set[str] = set()
    for finding in related:
        hosts |= _hosts_of(finding, ctx)
    if primary.category is Category.INTERCONNECT_NETWORK and len(hosts) > 1:
        # Several hosts see completion errors: the fault is on the peer they share, which the
        # log names only by address.
        return (), True
    return tuple(sorted(hosts)), False


def _confidence(primary: Finding, ambiguous: bool) -> Confidence:
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
    primary: Finding,
    initiating: Sequence[Finding],
    cascades: Sequence[Finding],
    hints: Sequence[Finding],
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
            _describe(primary, ctx) + ".",
            _others_sentence(others, cascades, hints),
            _action_sentence(action, primary, hosts, ambiguous),
        )
        if part
    )
    return Diagnosis(
        kind=primary.kind,
        category=primary.category,
        attribution=primary.attribution,
        action=action,
        implicated_hosts=hosts,
        confidence=_confidence(primary, ambiguous),
        evidence=_evidence([primary, *others, *cascades, *hints]),
        explanation=explanation,
    )


_CASCADE_PREFERENCE = (
    Category.INTERCONNECT_NETWORK,
    Category.GPU_HARDWARE,
    Category.APPLICATION_ERROR,
    Category.NODE_OR_PROCESS_FAILURE,
)


def _from_cascades(
    cascades: Sequence[Finding], hints: Sequence[Finding], ctx: DiagnosisContext
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
        f" ({_label(lead)}); the root cause is not in this excerpt. Restarting without excluding"
        " a node, since no host is shown to be at fault."
    )
    return Diagnosis(
        kind=Kind.CRASH,
        category=lead.category,
        attribution=lead.attribution,
        action=Action.RESTART,
        implicated_hosts=(),
        confidence=Confidence(0.4, ConfidenceLabel.HYPOTHESIS),
        evidence=_evidence([*ordered, *hints]),
        explanation=explanation,
    )


def _hang(
    hangs: Sequence[Finding],
    cascades: Sequence[Finding],
    hints: Sequence[Finding],
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
    return Diagnosis(
        kind=Kind.HANG,
        category=Category.NCCL_TIMEOUT_HANG,
        attribution=Attribution.INTERCONNECT,
        action=action,
        implicated_hosts=hosts,
        confidence=confidence,
        evidence=_evidence([*hangs, *others, *hints]),
        explanation=" ".join(parts),
    )


def _suspect_rank(
    hangs: Sequence[Finding], reporting: Sequence[int], ctx: DiagnosisContext
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


def _healthy(scan: ScanResult, hints: Sequence[Finding]) -> Diagnosis:
    benign = f"; {scan.benign_lines} known-benign line(s) ignored" if scan.benign_lines else ""
    noted = f"; {len(hints)} context line group(s) noted" if hints else ""
    label = ConfidenceLabel.SUPPORTED if scan.lines_scanned else ConfidenceLabel.HYPOTHESIS
    return Diagnosis(
        kind=Kind.NONE,
        category=Category.BENIGN,
        attribution=Attribution.NONE,
        action=Action.NONE,
        implicated_hosts=(),
        confidence=Confidence(0.7 if scan.lines_scanned else 0.3, label),
        evidence=_evidence(hints),
        explanation=(
            f"No failure signature matched in {scan.lines_scanned} line(s){benign}{noted}."
        ),
    )


# --- wording and evidence -------------------------------------------------------------------


def _label(finding: Finding) -> str:
    return finding.signature.replace("_", " ")


def _where(finding: Finding, ctx: DiagnosisContext) -> str:
    hosts = sorted(_hosts_of(finding, ctx))
    parts = []
    if hosts:
        parts.append("on " + ", ".join(hosts[:5]) + (" ..." if len(hosts) > 5 else ""))
    if finding.ranks:
        ranks = ", ".join(str(rank) for rank in finding.ranks[:8])
        parts.append(f"rank {ranks}" + (" ..." if len(finding.ranks) > 8 else ""))
    return (" " + " ".join(parts)) if parts else ""


def _describe(finding: Finding, ctx: DiagnosisContext) -> str:
    what = finding.description.rstrip(".") or _label(finding)
    xid = finding.detail("xid")
    if xid is not None:
        what = f"Xid {xid}, {finding.detail('xid_name')} ({_XID_GRADE[finding.implicates_node]})"
    exception = finding.detail("exception")
    quoted = finding.message[:160]
    if exception is not None:
        message = finding.detail("exception_message") or ""
        quoted = f"{exception}: {message[:140]}" if message else exception
    frame = finding.detail("tb_file")
    frame_text = (
        f", raised in {finding.detail('tb_func')} at {frame}:{finding.detail('tb_line')}"
        if frame
        else ""
    )
    repeat = f" ({finding.count} times)" if finding.count > 1 else ""
    return (
        f"Root cause at line {finding.first_line}{_where(finding, ctx)}{repeat}: {what}"
        f' — "{quoted}"{frame_text}'
    )


_XID_GRADE = {
    True: "NVIDIA's catalogue calls for a GPU reset or reboot",
    False: "NVIDIA's catalogue lists it as usually caused by the application; not a node fault",
}


def _others_sentence(
    others: Sequence[Finding], cascades: Sequence[Finding], hints: Sequence[Finding]
) -> str:
    parts = []
    if others:
        parts.append(f"{len(others)} other error group(s) were logged after or alongside it")
    if cascades:
        names = ", ".join(sorted({_label(f) for f in cascades})[:4])
        count = sum(f.count for f in cascades)
        parts.append(f"{count} line(s) look like consequences ({names})")
    if hints:
        count = sum(f.count for f in hints)
        parts.append(f"{count} hint/context line(s) were not counted as causes")
    return ("; ".join(parts) + ".") if parts else ""


def _action_sentence(
    action: Action, primary: Finding, hosts: Sequence[str], ambiguous: bool
) -> str:
    if action is Action.RESTART_EXCLUDING_NODE:
        return f"Restart without {', '.join(hosts)}: the evidence implicates the node."
    if action is Action.STOP:
        return "Stop: this is an application error a retry cannot fix."
    if ambiguous:
        return "Restart: several hosts report the error, so no single node is shown to be at fault."
    if primary.implicates_node:
        return "Restart: the evidence implicates a node but the log does not say which."
    return "Restart."


def _evidence(findings: Iterable[Finding]) -> tuple[Evidence, ...]:
    seen: set[tuple[str, str]] = set()
    items: list[Evidence] = []
    for finding in findings:
        text = finding.text[:MAX_EVIDENCE_TEXT]
        key = (finding.signature, text)
        if key in seen:
            continue
        seen.add(key)
        items.append(Evidence(line=finding.first_line, text=text, signature=finding.signature))
        if len(items) >= MAX_EVIDENCE:
            break
    return tuple(items)
