"""Built-in signatures of teardown noise and debugging hints (context), the scheduler's
cancellations, and any other NCCL warning."""

from __future__ import annotations

from detection.core.signatures.entries import NET_CASCADE, A, C, hint, sig
from detection.core.signatures.refiners import flood

_TORCH_HINT = "CUDA kernel errors might be asynchronously reported"

HINTS = (
    sig(
        "hint_cuda_async",
        r"CUDA kernel errors might be asynchronously reported",
        hint(C.APPLICATION_ERROR),
        "PyTorch hint: " + _TORCH_HINT + ".",
    ),
    sig(
        "hint_cuda_launch_blocking",
        r"(?i)consider passing CUDA_LAUNCH_BLOCKING=1",
        hint(C.APPLICATION_ERROR),
        "PyTorch hint to debug with CUDA_LAUNCH_BLOCKING=1.",
    ),
    sig(
        "hint_torch_dsa",
        r"Compile with .?TORCH_USE_CUDA_DSA",
        hint(C.APPLICATION_ERROR),
        "PyTorch hint to enable device-side assertions.",
    ),
    sig(
        "hint_nccl_debug_dump",
        r"preparing to dump debug info|Stack trace of the failed collective not found"
        r"|First PG on this rank to signal dumping",
        hint(C.NCCL_TIMEOUT_HANG, A.INTERCONNECT),
        "ProcessGroupNCCL dumping its flight recorder.",
    ),
    sig(
        "hint_torchelastic",
        r"To enable traceback see: \S+elastic/errors|Sending process \d+ closing signal SIGTERM"
        r"|terminate called after throwing an instance of|Received \d+ death signal",
        hint(C.NODE_OR_PROCESS_FAILURE),
        "torchrun and C++ runtime teardown messages.",
    ),
    sig(
        "slurm_cancelled",
        r"\*\*\* (?:JOB|STEP) \S{1,40} (?:ON \S{1,255} )?CANCELLED AT \S{1,40}(?: \*\*\*| by)"
        r"|Job deleted at request of"
        # A requeue (ours, or an operator's) ends the running steps; it is not a failure.
        r"|CANCELLED AT \S{1,40} DUE TO JOB REQUEUE",
        hint(C.NODE_OR_PROCESS_FAILURE, A.SCHEDULER),
        "The scheduler cancelled the job (by a user or an operator).",
    ),
    sig(
        "nccl_warn",
        r"NCCL WARN",
        NET_CASCADE,
        "Any other NCCL warning.",
        refine=flood,
    ),
)
