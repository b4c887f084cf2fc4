"""A cluster's recovery policy: the document operators edit, and the decisions it makes.

Pure Python. The document is plain JSON; ``parse_policy`` turns it into a frozen ``Policy`` or
refuses it with every problem named, so a bad edit never reaches the loop. ``decide`` applies a
policy to one attributed interruption and the workload's history.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from recovery_console.fleet.core.taxonomy import Action

from .incident import History, Incident
from .isolation import IsolationRules, isolate


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
    # Advice on the scheduler's word alone ("FAILED", no log line yet) waits this long for the
    # log evidence that usually follows, so the node at fault can still be named.
    evidence_grace_seconds: float = 10.0
    stop_on_established_application_error: bool = True
    drain_after_strikes: int = 3
    strike_window_hours: float = 168.0
    circuit_breaker_max_share: float = 0.10
    circuit_breaker_window_minutes: float = 60.0
    approval_min_agreement: float = 0.90
    approval_min_labelled: int = 50
    approval_window_days: int = 28
    partitions: Mapping[str, Limits] = field(default_factory=dict)

    @property
    def isolation_rules(self) -> IsolationRules:
        return IsolationRules(
            self.drain_after_strikes,
            self.circuit_breaker_max_share,
            self.circuit_breaker_window_minutes,
        )

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
    "evidence_grace_seconds": (float, 0, 600),
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


# --- decisions ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Decision:
    """What to do, with every reason that led there."""

    action: Action
    exclude: tuple[str, ...] = ()
    drain: tuple[str, ...] = ()
    reasons: tuple[str, ...] = ()


# Application errors a retry cannot fix when the log establishes them.
UNFIXABLE_BY_RETRY = frozenset({"application_error"})


def decide(policy: Policy, incident: Incident, history: History, comment: str = "") -> Decision:
    """The recovery decision for one interruption: restart by default, stop only when the log
    establishes an error no retry fixes or retries are unproductive, exclude and drain nodes
    the evidence names (within the circuit breaker)."""
    opt = job_options(comment)
    limits = _job_limits(policy.limits_for(incident.partition), opt)
    reasons: list[str] = []
    if not limits.enabled:
        return Decision(Action.NONE, reasons=("recovery is disabled for this job or partition",))
    stop = _stop_reason(policy, incident, history, limits)
    if stop:
        return Decision(Action.STOP, reasons=(stop,))
    if incident.kind == "straggler" and not incident.hosts:
        return Decision(Action.NONE, reasons=("a slowdown with no node to blame: reported only",))
    isolated = isolate(policy.isolation_rules, incident, history)
    exclude, drain = isolated.exclude, isolated.drain
    reasons.extend(isolated.reasons)
    if exclude:
        reasons.insert(0, f"the evidence implicates {', '.join(exclude)}: restart without it")
        return Decision(Action.RESTART_EXCLUDING_NODE, exclude, drain, tuple(reasons))
    reasons.insert(0, _restart_reason(incident))
    return Decision(Action.RESTART, (), drain, tuple(reasons))


def job_options(comment: str) -> dict[str, Any]:
    """The ``recovery`` key of a job's Slurm comment (JSON): ``false`` opts out, an object may
    carry ``enabled`` and the job's own ``max_restarts_per_workload``/``..._per_root_cause``."""
    try:
        document = json.loads(comment) if comment.strip().startswith("{") else {}
    except ValueError:
        return {}
    value = document.get("recovery") if isinstance(document, dict) else None
    if value is False:
        return {"enabled": False}
    return value if isinstance(value, dict) else {}


def _job_limits(limits: Limits, options: Mapping[str, Any]) -> Limits:
    """A job may opt out or lower its limits; it can never raise them above the cluster's."""
    enabled = limits.enabled and options.get("enabled", True) is not False
    restarts, retries = limits.max_restarts_per_workload, limits.max_retries_per_root_cause
    if _count(options.get("max_restarts_per_workload")) is not None:
        restarts = min(restarts, int(options["max_restarts_per_workload"]))
    if _count(options.get("max_retries_per_root_cause")) is not None:
        retries = min(retries, int(options["max_retries_per_root_cause"]))
    return replace(
        limits,
        enabled=enabled,
        max_restarts_per_workload=restarts,
        max_retries_per_root_cause=retries,
    )


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _stop_reason(policy: Policy, incident: Incident, history: History, limits: Limits) -> str:
    if (
        policy.stop_on_established_application_error
        and incident.category in UNFIXABLE_BY_RETRY
        and incident.confidence_label == "established"
    ):
        return "the log establishes an application error that a restart cannot fix"
    if history.restarts >= limits.max_restarts_per_workload:
        return f"the workload has used its {limits.max_restarts_per_workload} restarts"
    retries = retries_without_progress(history.root_causes, incident.root_cause, incident.step)
    if retries >= limits.max_retries_per_root_cause:
        return (
            f"{retries} restarts after '{incident.root_cause}' made no progress "
            f"(limit {limits.max_retries_per_root_cause})"
        )
    return ""


def retries_without_progress(
    past: Sequence[tuple[str, int | None]], root_cause: str, step: int | None
) -> int:
    """How many times in a row, counting back from now, the workload failed for this same root
    cause without getting further; any progress (a later step) resets the count."""
    count, reached = 0, step
    for cause, past_step in reversed(past):
        if cause != root_cause:
            break
        progressed = reached is not None and past_step is not None and reached > past_step
        if progressed:
            break
        count, reached = count + 1, past_step
    return count


def _restart_reason(incident: Incident) -> str:
    if incident.kind == "hang":
        return "the job stopped making progress: restart it from its last checkpoint"
    if incident.attribution in {"application", "none"}:
        return (
            "not established as an error a retry cannot fix: restart "
            "(a missed stop costs a bounded number of restarts; a false stop, an outage)"
        )
    return f"a {incident.category.replace('_', ' ')} failure with no node to blame: restart"
