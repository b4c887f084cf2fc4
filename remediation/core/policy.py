"""A cluster's recovery policy: the document operators edit, with its rule table.

Pure Python. The document is plain JSON; ``parse_policy`` turns it into a frozen ``Policy`` or
refuses it with every problem named, so a bad edit never reaches the loop. ``decisions.decide``
applies it to one attributed interruption.

The rule table maps what failed to what to do (DESIGN.md §4). A key is a failure category
(``cuda_oom``), the name of a signature (``fs_no_space``, a built-in or a cluster's own), or
``node_local`` for evidence that a node is at fault whatever its category. A key may be
qualified by the phase the failure came in, ``startup:KEY`` (before the first training step)
or ``training:KEY`` (after progress), and then beats the same key unqualified. In order: the
signature's phase rule, the signature's rule, ``node_local``, the category's phase rule, the
category's rule. A cluster's ``rules`` are laid over the defaults, and a partition's ``rules``
over the cluster's.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from fleet.core.taxonomy import Action, Category

from .isolation import IsolationRules

NODE_LOCAL = "node_local"
PHASES = ("startup", "training")

# The question for every rule: would a blind restart fail the same way?
DEFAULT_RULES: Mapping[str, Action] = {
    # The node is at fault: run again elsewhere.
    NODE_LOCAL: Action.RESTART_EXCLUDING_NODE,
    # Transient or unattributed: a restart from the last checkpoint is the cure.
    Category.GPU_HARDWARE: Action.RESTART,
    Category.NCCL_TIMEOUT_HANG: Action.RESTART,
    Category.INTERCONNECT_NETWORK: Action.RESTART,
    Category.FILESYSTEM_IO: Action.RESTART,
    Category.NODE_OR_PROCESS_FAILURE: Action.RESTART,
    # A retry repeats these: stop and say what to change.
    Category.CUDA_OOM: Action.STOP,
    Category.APPLICATION_ERROR: Action.STOP,
    Category.NUMERICAL_DIVERGENCE: Action.STOP,
    # Nothing to recover from (a slowdown with no node named is reported, not acted on).
    Category.STRAGGLER: Action.NONE,
    Category.BENIGN: Action.NONE,
    # Signatures that say more than their category.
    "fs_no_space": Action.STOP,
    "fs_read_only": Action.STOP,
    "fs_stale_handle": Action.STOP,
    "checkpoint_unwritable": Action.STOP,
    "checkpoint_io_failed": Action.STOP,
    "process_killed_bare": Action.STOP,
    "slurm_out_of_memory": Action.STOP,
    "loss_divergence": Action.STOP,
    "host_oom_killer": Action.STOP,
    "slurm_oom_kill": Action.STOP,
    "dataloader_worker_killed": Action.STOP,
    "nccl_network_config": Action.STOP,
    "nccl_collective_mismatch": Action.STOP,
    "ib_setup_refused": Action.STOP,
    "checkpoint_archive_broken": Action.STOP,
    "storage_write_failed": Action.STOP,
    "pod_evicted": Action.STOP,
    "nccl_shm_setup_failed": Action.STOP,
    "fabric_manager_mismatch": Action.STOP,
    "ib_access_error": Action.STOP,
    "ofi_provider_setup_failed": Action.STOP,
    "launch_directory_missing": Action.STOP,
    "host_memory_exhausted": Action.STOP,
    "memory_monitor_kill": Action.STOP,
    "collective_timeout_in_checkpoint_save": Action.STOP,
    "checkpoint_save_failed": Action.STOP,
    "collective_desync": Action.STOP,
    "npu_fault_restart": Action.RESTART,
    "cuda_illegal_memory_access": Action.RESTART,
    "nvrm_xid_application": Action.RESTART,
    "slurm_cancelled": Action.NONE,
    # Before the first step, the network and the processes fail from how the job is set up:
    # a store or master no client reaches, an interface or HCA that is not there, a model too
    # big for the host's memory while it loads, ranks that never meet in their first
    # collectives because one is still preparing its data. The same after training ran is an
    # outage.
    "startup:interconnect_network": Action.STOP,
    "startup:node_or_process_failure": Action.STOP,
    "startup:nccl_timeout_hang": Action.STOP,
    "duplicate_rank_at_init": Action.STOP,
}
CATEGORIES = frozenset(c.value for c in Category)
ACTIONS = frozenset(a.value for a in Action)
SIGNATURE_NAME = frozenset("abcdefghijklmnopqrstuvwxyz0123456789_")
MAX_RULES = 500


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
    # This partition's rules, laid over the cluster's.
    rules: Mapping[str, Action] = field(default_factory=dict)


@dataclass(frozen=True)
class Policy:
    """Defaults follow DESIGN.md §4: stop what a retry repeats, exclude the node on node-local
    evidence, restart the transient, bounded retries, gated action mode."""

    limits: Limits = field(default_factory=Limits)
    # Advice on the scheduler's word alone ("FAILED", no log line yet) waits this long for the
    # log evidence that usually follows, so the node at fault can still be named.
    evidence_grace_seconds: float = 10.0
    drain_after_strikes: int = 3
    strike_window_hours: float = 168.0
    # At most this share of the nodes (rounded up, so a small cluster may lose one) and this
    # many taken out (excluded or drained, for real) within the window.
    circuit_breaker_max_share: float = 0.10
    circuit_breaker_max_nodes: int = 10
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
            self.circuit_breaker_max_nodes,
        )

    def limits_for(self, partition: str) -> Limits:
        return self.partitions.get(partition, self.limits)

    def rules_for(self, partition: str) -> Mapping[str, Action]:
        """The rule table in force: the defaults, the cluster's rules, the partition's."""
        rules = {**DEFAULT_RULES, **self.limits.rules}
        if partition in self.partitions:
            rules.update(self.partitions[partition].rules)
        return rules

    def to_document(self) -> dict[str, Any]:
        """The JSON document this policy parses from (defaults written out)."""
        document = {f.name: getattr(self, f.name) for f in fields(self)}
        document.pop("limits")
        document.update(_limits_document(self.limits))
        document["rules"] = {key: action.value for key, action in self.limits.rules.items()}
        document["partitions"] = {
            name: _changed_limits(limits, self.limits) for name, limits in self.partitions.items()
        }
        return document


def rule_for(
    rules: Mapping[str, Action],
    signature: str,
    node_local: bool,
    category: str,
    phase: str = "",
) -> tuple[Action, str]:
    """The action the table gives, and the key that gave it."""
    keys = (
        f"{phase}:{signature}" if phase and signature else "",
        signature,
        NODE_LOCAL if node_local else "",
        f"{phase}:{category}" if phase else "",
        category,
    )
    for key in keys:
        if key and key in rules:
            return rules[key], key
    return Action.RESTART, "default"


# name -> (type, minimum, maximum); bool is checked apart because bool is an int in Python.
_NUMBERS: dict[str, tuple[type, float, float]] = {
    "max_restarts_per_workload": (int, 0, 1000),
    "max_retries_per_root_cause": (int, 0, 100),
    "hold_timeout_seconds": (float, 10, 86400),
    "evidence_grace_seconds": (float, 0, 600),
    "drain_after_strikes": (int, 1, 100),
    "strike_window_hours": (float, 1, 24 * 365),
    "circuit_breaker_max_share": (float, 0, 1),
    "circuit_breaker_max_nodes": (int, 0, 100000),
    "circuit_breaker_window_minutes": (float, 1, 24 * 60 * 7),
    "approval_min_agreement": (float, 0, 1),
    "approval_min_labelled": (int, 1, 100000),
    "approval_window_days": (int, 1, 365),
}
_FLOATS = {name for name, (kind, _, _) in _NUMBERS.items() if kind is float}
_BOOLEANS = {"enabled"}
_LIMIT_KEYS = {f.name for f in fields(Limits)} - {"rules"}
_KNOWN_KEYS = set(_NUMBERS) | _BOOLEANS | {"partitions", "rules"}
# Kept so that documents written before the rule table still parse: stops are rules now.
_RETIRED = {"stop_on_established_application_error"}


def parse_policy(document: object, signatures: Collection[str] | None = None) -> Policy:
    """Validate a policy document (missing keys take defaults) or raise ``InvalidPolicy``.

    ``signatures``, when given, are the signature names a rule may name (the built-in ones and
    the cluster's own); without it any well-formed name is accepted."""
    if not isinstance(document, Mapping):
        raise InvalidPolicy(["the policy must be a JSON object"])
    problems: list[str] = []
    values = _check_values(document, _KNOWN_KEYS - {"partitions", "rules"}, "", problems)
    rules = _parse_rules(document.get("rules", {}), "rules", signatures, problems)
    if document.get("stop_on_established_application_error") is False:
        # The setting the rule table replaced: off meant application errors were restarted.
        rules.setdefault(Category.APPLICATION_ERROR, Action.RESTART)
    partitions = _parse_partitions(document.get("partitions", {}), signatures, problems)
    if problems:
        raise InvalidPolicy(problems)
    limits = Limits(rules=rules, **{k: v for k, v in values.items() if k in _LIMIT_KEYS})
    policy = Policy(limits=limits, **{k: v for k, v in values.items() if k not in _LIMIT_KEYS})
    return replace(
        policy,
        partitions={
            name: replace(limits, **{**given, "rules": given.get("rules", {})})
            for name, given in partitions.items()
        },
    )


def _parse_rules(
    raw: object, where: str, signatures: Collection[str] | None, problems: list[str]
) -> dict[str, Action]:
    if not isinstance(raw, Mapping):
        problems.append(f"{where} must be an object of category or signature to action")
        return {}
    if len(raw) > MAX_RULES:
        problems.append(f"{where} has {len(raw)} rules; at most {MAX_RULES} are allowed")
        return {}
    parsed: dict[str, Action] = {}
    for key, action in raw.items():
        problem = _rule_key_problem(key, signatures) or _action_problem(action)
        if problem:
            problems.append(f"{where}.{str(key)[:80]} {problem}")
        else:
            parsed[key] = Action(action)
    return parsed


def _rule_key_problem(key: object, signatures: Collection[str] | None) -> str | None:
    if isinstance(key, str) and key.partition(":")[0] in PHASES and ":" in key:
        phase, _, key = key.partition(":")
        if key == NODE_LOCAL:
            return f"{phase}:node_local is not a rule: node-local evidence is the same in any phase"
    if not isinstance(key, str) or not key or len(key) > 64 or set(key) - SIGNATURE_NAME:
        return (
            "is not a category, a signature name or node_local "
            "(optionally after startup: or training:)"
        )
    if key == NODE_LOCAL or key in CATEGORIES or key in DEFAULT_RULES:
        return None
    if signatures is not None and key not in signatures:
        return "names no category and no signature this cluster has"
    return None


def _action_problem(action: object) -> str | None:
    if isinstance(action, str) and action in ACTIONS:
        return None
    return f"must be one of {', '.join(sorted(ACTIONS))}"


def _parse_partitions(
    raw: object, signatures: Collection[str] | None, problems: list[str]
) -> dict[str, dict[str, Any]]:
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
            where = f"partitions.{name}."
            given = {k: v for k, v in overrides.items() if k != "rules"}
            parsed[name] = _check_values(given, _LIMIT_KEYS, where, problems)
            if "rules" in overrides:
                parsed[name]["rules"] = _parse_rules(
                    overrides["rules"], f"{where}rules", signatures, problems
                )
    return parsed


def _check_values(
    document: Mapping[str, object], allowed: set[str], prefix: str, problems: list[str]
) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for key, value in document.items():
        if not prefix and key in {"partitions", "rules"} or key in _RETIRED:
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


def _limits_document(limits: Limits) -> dict[str, Any]:
    return {k: v for k, v in asdict(limits).items() if k != "rules"}


def _changed_limits(limits: Limits, defaults: Limits) -> dict[str, Any]:
    changed = {k: v for k, v in _limits_document(limits).items() if getattr(defaults, k) != v}
    if limits.rules:
        changed["rules"] = {key: action.value for key, action in limits.rules.items()}
    return changed
