"""A cluster's detector settings, validated: its signature library, progress pattern, hang and
straggler knobs and poll interval. Pure Python; the model stores the raw documents."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, TypeVar

from detection.core.detectors.hang import HangSettings
from detection.core.detectors.straggler import StragglerSettings
from detection.core.progress import InvalidProgressPattern, compile_progress_pattern
from detection.core.signatures import (
    InvalidSignature,
    SignatureLibrary,
    build_library,
    default_library,
)

MIN_POLL_SECONDS = 1.0
MAX_POLL_SECONDS = 3600.0


class InvalidDetectorSettings(ValueError):
    """Refused settings; ``problems`` maps each field to what is wrong with it."""

    def __init__(self, problems: dict[str, list[str]]) -> None:
        super().__init__("; ".join(f"{k}: {', '.join(v)}" for k, v in problems.items()))
        self.problems = problems


@dataclass(frozen=True)
class DetectorConfig:
    """Everything the detectors of one cluster need, compiled once per scan."""

    library: SignatureLibrary
    progress_pattern: Any | None
    hang: HangSettings
    straggler: StragglerSettings
    poll_seconds: float


Knobs = TypeVar("Knobs", HangSettings, StragglerSettings)


def build_detector_config(
    *,
    signatures: Sequence[Mapping[str, object]] = (),
    progress_pattern: str = "",
    hang: Mapping[str, object] | None = None,
    straggler: Mapping[str, object] | None = None,
    poll_seconds: float = 5.0,
) -> DetectorConfig:
    problems: dict[str, list[str]] = {}
    library = _library(signatures, problems)
    pattern = _pattern(progress_pattern, problems)
    hang_settings = _knobs(HangSettings, hang or {}, "hang", problems)
    straggler_settings = _knobs(StragglerSettings, straggler or {}, "straggler", problems)
    if not MIN_POLL_SECONDS <= poll_seconds <= MAX_POLL_SECONDS:
        problems["poll_seconds"] = [
            f"must be between {MIN_POLL_SECONDS:g} and {MAX_POLL_SECONDS:g}"
        ]
    if problems:
        raise InvalidDetectorSettings(problems)
    return DetectorConfig(library, pattern, hang_settings, straggler_settings, poll_seconds)


def _library(
    specs: Sequence[Mapping[str, object]], problems: dict[str, list[str]]
) -> SignatureLibrary:
    if not specs:
        return default_library()
    if not isinstance(specs, list) or not all(isinstance(s, Mapping) for s in specs):
        problems["signatures"] = ["must be a list of signature objects"]
        return default_library()
    try:
        return build_library(specs)
    except InvalidSignature as exc:
        problems["signatures"] = [exc.reason]
        return default_library()


def _pattern(pattern: str, problems: dict[str, list[str]]) -> Any | None:
    if not pattern:
        return None
    try:
        return compile_progress_pattern(pattern)
    except InvalidProgressPattern as exc:
        problems["progress_pattern"] = [str(exc)]
        return None


def _knobs(
    cls: type[Knobs], raw: Mapping[str, object], name: str, problems: dict[str, list[str]]
) -> Knobs:
    known = {f.name: f.type for f in fields(cls)}
    errors = [f"{key} is not a {name} setting" for key in raw if key not in known]
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key not in known:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            errors.append(f"{key} must be a positive number")
        else:
            values[key] = int(value) if known[key] == "int" else float(value)
    if errors:
        problems[name] = errors
        return cls()
    return cls(**values)
