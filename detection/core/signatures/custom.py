"""Operator-defined signatures, validated before they can touch a scan.

A cluster's operators add their own lines at runtime (a site-specific health checker, a storage
system's error, a known-benign warning to silence) as a plain dict:

    {"name": "acme_fabric_down", "pattern": "fabricd: link (?P<host>\\S+) down",
     "kind": "crash", "category": "interconnect_network", "attribution": "interconnect",
     "role": "initiating", "implicates_node": true, "severity": "error"}

``compile_signature`` returns a compiled ``Signature`` or raises ``InvalidSignature`` with a reason
an operator can act on. Patterns are RE2: linear time, no backreferences, no lookaround.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import TypeVar

import re2

from detection.core.constants import (
    MAX_CUSTOM_PATTERN_CHARS,
    MAX_CUSTOM_PROGRAM_SIZE,
    Role,
    Severity,
)
from detection.core.signatures.model import (
    Classification,
    InvalidSignature,
    Signature,
    compile_re,
    re2_error_text,
)
from fleet.core.taxonomy import Attribution, Category, Kind

_NAME = compile_re(r"^[a-z][a-z0-9_.-]{0,63}$")
_REQUIRED = ("name", "pattern", "kind", "category", "attribution", "role")
_OPTIONAL = ("implicates_node", "severity", "description")
_BACKREFERENCE = compile_re(r"\\[1-9]|\(\?P=|\\k<")
_LOOKAROUND = compile_re(r"\(\?<?[=!]")
# Named groups a pattern may use to say where the line came from.
FIELD_GROUPS = frozenset({"host", "rank", "local_rank", "gpu", "job_id", "pci", "xid"})

# Ordinary lines no signature may match: a pattern that does would flag every healthy run.
ORDINARY_LINES = (
    " iteration      100/  500000 | consumed samples:        12800 | elapsed time per iteration"
    " (ms): 1234.5 | learning rate: 1.500E-04 | global batch size:   128 | lm loss: 2.345678E+00"
    " | loss scale: 65536.0 | grad norm: 1.234 | number of skipped iterations:   0 | number of"
    " nan iterations:   0 |",
    "[2024-05-01 10:00:00,000] [INFO] [logging.py:96:log_dist] [Rank 0] step=100, skipped=0,"
    " lr=[0.0001], mom=[(0.9, 0.95)]",
    "{'loss': 2.3051, 'grad_norm': 1.25, 'learning_rate': 4.9e-05, 'epoch': 0.12}",
    "node-07:12345:12399 [3] NCCL INFO Channel 00/0 : 3[3] -> 4[4] via P2P/CUMEM",
)

E = TypeVar("E", bound=StrEnum)


def _enum(spec: Mapping[str, object], key: str, enum: type[E]) -> E:
    value = spec.get(key)
    allowed = ", ".join(member.value for member in enum)
    if not isinstance(value, str):
        raise InvalidSignature(f"'{key}' must be one of: {allowed}")
    try:
        return enum(value)
    except ValueError:
        raise InvalidSignature(f"unknown {key} '{value}'; expected one of: {allowed}") from None


def _check_fields(spec: Mapping[str, object]) -> None:
    unknown = sorted(str(key) for key in spec if key not in _REQUIRED + _OPTIONAL)
    if unknown:
        raise InvalidSignature(f"unknown field(s): {', '.join(unknown)}")
    missing = [key for key in _REQUIRED if key not in spec]
    if missing:
        raise InvalidSignature(f"missing field(s): {', '.join(missing)}")
    name = spec["name"]
    if not isinstance(name, str) or _NAME.search(name) is None:
        raise InvalidSignature(
            "'name' must be 1-64 characters: lower-case letters, digits, '_', '.', '-',"
            " starting with a letter"
        )
    implicates = spec.get("implicates_node", False)
    if not isinstance(implicates, bool):
        raise InvalidSignature("'implicates_node' must be true or false")
    description = spec.get("description", "")
    if not isinstance(description, str):
        raise InvalidSignature("'description' must be text")


def _checked_regex(pattern: object) -> str:
    if not isinstance(pattern, str) or not pattern.strip():
        raise InvalidSignature("'pattern' must be a non-empty regular expression")
    if len(pattern) > MAX_CUSTOM_PATTERN_CHARS:
        raise InvalidSignature(f"'pattern' is longer than {MAX_CUSTOM_PATTERN_CHARS} characters")
    try:
        regex = compile_re(pattern)
    except re2.error as error:
        reason = re2_error_text(error)
        if _BACKREFERENCE.search(pattern) is not None:
            raise InvalidSignature(
                f"backreferences are not supported (RE2 runs in linear time): {reason}"
            ) from None
        if _LOOKAROUND.search(pattern) is not None:
            raise InvalidSignature(
                f"lookahead/lookbehind assertions are not supported by RE2: {reason}"
            ) from None
        raise InvalidSignature(f"pattern does not compile with RE2: {reason}") from None
    if regex.programsize > MAX_CUSTOM_PROGRAM_SIZE:
        raise InvalidSignature(
            f"pattern is too complex (RE2 program size {regex.programsize} >"
            f" {MAX_CUSTOM_PROGRAM_SIZE}); simplify it"
        )
    if regex.search("") is not None:
        raise InvalidSignature("pattern matches the empty string, so it would flag every line")
    for line in ORDINARY_LINES:
        if regex.search(line) is not None:
            raise InvalidSignature(
                "pattern matches an ordinary progress line, so it would flag healthy runs:"
                f" {line!r}"
            )
    return pattern


def compile_signature(spec: Mapping[str, object]) -> Signature:
    """Validate an operator's signature spec and compile it.

    Raises ``InvalidSignature(reason)`` for unknown or missing fields, a bad name, an unknown
    kind/category/attribution/role/severity, an empty pattern, a pattern RE2 refuses (with RE2's
    own message; backreferences and lookaround get a specific reason), a pattern that is too
    complex, or one that matches the empty string or an ordinary progress line.
    """
    if not isinstance(spec, Mapping):
        raise InvalidSignature("a signature spec must be an object")
    _check_fields(spec)
    pattern = _checked_regex(spec["pattern"])
    kind = _enum(spec, "kind", Kind)
    category = _enum(spec, "category", Category)
    attribution = _enum(spec, "attribution", Attribution)
    role = _enum(spec, "role", Role)
    severity = _enum({"severity": spec.get("severity", "error")}, "severity", Severity)
    if category is Category.BENIGN and role is not Role.CONTEXT:
        raise InvalidSignature("a 'benign' signature must have role 'context'")
    classification = Classification(
        kind=kind,
        category=category,
        attribution=attribution,
        role=role,
        implicates_node=bool(spec.get("implicates_node", False)),
        severity=severity,
    )
    return Signature(
        name=str(spec["name"]),
        pattern=pattern,
        classification=classification,
        regex=compile_re(pattern),
        description=str(spec.get("description", "")),
        builtin=False,
    )
