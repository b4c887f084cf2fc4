"""Scanning lines against a signature library, in linear time.

The scan joins the (length-capped) lines into one UTF-8 buffer and runs a single RE2 program, the
alternation of every signature's pattern, over it. RE2 matches in time linear in the input, so
ordinary lines are rejected at the speed of one DFA pass and no input can make a pattern
backtrack. Only the lines where the combined program finds a match are looked at again: an RE2
set says which signatures match, the first in priority order classifies the line, and its own
pattern supplies the named groups. Repeats are then grouped into match groups and Python tracebacks
are assembled per stream (host, rank, local rank) into the finding of their exception line.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Sequence
from typing import Any, TypeVar

import re2

from detection.core.constants import (
    MAX_CLASSIFIED_LINES,
    MAX_FINDING_LINES,
    MAX_FINDING_VALUES,
    MAX_LINE_CHARS,
)
from detection.core.signatures.fields import extract_fields
from detection.core.signatures.model import (
    Details,
    LineFields,
    LineHit,
    MatchGroup,
    Refinement,
    ScanResult,
    Signature,
    compile_re,
    re2_options,
)
from fleet.core.taxonomy import Category

_EXCEPTION_START = compile_re(r"^(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Exit|Interrupt)\b")
_NUMBERS = compile_re(r"0x[0-9A-Fa-f]+|\d+")
# A plain character class: linear in the stdlib engine too, and cheaper to call on a str.
_ASCII_DIGIT = re.compile("[0-9]")
_MAX_STREAMS = 100_000
_MAX_TEXT = 2000
# Exact repeats of short lines reuse their first classification.
_MEMO_LINE_BYTES = 1024
_MEMO_ENTRIES = 50_000
_BENIGN = "benign"
_NOTHING = "nothing"
_TRACEBACK = "traceback"
_LAYOUT = "layout"
_MAX_PLACEMENTS = 100_000
_Outcome = LineHit | str


def normalise(message: str) -> str:
    """The shape of a message: numbers and addresses blanked, so repeats group together."""
    head = message[:400]
    # The C-level test for ASCII digits first; other digits (isdigit) are rare.
    digits = _ASCII_DIGIT.search(head) or (not head.isascii() and any(c.isdigit() for c in head))
    shape = _NUMBERS.sub("#", head) if digits else message
    return " ".join(shape.split())[:200]


T = TypeVar("T")


def _remember(target: set[T], value: T | None) -> None:
    if value is not None and len(target) < MAX_FINDING_VALUES:
        target.add(value)


class _Accumulator:
    """Grows one finding while the scan runs."""

    def __init__(self, hit: LineHit) -> None:
        self.first = hit
        self.last_line = hit.line_no
        self.count = 0
        self.lines: list[int] = []
        self.hosts: set[str] = set()
        self.stream_hosts: set[str] = set()
        self.named: set[str] = set()
        self.ranks: set[int] = set()
        self.local_ranks: set[int] = set()
        self.gpus: set[int] = set()
        self.job_ids: set[str] = set()
        self.xids: set[int] = set()
        self.pci_ids: set[str] = set()
        self.rank_values: dict[int, str] = {}
        self.add(hit)

    def add(self, hit: LineHit) -> None:
        self.count += 1
        self.last_line = hit.line_no
        if len(self.lines) < MAX_FINDING_LINES:
            self.lines.append(hit.line_no)
        fields = hit.fields
        _remember(self.hosts, fields.host)
        if fields.host_from_stream:
            _remember(self.stream_hosts, fields.host)
        else:
            _remember(self.named, fields.host)
        _remember(self.ranks, fields.rank)
        for rank in hit.ranks:
            _remember(self.ranks, rank)
        _remember(self.local_ranks, fields.local_rank)
        _remember(self.gpus, fields.gpu)
        _remember(self.job_ids, fields.job_id)
        _remember(self.xids, fields.xid)
        _remember(self.pci_ids, fields.pci)
        if (
            hit.rank_value is not None
            and fields.rank is not None
            and len(self.rank_values) < MAX_FINDING_VALUES
        ):
            self.rank_values.setdefault(fields.rank, hit.rank_value)

    def finding(self) -> MatchGroup:
        first = self.first
        return MatchGroup(
            signature=first.signature,
            classification=first.classification,
            first_line=first.line_no,
            last_line=self.last_line,
            count=self.count,
            text=first.text,
            line_numbers=tuple(self.lines),
            hosts=tuple(sorted(self.hosts)),
            # A host some line names outright counts as named, though other lines only came from it.
            stream_hosts=tuple(sorted(self.stream_hosts - self.named)),
            ranks=tuple(sorted(self.ranks)),
            local_ranks=tuple(sorted(self.local_ranks)),
            gpus=tuple(sorted(self.gpus)),
            job_ids=tuple(sorted(self.job_ids)),
            xids=tuple(sorted(self.xids)),
            pci_ids=tuple(sorted(self.pci_ids)),
            details=first.details,
            rank_values=tuple(sorted(self.rank_values.items())),
            description=first.description,
            message=first.fields.message[:_MAX_TEXT],
        )


class _ScanState:
    """Per-scan mutable state: open tracebacks per stream, groups, counters."""

    def __init__(self) -> None:
        self.frames: dict[tuple[str | None, int | None, int | None], dict[str, str]] = {}
        self.groups: dict[tuple[str, str], _Accumulator] = {}
        self.benign = 0
        self.placements: dict[tuple[int | None, str], None] = {}
        # line -> (outcome, whether its message looks like an exception line)
        self.memo: dict[bytes, tuple[_Outcome, bool]] = {}

    def note_frame(self, fields: LineFields, values: dict[str, str], start: bool) -> None:
        if len(self.frames) >= _MAX_STREAMS and fields.stream not in self.frames:
            return
        if start:
            self.frames[fields.stream] = {}
        elif values.get("tb_file"):
            self.frames[fields.stream] = {
                key: values[key] for key in ("tb_file", "tb_line", "tb_func") if key in values
            }

    def pop_frame(self, fields: LineFields) -> dict[str, str]:
        if _EXCEPTION_START.search(fields.message) is None:
            return {}
        return self.frames.pop(fields.stream, {})

    def place(self, rank: int | None, host: str | None) -> None:
        if host and len(self.placements) < _MAX_PLACEMENTS:
            self.placements.setdefault((rank, host), None)

    def add(self, hit: LineHit) -> None:
        if hit.fields.rank is not None:
            # Any line that shows both its host and its rank says where that rank runs.
            self.place(hit.fields.rank, hit.fields.host)
        key = (hit.signature, hit.group_key)
        accumulator = self.groups.get(key)
        if accumulator is None:
            self.groups[key] = _Accumulator(hit)
        else:
            accumulator.add(hit)


class SignatureLibrary:
    """An ordered set of compiled signatures (earlier ones win) and its prefilter."""

    def __init__(self, signatures: Iterable[Signature]) -> None:
        ordered = tuple(signatures)
        names = [signature.name for signature in ordered]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(f"duplicate signature names: {', '.join(duplicates)}")
        if not ordered:
            raise ValueError("a signature library needs at least one signature")
        self._signatures = ordered
        self._set: Any = re2.Set.SearchSet(re2_options())
        for signature in ordered:
            self._set.Add(signature.pattern)
        self._set.Compile()
        # Line-oriented alternation of every pattern; capture groups are irrelevant here.
        combined = "(?m)" + "|".join(f"(?:{signature.pattern})" for signature in ordered)
        self._prefilter = compile_re(combined, never_capture=True)

    @property
    def signatures(self) -> tuple[Signature, ...]:
        return self._signatures

    def get(self, name: str) -> Signature | None:
        return next((s for s in self._signatures if s.name == name), None)

    def candidates(self, line: str | bytes) -> list[Signature]:
        """The signatures matching ``line``, highest priority first."""
        data = line if isinstance(line, bytes) else line.encode("utf-8", "replace")
        indices = self._set.Match(data) or []
        return [self._signatures[index] for index in sorted(indices)]

    def scan(
        self, lines: Sequence[str], host_hints: Sequence[str | None] | None = None
    ) -> ScanResult:
        """Scan ``lines`` (already decoded, one entry per line).

        ``host_hints[i]``, when given, is the host that line ``i`` is known to come from (for
        example a node's kernel log); a host the line itself names wins over it.
        """
        capped, truncated = _cap(lines)
        return self._scan_blob(_blob(capped), len(capped), truncated, host_hints)

    def scan_block(self, data: bytes) -> ScanResult:
        """Scan a block of UTF-8 text, one line per ``\n`` (a final one ends the last line),
        as ``scan`` would scan its decoded lines, but without decoding or splitting it: the
        combined program runs over the bytes and only the lines it matches are looked at.

        A block that is not valid UTF-8, or holds a line past ``MAX_LINE_CHARS``, goes the
        decoded way, so the result is always the same as ``scan``'s."""
        body = data[:-1] if data.endswith(b"\n") else data
        if not body:
            return self.scan([])
        if not _plain(body):
            return self.scan(body.decode("utf-8", "replace").split("\n"))
        return self._scan_blob(body, body.count(b"\n") + 1, 0, None)

    def _scan_blob(
        self,
        data: bytes | None,
        line_count: int,
        truncated: int,
        host_hints: Sequence[str | None] | None,
    ) -> ScanResult:
        state = _ScanState()
        stopped: int | None = None
        for count, (line_no, line) in enumerate(self._candidate_lines(data)):
            if count >= MAX_CLASSIFIED_LINES:
                stopped = line_no
                break
            hint = (
                host_hints[line_no - 1]
                if host_hints is not None and line_no <= len(host_hints)
                else None
            )
            self._record(line_no, line, hint, state)
        findings = sorted(
            (accumulator.finding() for accumulator in state.groups.values()),
            key=lambda finding: (finding.first_line, finding.signature),
        )
        return ScanResult(
            groups=tuple(findings),
            lines_scanned=line_count if stopped is None else stopped - 1,
            lines_truncated=truncated,
            benign_lines=state.benign,
            stopped_at_line=stopped,
            lines_not_examined=0 if stopped is None else line_count - stopped + 1,
            placements=tuple(state.placements),
        )

    def _record(self, line_no: int, line: bytes, hint: str | None, state: _ScanState) -> None:
        memo = state.memo.get(line) if hint is None else None
        if memo is not None and not (memo[1] and state.frames):
            outcome = memo[0]
        else:
            outcome = self._classify(line_no, line, hint, state)
            if (
                hint is None
                and outcome != _TRACEBACK
                and len(line) <= _MEMO_LINE_BYTES
                and len(state.memo) < _MEMO_ENTRIES
            ):
                message = outcome.fields.message if isinstance(outcome, LineHit) else ""
                exception_like = _EXCEPTION_START.search(message) is not None
                state.memo[line] = (outcome, exception_like or outcome == _NOTHING)
        if isinstance(outcome, LineHit):
            hit = outcome if outcome.line_no == line_no else _at(outcome, line_no)
            state.add(hit)
        elif outcome == _BENIGN:
            state.benign += 1

    def _candidate_lines(self, data: bytes | None) -> Iterable[tuple[int, bytes]]:
        """(1-based line number, text) of each line of ``data`` the combined program matches."""
        if data is None:
            return
        pos = seen = 0
        line_index = 0
        while pos <= len(data):
            start = self._prefilter.find(data, pos)
            if start < 0:
                return
            line_index += data.count(b"\n", seen, start)
            seen = start
            line_start = data.rfind(b"\n", 0, start) + 1
            line_end = data.find(b"\n", start)
            if line_end < 0:
                line_end = len(data)
            yield line_index + 1, data[line_start:line_end]
            pos = line_end + 1

    def _classify(self, line_no: int, line: bytes, hint: str | None, state: _ScanState) -> _Outcome:
        """The hit for one matching line, or why there is none."""
        for signature in self.candidates(line):
            found = signature.regex.match_bytes(line)
            if found is None:  # pragma: no cover - the set said it matches
                continue
            groups = found[2]
            fields = extract_fields(line, groups)
            if fields.host is None and hint:
                fields = dataclasses.replace(fields, host=hint, host_from_stream=True)
            if signature.internal:
                state.note_frame(fields, groups, signature.name == "python_traceback_start")
                return _TRACEBACK
            if signature.layout:
                _place(state, fields, groups)
                return _LAYOUT
            frame = state.pop_frame(fields)
            refinement = _refine(signature, fields.message, {**groups, **frame})
            if refinement is None:
                continue
            if refinement.classification.category is Category.BENIGN:
                return _BENIGN
            details: Details = refinement.details + tuple(sorted(frame.items()))
            return LineHit(
                line_no=line_no,
                signature=(
                    f"{signature.name}_{refinement.variant}"
                    if refinement.variant
                    else signature.name
                ),
                classification=refinement.classification,
                text=line[: _MAX_TEXT * 4].decode("utf-8", "replace")[:_MAX_TEXT],
                fields=fields,
                group_key=refinement.group_key or normalise(fields.message),
                details=details,
                rank_value=refinement.rank_value,
                description=signature.description,
                ranks=refinement.ranks,
            )
        return _NOTHING


def _place(state: _ScanState, fields: LineFields, groups: dict[str, str]) -> None:
    hostlist = groups.get("hostlist")
    if hostlist:
        # PBS: "gpu-2-17/5+gpu-2-18/0" (host/slot, joined by +)
        for entry in hostlist.split("+"):
            state.place(None, entry.split("/", 1)[0])
    else:
        state.place(fields.rank, fields.host)


def _at(hit: LineHit, line_no: int) -> LineHit:
    return dataclasses.replace(hit, line_no=line_no)


def _refine(signature: Signature, message: str, values: dict[str, str]) -> Refinement | None:
    if signature.refine is None:
        return Refinement(signature.classification)
    return signature.refine(signature.classification, message, values)


def _blob(lines: Sequence[str]) -> bytes | None:
    """The lines as one UTF-8 buffer, one per line (None for no lines)."""
    if not lines:
        return None
    blob = "\n".join(lines)
    if blob.count("\n") != len(lines) - 1:
        # A line with an embedded newline would shift every later line number.
        blob = "\n".join(line.replace("\n", " ") for line in lines)
    return blob.encode("utf-8", "replace")


def _plain(data: bytes) -> bool:
    """Valid UTF-8 with no line past ``MAX_LINE_CHARS``: the bytes are what ``scan`` would
    match after decoding, capping and encoding again. (Bytes within the cap are characters
    within it; a line past it in bytes goes the decoded way, which decides.)"""
    if not data.isascii():
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            return False
    if not _may_hold_a_long_line(data):
        return True
    # Splitting and measuring run in C: cheaper than a regex pass over the block.
    return max(map(len, data.split(b"\n"))) <= MAX_LINE_CHARS


def _may_hold_a_long_line(data: bytes) -> bool:
    """False when no line of ``data`` is past ``MAX_LINE_CHARS`` bytes. Such a line would hold
    one of the half-width windows laid end to end over the block whole, so a newline in every
    window rules it out: a few memchr calls per block instead of splitting it into lines."""
    width = MAX_LINE_CHARS // 2
    return any(
        data.find(b"\n", start, start + width) < 0
        for start in range(0, len(data) - width + 1, width)
    )


def _cap(lines: Sequence[str]) -> tuple[Sequence[str], int]:
    """Lines cut to ``MAX_LINE_CHARS``; the common case (nothing to cut) costs one C-level pass."""
    if not lines or max(map(len, lines)) <= MAX_LINE_CHARS:
        return lines, 0
    truncated = sum(1 for line in lines if len(line) > MAX_LINE_CHARS)
    return [line[:MAX_LINE_CHARS] for line in lines], truncated
