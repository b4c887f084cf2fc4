"""A cluster's recovery policy: the document operators edit, parsed and validated.

Pure Python. The document is plain JSON; ``parse_policy`` turns it into a frozen ``Policy`` or
refuses it with every problem named, so a bad edit never reaches the loop.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any


class InvalidPolicy(ValueError):
    """The policy document was refused; ``problems`` says why, one entry per problem."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


@dataclass(frozen=True)
class Limits:
    """The settings a partition may override."""

    max_restarts_per_workload: int = 10
    max_retries_per_root_cause: int = 3
    hold_timeout_seconds: float = 300.0
    enabled: bool = True


@dataclass(frozen=True)
class Policy:
    """Defaults follow DESIGN.md §4: restart by default, bounded retries, gated action mode."""

    limits: Limits = field(default_factory=Limits)
    stop_on_established_application_error: bool = True
    drain_after_strikes: int = 3
    strike_window_hours: float = 168.0
    circuit_breaker_max_share: float = 0.10
    circuit_breaker_window_minutes: float = 60.0
    approval_min_agreement: float = 0.90
    approval_min_labelled: int = 50
    approval_window_days: int = 28
    partitions: Mapping[str, Limits] = field(default_factory=dict)

    def limits_for(self, partition: str) -> Limits:
        return self.partitions.get(partition, self.limits)

    def to_document(self) -> dict[str, Any]:
        """The JSON document this policy parses from (defaults written out)."""
        document = {f.name: getattr(self, f.name) for f in fields(self)}
        document.pop("limits")
        document.update(asdict(self.limits))
        document["partitions"] = {
            name: _changed_limits(limits, self.limits) for name, limits in self.partitions.items()
        }
        return document


# name -> (type, minimum, maximum); bool is checked apart because bool is an int in Python.
_NUMBERS: dict[str, tuple[type, float, float]] = {
    "max_restarts_per_workload": (int, 0, 1000),
    "max_retries_per_root_cause": (int, 0, 100),
    "hold_timeout_seconds": (float, 10, 86400),
    "drain_after_strikes": (int, 1, 100),
    "strike_window_hours": (float, 1, 24 * 365),
    "circuit_breaker_max_share": (float, 0, 1),
    "circuit_breaker_window_minutes": (float, 1, 24 * 60 * 7),
    "approval_min_agreement": (float, 0, 1),
    "approval_min_labelled": (int, 1, 100000),
    "approval_window_days": (int, 1, 365),
}
_FLOATS = {name for name, (kind, _, _) in _NUMBERS.items() if kind is float}
_BOOLEANS = {"enabled", "stop_on_established_application_error"}
_LIMIT_KEYS = {f.name for f in fields(Limits)}
_KNOWN_KEYS = set(_NUMBERS) | _BOOLEANS | {"partitions"}


def parse_policy(document: object) -> Policy:
    """Validate a policy document (missing keys take defaults) or raise ``InvalidPolicy``."""
    if not isinstance(document, Mapping):
        raise InvalidPolicy(["the policy must be a JSON object"])
    problems: list[str] = []
    values = _check_values(document, _KNOWN_KEYS - {"partitions"}, "", problems)
    partitions = _parse_partitions(document.get("partitions", {}), problems)
    if problems:
        raise InvalidPolicy(problems)
    limits = Limits(**{k: v for k, v in values.items() if k in _LIMIT_KEYS})
    policy = Policy(limits=limits, **{k: v for k, v in values.items() if k not in _LIMIT_KEYS})
    return replace(
        policy, partitions={name: replace(limits, **given) for name, given in partitions.items()}
    )


def _parse_partitions(raw: object, problems: list[str]) -> dict[str, dict[str, Any]]:
    if not isinstance(raw, Mapping):
        problems.append("partitions must be an object of partition name to overrides")
        return {}
    parsed: dict[str, dict[str, Any]] = {}
    for name, overrides in raw.items():
        if not isinstance(name, str) or not name.strip():
            problems.append(f"partition name {name!r} must be a non-empty string")
        elif not isinstance(overrides, Mapping):
            problems.append(f"partitions.{name} must be an object")
        else:
            parsed[name] = _check_values(overrides, _LIMIT_KEYS, f"partitions.{name}.", problems)
    return parsed


def _check_values(
    document: Mapping[str, object], allowed: set[str], prefix: str, problems: list[str]
) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for key, value in document.items():
        if key == "partitions" and not prefix:
            continue
        if key not in allowed:
            problems.append(f"{prefix}{key} is not a policy setting")
            continue
        problem = _problem_with(key, value)
        if problem:
            problems.append(f"{prefix}{key} {problem}")
        else:
            values[key] = float(value) if key in _FLOATS else value  # type: ignore[arg-type]
    return values


def _problem_with(key: str, value: object) -> str | None:
    if key in _BOOLEANS:
        return None if isinstance(value, bool) else "must be true or false"
    kind, low, high = _NUMBERS[key]
    wanted = (int,) if kind is int else (int, float)
    if isinstance(value, bool) or not isinstance(value, wanted):
        return f"must be {'an integer' if kind is int else 'a number'}"
    if not low <= value <= high:
        return f"must be between {low:g} and {high:g}"
    return None


def _changed_limits(limits: Limits, defaults: Limits) -> dict[str, Any]:
    return {k: v for k, v in asdict(limits).items() if getattr(defaults, k) != v}
