"""The signature library: recognises failure lines in training logs, in linear time.

Public API::

    default_library() -> SignatureLibrary            # the built-in signatures, compiled once
    build_library(custom_specs=(), *, include_builtins=True) -> SignatureLibrary
    compile_signature(spec: Mapping[str, object]) -> Signature   # raises InvalidSignature
    scan_lines(lines, *, library=None, host_hints=None) -> ScanResult
    scan_log_lines(log_lines, *, library=None) -> ScanResult      # telemetry LogLine records

A ``ScanResult`` holds ``MatchGroup``s: repeats of one line grouped, each with its signature's
``Classification`` (kind, category, attribution, role, implicates_node, severity).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache

from detection.core.signatures.builtin import BUILTIN_SIGNATURES
from detection.core.signatures.custom import compile_signature
from detection.core.signatures.fields import extract_fields, strip_prefixes
from detection.core.signatures.model import (
    Classification,
    InvalidSignature,
    LineFields,
    MatchGroup,
    ScanResult,
    Signature,
)
from detection.core.signatures.scanner import SignatureLibrary, normalise
from detection.core.signatures.xid import XID_CATALOGUE, grade_xid
from detection.core.telemetry import LogLine

__all__ = [
    "BUILTIN_SIGNATURES",
    "XID_CATALOGUE",
    "Classification",
    "MatchGroup",
    "InvalidSignature",
    "LineFields",
    "ScanResult",
    "Signature",
    "SignatureLibrary",
    "build_library",
    "compile_signature",
    "default_library",
    "extract_fields",
    "grade_xid",
    "normalise",
    "scan_lines",
    "scan_log_lines",
    "strip_prefixes",
]


@lru_cache(maxsize=1)
def default_library() -> SignatureLibrary:
    """The built-in signatures, compiled once per process."""
    return SignatureLibrary(BUILTIN_SIGNATURES)


def build_library(
    custom_specs: Iterable[Mapping[str, object]] = (), *, include_builtins: bool = True
) -> SignatureLibrary:
    """A library of the operator's signatures followed by the built-in ones.

    Custom signatures come first, so a cluster can reclassify or silence (category ``benign``)
    a line a built-in signature would otherwise flag. Raises ``InvalidSignature`` for the first
    bad spec, and for a name that is already taken.
    """
    custom = [compile_signature(spec) for spec in custom_specs]
    taken = {s.name for s in BUILTIN_SIGNATURES} if include_builtins else set()
    for signature in custom:
        if signature.name in taken:
            raise InvalidSignature(f"a signature named '{signature.name}' already exists")
        taken.add(signature.name)
    builtins = BUILTIN_SIGNATURES if include_builtins else ()
    return SignatureLibrary((*custom, *builtins))


def scan_lines(
    lines: Sequence[str],
    *,
    library: SignatureLibrary | None = None,
    host_hints: Sequence[str | None] | None = None,
) -> ScanResult:
    return (library or default_library()).scan(lines, host_hints)


def scan_log_lines(
    log_lines: Sequence[LogLine], *, library: SignatureLibrary | None = None
) -> ScanResult:
    """Scan telemetry records; a record's ``host`` (a node's system log) fills in the host."""
    texts = [line.text for line in log_lines]
    hints = [line.host for line in log_lines]
    return scan_lines(texts, library=library, host_hints=hints)
