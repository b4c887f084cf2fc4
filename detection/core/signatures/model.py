"""Records of the signature library: signatures, matched lines and match groups.

All frozen. A ``Signature`` carries its compiled RE2 program; everything else is plain data.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import re2

from detection.core.constants import RE2_MAX_MEM, Role, Severity
from fleet.core.taxonomy import Attribution, Category, Kind


def re2_options(*, never_capture: bool = False) -> Any:
    options = re2.Options()
    options.max_mem = RE2_MAX_MEM
    # RE2 would otherwise print parse errors of operator-supplied patterns on stderr.
    options.log_errors = False
    options.never_capture = never_capture
    return options


# RE2's own match entry point, as the ``re2`` module's wrapper calls it. Calling it directly on
# bytes with group indices computed once avoids the wrapper's per-call offset translation,
# which costs more than the match itself on short lines.
_UNANCHORED: Any = re2._Anchor.UNANCHORED


class Regex:
    """A compiled RE2 program (linear time) with a lean bytes-level matcher."""

    __slots__ = ("_compiled", "_names", "_raw", "pattern", "programsize")

    def __init__(self, pattern: str, *, never_capture: bool = False) -> None:
        compiled: Any = re2.compile(pattern, re2_options(never_capture=never_capture))
        self.pattern = pattern
        self._compiled = compiled
        self._raw: Any = compiled._regexp
        self._names: tuple[tuple[str, int], ...] = tuple(compiled.groupindex.items())
        self.programsize = int(compiled.programsize)

    def match_bytes(self, data: bytes, pos: int = 0) -> tuple[int, int, dict[str, str]] | None:
        """(start, end, named groups that took part) of the leftmost match at or after pos."""
        spans = self._raw.Match(_UNANCHORED, data, pos, len(data))
        start, end = spans[0]
        if start < 0:
            return None
        groups: dict[str, str] = {}
        for name, index in self._names:
            first, last = spans[index]
            if first >= 0:
                groups[name] = data[first:last].decode("utf-8", "replace")
        return start, end, groups

    def find(self, data: bytes, pos: int = 0) -> int:
        """Start of the leftmost match at or after ``pos``, or -1."""
        start: int = self._raw.Match(_UNANCHORED, data, pos, len(data))[0][0]
        return start

    def search(self, text: str) -> dict[str, str] | None:
        """The named groups of the first match in ``text``, or None when nothing matches."""
        found = self.match_bytes(text.encode("utf-8", "replace"))
        return None if found is None else found[2]

    def sub(self, replacement: str, text: str) -> str:
        return str(self._compiled.sub(replacement, text))


def compile_re(pattern: str, *, never_capture: bool = False) -> Regex:
    """Compile with RE2 (linear time); raises ``re2.error`` on a bad pattern."""
    return Regex(pattern, never_capture=never_capture)


def re2_error_text(error: BaseException) -> str:
    """RE2 reports its parse errors as bytes; make them readable."""
    raw = error.args[0] if error.args else error
    if isinstance(raw, bytes):
        return raw.decode("utf-8", "replace")
    return str(raw)


@dataclass(frozen=True)
class Classification:
    """What one matched line means."""

    kind: Kind
    category: Category
    attribution: Attribution
    role: Role
    implicates_node: bool
    severity: Severity
    # The log establishes an application error that a retry cannot fix.
    unrecoverable: bool = False


def classify(
    kind: Kind,
    category: Category,
    attribution: Attribution,
    role: Role,
    implicates_node: bool,
    severity: Severity,
    unrecoverable: bool = False,
) -> Classification:
    """A classification in the order the signature tables read best."""
    return Classification(
        kind, category, attribution, role, implicates_node, severity, unrecoverable
    )


class Classified:
    """Shortcuts to a ``classification``'s fields, for signatures and their match groups."""

    classification: Classification

    @property
    def kind(self) -> Kind:
        return self.classification.kind

    @property
    def category(self) -> Category:
        return self.classification.category

    @property
    def attribution(self) -> Attribution:
        return self.classification.attribution

    @property
    def role(self) -> Role:
        return self.classification.role

    @property
    def implicates_node(self) -> bool:
        return self.classification.implicates_node

    @property
    def severity(self) -> Severity:
        return self.classification.severity


Details = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Refinement:
    """A refiner's verdict on one line: its classification and how to group it."""

    classification: Classification
    # Lines with the same signature and group key collapse into one finding; None groups by
    # the normalised message.
    group_key: str | None = None
    details: Details = ()
    # A per-rank value to remember (the NCCL sequence number of a watchdog timeout).
    rank_value: str | None = None
    # Ranks the line names besides its own (a straggler report's list).
    ranks: tuple[int, ...] = ()
    # A named variant of the signature (``nvrm_xid`` + ``application``), which policy rules can
    # single out; it must be one the signature declares.
    variant: str = ""


