"""The failure taxonomy of DESIGN.md §3: one vocabulary for detectors, ``diagnose``, the policy,
the models' choices, the API and the UI.

The string values appear verbatim in the JSON that ``manage.py diagnose`` prints, in the API and
in stored rows, so changing one is a contract change. Pure Python: the models build their
choices from these with ``choices``.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any


class Kind(StrEnum):
    """What happened to the attempt."""

    CRASH = "crash"
    HANG = "hang"
    STRAGGLER = "straggler"
    NONE = "none"


class Category(StrEnum):
    """Which family of failure the evidence points at."""

    GPU_HARDWARE = "gpu_hardware"
    NCCL_TIMEOUT_HANG = "nccl_timeout_hang"
    INTERCONNECT_NETWORK = "interconnect_network"
    CUDA_OOM = "cuda_oom"
    APPLICATION_ERROR = "application_error"
    FILESYSTEM_IO = "filesystem_io"
    NODE_OR_PROCESS_FAILURE = "node_or_process_failure"
    NUMERICAL_DIVERGENCE = "numerical_divergence"
    STRAGGLER = "straggler"
    BENIGN = "benign"


class Attribution(StrEnum):
    """Who or what is to blame."""

    HARDWARE = "hardware"
    INTERCONNECT = "interconnect"
    SYSTEM_SOFTWARE = "system_software"
    APPLICATION = "application"
    SCHEDULER = "scheduler"
    NONE = "none"


class Action(StrEnum):
    """What to do about an interruption: the policy's decision and a reviewer's preference."""

    RESTART_EXCLUDING_NODE = "restart_excluding_node"
    RESTART = "restart"
    STOP = "stop"
    NONE = "none"


class ConfidenceLabel(StrEnum):
    """How sure a diagnosis is: the log establishes it, supports it, or we only suspect it."""

    ESTABLISHED = "established"
    SUPPORTED = "supported"
    HYPOTHESIS = "hypothesis"


# Who is to blame when nothing more specific is known: what a category implies by itself.
# Signatures and detectors start from this and say otherwise only where the evidence does
# (a node failure with a node named is hardware; a Slurm time limit is the scheduler).
DEFAULT_ATTRIBUTION: dict[Category, Attribution] = {
    Category.GPU_HARDWARE: Attribution.HARDWARE,
    Category.INTERCONNECT_NETWORK: Attribution.INTERCONNECT,
    Category.FILESYSTEM_IO: Attribution.SYSTEM_SOFTWARE,
    Category.APPLICATION_ERROR: Attribution.APPLICATION,
    Category.CUDA_OOM: Attribution.APPLICATION,
    Category.NUMERICAL_DIVERGENCE: Attribution.APPLICATION,
}

ACTION_LABELS: dict[Action, str] = {
    Action.RESTART_EXCLUDING_NODE: "Restart excluding nodes",
    Action.RESTART: "Restart",
    Action.STOP: "Stop",
    Action.NONE: "No action",
}


# How a category reads inside a sentence ("a ... repeats on a retry").
CATEGORY_WORDS: dict[Category, str] = {
    Category.GPU_HARDWARE: "GPU hardware fault",
    Category.NCCL_TIMEOUT_HANG: "collective timeout",
    Category.INTERCONNECT_NETWORK: "network failure",
    Category.CUDA_OOM: "CUDA out-of-memory error",
    Category.APPLICATION_ERROR: "application error",
    Category.FILESYSTEM_IO: "filesystem failure",
    Category.NODE_OR_PROCESS_FAILURE: "node or process failure",
    Category.NUMERICAL_DIVERGENCE: "numerical divergence",
    Category.STRAGGLER: "slowdown",
    Category.BENIGN: "benign event",
}


def category_words(category: str) -> str:
    try:
        return CATEGORY_WORDS[Category(category)]
    except (ValueError, KeyError):
        return category.replace("_", " ")


def default_attribution(category: str) -> Attribution:
    """The attribution a category implies on its own (``none`` where it implies nobody)."""
    try:
        return DEFAULT_ATTRIBUTION.get(Category(category), Attribution.NONE)
    except ValueError:
        return Attribution.NONE


def choices(terms: type[StrEnum], labels: Mapping[Any, str] | None = None) -> list[tuple[str, str]]:
    """Django ``choices`` for one of these vocabularies (the value is its own label unless
    ``labels`` names another)."""
    return [(term.value, (labels or {}).get(term, term.value)) for term in terms]


ACTION_CHOICES = choices(Action, ACTION_LABELS)
