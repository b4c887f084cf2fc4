"""Built-in signatures of the GPU software stack: CUDA and NCCL errors as PyTorch reports
them, and the watchdogs of the collectives (c10d, NCCL's RAS)."""

from __future__ import annotations

from detection.core.signatures.entries import (
    APP_ERROR,
    APP_FATAL,
    HANG_CASCADE,
    OOM,
    A,
    C,
    K,
    R,
    S,
    sig,
)
from detection.core.signatures.model import classify
from detection.core.signatures.refiners import flood, refine_watchdog

CUDA = (
    sig(
        "cuda_oom",
        r"(?i)CUDA out of memory|OutOfMemoryError|CUDA error: out of memory"
        r"|Cuda failure '?out of memory|cudaErrorMemoryAllocation|CUBLAS_STATUS_ALLOC_FAILED"
        r"|HIP out of memory|RESOURCE_EXHAUSTED: Out of memory"
        r"|Out of memory error on GPU \d|memory::allocation::BadAlloc"
        r"|RESOURCE_EXHAUSTED[^\n]*(?:HBM|memory)"
        # Other accelerators' allocators: Ascend's driver and torch_npu, Gaudi's, HIP's.
        r"|(?i:heap_alloc_managed out of memory)|halMemAlloc failed[^\n]*drvRetCode=6\b"
        r"|NPU out of memory|PT_DEVMEM Allocation failed|hipErrorOutOfMemory"
        r"|Device out of memory \(OOM\)",
        OOM,
        "The GPU (or another accelerator) ran out of device memory.",
    ),
    sig(
        "cuda_illegal_memory_access",
        r"(?i)illegal memory access|cudaErrorIllegalAddress|an illegal instruction was encountered"
        r"|misaligned address"
        # ROCm's runtime on a GPU page fault (CUDA's illegal address, Xid 31).
        r"|Memory access fault by GPU node-\d+|hipErrorIllegalAddress"
        r"|HSA_STATUS_ERROR_MEMORY_(?:APERTURE_VIOLATION|FAULT)",
        APP_ERROR,
        "A kernel touched memory it should not (an application or library bug, or a faulty "
        "GPU when the driver logs an Xid).",
    ),
    sig(
        "cuda_device_assert",
        r"device-side assert(?:ion)? triggered|Assertion `[^`\n]{0,300}` failed",
        APP_FATAL,
        "A device-side assertion failed (usually an index or a label out of range).",
        refine=flood,
    ),
    sig(
        "cuda_arch_mismatch",
        # The build has no kernel for this GPU's architecture (a new GPU, an old image).
        r"named symbol not found|no kernel image is available for execution"
        r"|cudaErrorNoKernelImageForDevice|hipErrorNoBinaryForGpu"
        r"|with CUDA capability sm_\d+ is not compatible",
        classify(K.CRASH, C.APPLICATION_ERROR, A.SYSTEM_SOFTWARE, R.INITIATING, False, S.ERROR),
        "The CUDA/NCCL build has no kernels for this GPU (architecture not compiled in).",
        refine=flood,
    ),
    sig(
        "invalid_device_ordinal",
        r"(?i)invalid device ordinal|cudaErrorInvalidDevice\b",
        APP_FATAL,
        "The job asks for a GPU index the node does not expose (device id, CUDA_VISIBLE_DEVICES"
        " or more ranks per node than GPUs).",
        refine=flood,
    ),
    sig(
        "cuda_previous_error",
        r"(?i)\bprevious (?:CUDA )?error\b|caused by a previous error",
        classify(K.CRASH, C.APPLICATION_ERROR, A.NONE, R.CASCADE, False, S.WARNING),
        "Reports an error that happened earlier.",
    ),
    sig(
        "npu_error_wrapper",
        # torch_npu's exception names only a code; the vendor's message lines after it say
        # what failed (an operator's call, such as HcclAllreduce, by its code alike).
        r"NPU error, error code is \d+|OPS function error: \w{1,60}, error code is \d+",
        classify(K.CRASH, C.APPLICATION_ERROR, A.NONE, R.CASCADE, False, S.WARNING),
        "torch_npu reports an NPU runtime error by its code; its cause is logged beside it.",
    ),
    sig(
        "cuda_library_error",
        r"CUBLAS_STATUS_(?:EXECUTION_FAILED|INTERNAL_ERROR|NOT_INITIALIZED)"
        r"|CUDNN_STATUS_(?:EXECUTION_FAILED|INTERNAL_ERROR|MAPPING_ERROR)",
        classify(K.CRASH, C.GPU_HARDWARE, A.SYSTEM_SOFTWARE, R.INITIATING, False, S.ERROR),
        "cuBLAS or cuDNN failed to run a kernel: a CUDA stack or GPU fault unless shown otherwise.",
    ),
)