# (default classification, prefix-stripped message, named groups and traceback fields) ->
# refinement, or None when the line turns out not to be a finding (a benign variant).
Refiner = Callable[[Classification, str, Mapping[str, str]], Refinement | None]


@dataclass(frozen=True)
class Signature(Classified):
    """One recognisable log line: an RE2 pattern and what a match means."""

    name: str
    pattern: str
    classification: Classification
    regex: Regex = field(compare=False, repr=False)
    description: str = ""
    builtin: bool = True
    refine: Refiner | None = field(default=None, compare=False, repr=False)
    # Internal signatures feed the traceback assembler and never become match groups themselves.
    internal: bool = False
    # Layout signatures say where a rank runs (NCCL's init lines, a straggler report's
    # ``Rank=N Node=X``, PBS's exec host); they place ranks on hosts and flag nothing.
    layout: bool = False
    # The variants its refiner may give a line (see ``Refinement.variant``).
    variants: tuple[str, ...] = ()

    @property
    def finding_names(self) -> tuple[str, ...]:
        """The names its findings go by: its own, and one per variant."""
        return (self.name, *(f"{self.name}_{variant}" for variant in self.variants))


class InvalidSignature(ValueError):
    """A custom signature spec was refused; ``reason`` says why, for the operator."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class LineFields:
    """Where a line came from, as far as its prefix and text show."""

    message: str
    host: str | None = None
    rank: int | None = None
    local_rank: int | None = None
    gpu: int | None = None
    job_id: str | None = None
    pci: str | None = None
    xid: int | None = None
    # The host is where the line was read from (a node's own log), not something it says.
    host_from_stream: bool = False

    @property
    def stream(self) -> tuple[str | None, int | None, int | None]:
        """Lines of one process share a stream; tracebacks are assembled per stream."""
        return (self.host, self.rank, self.local_rank)


@dataclass(frozen=True)
class LineHit:
    """One line matched by one signature."""

    line_no: int
    signature: str
    classification: Classification
    text: str
    fields: LineFields
    group_key: str
    details: Details = ()
    rank_value: str | None = None
    description: str = ""
    ranks: tuple[int, ...] = ()


@dataclass(frozen=True)
class MatchGroup(Classified):
    """Repeats of one line (same signature, same normalised message) grouped together.

    A flood of one Xid or the same watchdog line on 512 ranks is one group with a count, the
    first line number and the sets of hosts and ranks it came from.
    """

    signature: str
    classification: Classification
    first_line: int
    last_line: int
    count: int
    text: str
    line_numbers: tuple[int, ...] = ()
    hosts: tuple[str, ...] = ()
    # Of ``hosts``, those known only from where the lines were read.
    stream_hosts: tuple[str, ...] = ()
    ranks: tuple[int, ...] = ()
    local_ranks: tuple[int, ...] = ()
    gpus: tuple[int, ...] = ()
    job_ids: tuple[str, ...] = ()
    xids: tuple[int, ...] = ()
    pci_ids: tuple[str, ...] = ()
    details: Details = ()
    rank_values: tuple[tuple[int, str], ...] = ()
    # The signature's description, for explanations.
    description: str = ""
    # The first occurrence without its launcher/timestamp prefixes.
    message: str = ""

    def detail(self, key: str) -> str | None:
        for name, value in self.details:
            if name == key:
                return value
        return None


@dataclass(frozen=True)
class ScanResult:
    """What a scan found, in order of first appearance."""

    groups: tuple[MatchGroup, ...]
    lines_scanned: int
    lines_truncated: int = 0
    # Lines that matched a known-benign signature (NCCL init-time warnings, normal loss-scale
    # overflows) and were therefore not flagged.
    benign_lines: int = 0
    # Set when the scan stopped after ``MAX_CLASSIFIED_LINES`` matching lines: the first line
    # not examined, and how many lines from there on were not examined.
    stopped_at_line: int | None = None
    lines_not_examined: int = 0
    # Where the excerpt itself places ranks: (rank, host) pairs, rank None for a host the job
    # is said to run on (PBS's exec host list).
    placements: tuple[tuple[int | None, str], ...] = ()

    def by_role(self, role: Role) -> tuple[MatchGroup, ...]:
        return tuple(f for f in self.groups if f.role is role)
