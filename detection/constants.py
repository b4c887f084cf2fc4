"""Vocabulary shared by the signature library, the log diagnosis and their callers.

The string values are the failure taxonomy of DESIGN.md §3: they appear verbatim in the JSON that
``manage.py diagnose`` prints and in the API, so changing one is a contract change.
"""

from __future__ import annotations

from enum import StrEnum


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
    """What a diagnosis recommends. The policy decides what is actually done."""

    RESTART_EXCLUDING_NODE = "restart_excluding_node"
    RESTART = "restart"
    STOP = "stop"
    NONE = "none"


class Role(StrEnum):
    """How a matched line relates to the failure.

    ``initiating`` lines can be a root cause; ``cascade`` lines usually follow a root cause on
    another rank or node (NCCL timeouts, "remote process exited", launcher reports); ``context``
    lines are hints and bookkeeping that never cause anything by themselves.
    """

    INITIATING = "initiating"
    CASCADE = "cascade"
    CONTEXT = "context"


class Severity(StrEnum):
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"
    CRITICAL = "critical"


SEVERITY_RANK = {Severity.INFO: 0, Severity.WARNING: 1, Severity.ERROR: 2, Severity.CRITICAL: 3}


class ConfidenceLabel(StrEnum):
    """How sure a diagnosis is: the log establishes it, supports it, or we only suspect it."""

    ESTABLISHED = "established"
    SUPPORTED = "supported"
    HYPOTHESIS = "hypothesis"


# Matching never looks past this many characters of one line. RE2 is linear, so this cap is not
# what keeps the scan safe from hostile input; it bounds memory and the cost of one huge line.
MAX_LINE_CHARS = 64 * 1024
# The byte decoder cuts lines at this many bytes before decoding them.
MAX_LINE_BYTES = 64 * 1024
# A scan classifies at most this many matching lines (about 25-100 us each); past it, the rest
# of the input is reported as not examined. The earliest root cause is what matters, and this
# bounds the time a flood of matching lines can take.
MAX_CLASSIFIED_LINES = 100_000
# RE2 memory budget per compiled pattern (the combined prefilter is the largest).
RE2_MAX_MEM = 64 * 1024 * 1024
# A custom signature whose compiled program is larger than this is refused as too complex.
MAX_CUSTOM_PROGRAM_SIZE = 4000
MAX_CUSTOM_PATTERN_CHARS = 2000

# Diagnosis output caps.
MAX_EVIDENCE = 20
MAX_EVIDENCE_TEXT = 500
# How many line numbers and distinct values one grouped finding remembers.
MAX_FINDING_LINES = 50
MAX_FINDING_VALUES = 65_536

DEFAULT_GPUS_PER_NODE = 8
