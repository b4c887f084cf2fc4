"""What the built-in signature tables are written with: the common classifications and the
constructor of one table entry."""

from __future__ import annotations

from detection.core.constants import Role, Severity
from detection.core.signatures.model import (
    Classification,
    Refiner,
    Signature,
    classify,
    compile_re,
)
from fleet.core.taxonomy import Attribution, Category, Kind

K, C, A, R, S = Kind, Category, Attribution, Role, Severity

BENIGN = classify(K.NONE, C.BENIGN, A.NONE, R.CONTEXT, False, S.INFO)
# Node-local evidence: the node is at fault, and must be taken out of the next attempt.
HW_NODE = classify(K.CRASH, C.GPU_HARDWARE, A.HARDWARE, R.INITIATING, True, S.CRITICAL)
HW_NODE_ERROR = classify(K.CRASH, C.GPU_HARDWARE, A.HARDWARE, R.INITIATING, True, S.ERROR)
NET_NODE = classify(K.CRASH, C.INTERCONNECT_NETWORK, A.INTERCONNECT, R.INITIATING, True, S.ERROR)
# A service the node's GPUs need (the fabric manager) failed: the node's software is at fault.
SW_NODE = classify(K.CRASH, C.GPU_HARDWARE, A.SYSTEM_SOFTWARE, R.INITIATING, True, S.ERROR)
NODE_FAILED = classify(
    K.CRASH, C.NODE_OR_PROCESS_FAILURE, A.HARDWARE, R.INITIATING, True, S.CRITICAL
)
# The application (or a contained fault) is to blame.
APP_ERROR = classify(K.CRASH, C.APPLICATION_ERROR, A.APPLICATION, R.INITIATING, False, S.ERROR)
APP_FATAL = classify(
    K.CRASH, C.APPLICATION_ERROR, A.APPLICATION, R.INITIATING, False, S.ERROR, True
)
OOM = classify(K.CRASH, C.CUDA_OOM, A.APPLICATION, R.INITIATING, False, S.ERROR)
HOST_OOM = classify(K.CRASH, C.NODE_OR_PROCESS_FAILURE, A.APPLICATION, R.INITIATING, False, S.ERROR)
NAN = classify(K.CRASH, C.NUMERICAL_DIVERGENCE, A.APPLICATION, R.INITIATING, False, S.ERROR)
# Transient or unattributed.
NET_ERROR = classify(K.CRASH, C.INTERCONNECT_NETWORK, A.INTERCONNECT, R.INITIATING, False, S.ERROR)
# The fabric works but is not set up for the job: a retry anywhere meets the same set-up.
IB_CONFIG = classify(
    K.CRASH, C.INTERCONNECT_NETWORK, A.SYSTEM_SOFTWARE, R.INITIATING, False, S.ERROR
)
FS = classify(K.CRASH, C.FILESYSTEM_IO, A.SYSTEM_SOFTWARE, R.INITIATING, False, S.ERROR)
SCHED = classify(K.CRASH, C.NODE_OR_PROCESS_FAILURE, A.SCHEDULER, R.INITIATING, False, S.ERROR)
# The scheduler's daemon on one node failed the job there: that node is not fit to run it.
SCHED_NODE = classify(K.CRASH, C.NODE_OR_PROCESS_FAILURE, A.SCHEDULER, R.INITIATING, True, S.ERROR)
PROC_KILLED = classify(
    K.CRASH, C.NODE_OR_PROCESS_FAILURE, A.SYSTEM_SOFTWARE, R.INITIATING, False, S.WARNING
)
# Consequences of a failure elsewhere.
NET_CASCADE = classify(K.CRASH, C.INTERCONNECT_NETWORK, A.INTERCONNECT, R.CASCADE, False, S.WARNING)
HANG_CASCADE = classify(K.HANG, C.NCCL_TIMEOUT_HANG, A.INTERCONNECT, R.CASCADE, False, S.ERROR)
PROC_CASCADE = classify(K.CRASH, C.NODE_OR_PROCESS_FAILURE, A.NONE, R.CASCADE, False, S.WARNING)


def hint(category: Category, attribution: Attribution = A.NONE) -> Classification:
    """A context line: recorded as evidence, never a cause. (Category ``benign`` would make it a
    suppressor instead.)"""
    return classify(K.NONE, category, attribution, R.CONTEXT, False, S.INFO)


def sig(
    name: str,
    pattern: str,
    classification: Classification,
    description: str,
    refine: Refiner | None = None,
    internal: bool = False,
    layout: bool = False,
    variants: tuple[str, ...] = (),
) -> Signature:
    return Signature(
        name=name,
        pattern=pattern,
        classification=classification,
        regex=compile_re(pattern),
        description=description,
        builtin=True,
        refine=refine,
        internal=internal,
        layout=layout,
        variants=variants,
    )
