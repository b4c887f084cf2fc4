"""Detection's own vocabulary and limits: how a matched line relates to a failure (its role and
severity) and the caps that bound what one scan or diagnosis may cost. The failure taxonomy
itself (kind, category, attribution, action, confidence) is the fleet's ``core.taxonomy``.
"""

from __future__ import annotations

from enum import StrEnum


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