COLLECTIVES = (
    sig(
        "duplicate_gpu_per_rank",
        # NCCL (RCCL alike) finds two ranks of one communicator on the same GPU: the launch
        # gave several processes one device (no set_device by local rank, a wrong
        # CUDA_VISIBLE_DEVICES, more processes per node than GPUs). Every launch repeats it.
        r"Duplicate GPU detected ?: ?rank \d{1,6} and rank \d{1,6} both on (?:CUDA |HIP )?device",
        APP_FATAL,
        "Two ranks of one communicator were started on the same GPU (the launch's device mapping).",
        refine=flood,
    ),
    sig(
        "collective_usage_refused",
        # A vendor collective library (Kunlun's BKCL) refusing how the program calls it: a
        # pattern of calls or an argument it does not support, which the same code repeats.
        r"\[ERR\]\[BKCL\][^\n]{0,200}(?i:\b(?:dont|don't|do not|does not|doesn't|not) support)"
        r"|\bBKCL_INVALID_ARGUMENT\b",
        APP_FATAL,
        "A collective library (BKCL) refused the program's calls (a usage or argument it does "
        "not support).",
        refine=flood,
    ),
    sig(
        "nccl_invalid_usage",
        r"ncclInvalidUsage|invalid usage \(run with NCCL_DEBUG|ncclInvalidArgument",
        APP_FATAL,
        "The application called NCCL incorrectly (mismatched collectives or arguments).",
    ),
    sig(
        "nccl_internal_error",
        r"ncclInternalError|unhandled cuda error|ncclUnhandledCudaError|NCCL error: internal error",
        classify(K.CRASH, C.INTERCONNECT_NETWORK, A.INTERCONNECT, R.CASCADE, False, S.WARNING),
        "NCCL internal or CUDA error report; the root cause is usually logged elsewhere.",
    ),
    sig(
        "nccl_cuda_failure",
        r"NCCL WARN Cuda failure '(?P<cudaerr>[^'\n]{0,200})'",
        classify(K.CRASH, C.GPU_HARDWARE, A.HARDWARE, R.CASCADE, False, S.WARNING),
        "A CUDA call inside NCCL failed.",
    ),
    sig(
        "nccl_watchdog_timeout",
        r"Watchdog caught collective operation timeout|Timeout at NCCL work"
        r"|Process group watchdog thread terminated with exception"
        r"|Not all ranks joining collective|Communicator ranks have different \w+ operation counts"
        r"|collective operation timeout|Collective \w+ timed out"
        # Gloo's pairs and Ascend's HCCL: the same wait on a peer that never came.
        r"|Timed out waiting \d+ ?ms for (?:recv|send) operation to complete"
        r"|(?i:wait execution of the notify register times out)|EI0002: "
        r"|(?i:hccl[^\n]{0,40} task timeout occurred)",
        HANG_CASCADE,
        "A collective did not finish in time (PyTorch's NCCL watchdog, its flight recorder or "
        "NCCL's RAS).",
        refine=refine_watchdog,
    ),
    sig(
        "expert_dispatch_timeout",
        # An expert-parallel communication library (DeepEP) gave up waiting in its dispatch or
        # combine: tokens from peer ranks never arrived, a collective hang like NCCL's
        # watchdog timeout, the cause (a stuck or slow peer, the fabric) elsewhere.
        r"DeepEP (?:error: [^\n]{0,40}\btimeout\b|[\w -]{0,60}\btimeout\b)",
        classify(K.HANG, C.NCCL_TIMEOUT_HANG, A.SYSTEM_SOFTWARE, R.CASCADE, False, S.ERROR),
        "An expert-parallel dispatch or combine (DeepEP) timed out waiting for its peers.",
        refine=flood,
    ),
    sig(
        "device_stream_timeout",
        # An accelerator runtime gave up waiting for a stream's tasks (Ascend's stream and
        # event waits): a collective or a kernel that never finished, the cause elsewhere.
        r"Stream synchronize timeout[.,!:]|\[stream sync timeout\]"
        r"|all tasks in the specified stream are not completed"
        r"|(?i:event wait timeout occurred during task execution)"
        r"|The execution of the internal task times out",
        classify(K.HANG, C.NCCL_TIMEOUT_HANG, A.SYSTEM_SOFTWARE, R.CASCADE, False, S.ERROR),
        "The accelerator runtime timed out waiting for a stream's tasks to finish.",
        refine=flood,
    ),
    sig(
        "collective_call_failed",
        # A vendor collective library's process group reporting that a call failed (Gaudi's
        # and Ascend's HCCL): a more specific line beside it says why.
        r"Collective call returned error|DIST call hccl api failed",
        classify(K.CRASH, C.INTERCONNECT_NETWORK, A.INTERCONNECT, R.INITIATING, False, S.WARNING),
        "A collective library (HCCL) reports that a collective call failed.",
        refine=flood,
    ),
    sig(
        "nccl_heartbeat_timeout",
        r"(?i)Heartbeat monitor timed out|watchdog got stuck for \d+ seconds",
        HANG_CASCADE,
        "PyTorch NCCL heartbeat monitor: the watchdog itself is stuck (a CUDA/NCCL call hangs).",
        refine=flood,
    ),
    sig(
        "nccl_abort_aftermath",
        r"Some NCCL operations have failed or timed out|detected by watchdog at work"
        r"|taking the entire process down|NCCL communicator was aborted"
        r"|failure detected by watchdog",
        # The process group taking its process down is a failure of the collectives even when
        # the timeout or error that set it off was printed elsewhere (another rank's log, a
        # line cut off): a consequence, so any cause the excerpt shows still comes first.
        HANG_CASCADE,
        "ProcessGroupNCCL tearing down after an error or timeout.",
        refine=flood,
    ),
)
