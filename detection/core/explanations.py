"""The words of a diagnosis: how a root cause, its companions and where the fault lies are
described to an operator, and which lines are shown as evidence."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from detection.core.constants import MAX_EVIDENCE, MAX_EVIDENCE_TEXT
from detection.core.context import DiagnosisContext, hosts_of
from detection.core.interruption import Evidence
from detection.core.signatures import MatchGroup


def label(finding: MatchGroup) -> str:
    return finding.signature.replace("_", " ")


def where(finding: MatchGroup, ctx: DiagnosisContext) -> str:
    hosts = sorted(hosts_of(finding, ctx))
    parts = []
    if hosts:
        parts.append("on " + ", ".join(hosts[:5]) + (" ..." if len(hosts) > 5 else ""))
    if finding.ranks:
        ranks = ", ".join(str(rank) for rank in finding.ranks[:8])
        parts.append(f"rank {ranks}" + (" ..." if len(finding.ranks) > 8 else ""))
    return (" " + " ".join(parts)) if parts else ""


def describe(finding: MatchGroup, ctx: DiagnosisContext) -> str:
    what = finding.description.rstrip(".") or label(finding)
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
        f"Root cause at line {finding.first_line}{where(finding, ctx)}{repeat}: {what}"
        f' — "{quoted}"{frame_text}'
    )


_XID_GRADE = {
    True: "NVIDIA's catalogue calls for a GPU reset or reboot",
    False: "NVIDIA's catalogue lists it as usually caused by the application; not a node fault",
}


def others_sentence(
    others: Sequence[MatchGroup], cascades: Sequence[MatchGroup], hints: Sequence[MatchGroup]
) -> str:
    parts = []
    if others:
        parts.append(f"{len(others)} other error group(s) were logged after or alongside it")
    if cascades:
        names = ", ".join(sorted({label(f) for f in cascades})[:4])
        count = sum(f.count for f in cascades)
        parts.append(f"{count} line(s) look like consequences ({names})")
    if hints:
        count = sum(f.count for f in hints)
        parts.append(f"{count} hint/context line(s) were not counted as causes")
    return ("; ".join(parts) + ".") if parts else ""


def where_sentence(
    primary: MatchGroup, hosts: dict[str, str], ambiguous: bool, node_local: bool
) -> str:
    """Where the evidence puts the fault, and how the excerpt named the node."""
    if ambiguous:
        return (
            "Several hosts report the error, so the fault is on a peer they share: no single"
            " node is shown to be at fault."
        )
    if not node_local:
        return ""
    if hosts:
        named = "; ".join(f"{host} ({origin})" for host, origin in sorted(hosts.items()))
        return f"The evidence puts the fault on the node: {named}."
    return (
        f"The evidence puts the fault on the node that logged line {primary.first_line}; the"
        " excerpt does not say which node that is."
    )


def detail_of(primary: MatchGroup) -> str:
    """What to fix, as the evidence names it: the exception and where it was raised."""
    exception = primary.detail("exception")
    if exception is None:
        return ""
    message = (primary.detail("exception_message") or "")[:200]
    text = f"{exception}: {message}" if message else exception
    frame = primary.detail("tb_file")
    if frame:
        text += f", raised in {primary.detail('tb_func')} at {frame}:{primary.detail('tb_line')}"
    return text


def evidence_of(findings: Iterable[MatchGroup]) -> tuple[Evidence, ...]:
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
