"""The built-in signatures, in priority order (the first that matches a line classifies it).

Order: known-benign lines first (so they suppress the generic patterns below them), then GPU
hardware, CUDA and OOM errors, NCCL and the interconnect, the c10d store, the filesystem, the
node and the scheduler, numerical divergence, hints, and last the generic Python exception.
"""

from __future__ import annotations

from detection.core.constants import Role, Severity
from detection.core.signatures.model import (
    Classification,
    Refiner,
    Signature,
    classify,
    compile_re,
)
from detection.core.signatures.refiners import (
    flood,
    refine_exception,
    refine_ib,
    refine_overflow,
    refine_watchdog,
    refine_xid,
)
from recovery_console.fleet.core.taxonomy import Attribution, Category, Kind

K, C, A, R, S = Kind, Category, Attribution, Role, Severity


_BENIGN = classify(K.NONE, C.BENIGN, A.NONE, R.CONTEXT, False, S.INFO)


def _hint(category: Category, attribution: Attribution = A.NONE) -> Classification:
    """A context line: recorded as evidence, never a cause. (Category ``benign`` would make it a
    suppressor instead.)"""
    return classify(K.NONE, category, attribution, R.CONTEXT, False, S.INFO)


def _sig(
    name: str,
    pattern: str,
    classification: Classification,
    description: str,
    refine: Refiner | None = None,
    internal: bool = False,
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
    )


# --- the table ------------------------------------------------------------------------------

_HW_NODE = classify(K.CRASH, C.GPU_HARDWARE, A.HARDWARE, R.INITIATING, True, S.CRITICAL)
_APP_CUDA = classify(K.CRASH, C.APPLICATION_ERROR, A.APPLICATION, R.INITIATING, False, S.ERROR)
_OOM = classify(K.CRASH, C.CUDA_OOM, A.APPLICATION, R.INITIATING, False, S.ERROR)
_NET_INIT = classify(K.CRASH, C.INTERCONNECT_NETWORK, A.INTERCONNECT, R.INITIATING, False, S.ERROR)
_NET_CASCADE = classify(
    K.CRASH, C.INTERCONNECT_NETWORK, A.INTERCONNECT, R.CASCADE, False, S.WARNING
)
_HANG_CASCADE = classify(K.HANG, C.NCCL_TIMEOUT_HANG, A.INTERCONNECT, R.CASCADE, False, S.ERROR)
_FS = classify(K.CRASH, C.FILESYSTEM_IO, A.SYSTEM_SOFTWARE, R.INITIATING, False, S.ERROR)
_PROC_CASCADE = classify(K.CRASH, C.NODE_OR_PROCESS_FAILURE, A.NONE, R.CASCADE, False, S.WARNING)
_SCHED = classify(K.CRASH, C.NODE_OR_PROCESS_FAILURE, A.SCHEDULER, R.INITIATING, False, S.ERROR)
_NAN = classify(K.CRASH, C.NUMERICAL_DIVERGENCE, A.APPLICATION, R.INITIATING, False, S.ERROR)

_TORCH_HINT = "CUDA kernel errors might be asynchronously reported"

BUILTIN_SIGNATURES: tuple[Signature, ...] = (
    # Known-benign: suppress the generic NCCL WARN below.
    _sig(
        "nccl_warn_benign_init",
        r"NCCL WARN (?:[^\n]*\bNCCL_[A-Z0-9_]+\b[^\n]*(?:set by environment|is deprecated"
        r"|ignored|Ignoring)|Failed to open libibverbs|NET/Plugin|Could not find real path"
        r"|[^\n]*NUMA)",
        _BENIGN,
        "Init-time NCCL warnings about environment variables, plugins and optional libraries.",
    ),
    # GPU hardware.
    _sig(
        "nvrm_xid",
        r"NVRM: Xid \((?:PCI:)?(?P<pci>[^)\n]{0,64})\):\s*(?P<xid>\d{1,4})",
        _HW_NODE,
        "NVIDIA driver Xid event, graded by NVIDIA's Xid catalogue.",
        refine=refine_xid,
    ),
    _sig(
        "nvswitch_sxid",
        r"SXid \((?:PCI:)?(?P<pci>[^)\n]{0,64})\):\s*(?P<sxid>\d{1,6})",
        classify(K.CRASH, C.GPU_HARDWARE, A.HARDWARE, R.INITIATING, False, S.WARNING),
        "NVSwitch SXid event.",
    ),
    _sig(
        "gpu_fallen_off_bus",
        r"(?i)fallen off the bus",
        _HW_NODE,
        "The GPU disappeared from PCIe (Xid 79).",
        refine=flood,
    ),
    _sig(
        "gpu_uncorrectable_ecc",
        r"(?i)uncorrectable ECC error|ECC_UNCORRECTABLE|double bit ECC",
        _HW_NODE,
        "Uncorrectable GPU memory error.",
    ),
    _sig(
        "gpu_nvlink_error",
        r"(?i)uncorrectable NVLink error|NVLink[^\n]{0,80}\b(?:fatal|uncorrectable)\b",
        _HW_NODE,
        "Uncorrectable NVLink error.",
    ),
    _sig(
        "gpu_reset_required",
        r"(?i)GPU (?:requires|needs) (?:a )?reset|\bGPU Reset Required\b|Node Reboot Required"
        r"|RmInitAdapter failed",
        classify(K.CRASH, C.GPU_HARDWARE, A.HARDWARE, R.INITIATING, True, S.ERROR),
        "The driver says the GPU needs a reset or the node a reboot.",
    ),
    _sig(
        "gpu_unavailable",
        r"CUDA-capable device\(s\) is/are busy or unavailable"
        r"|Unable to determine the device handle for GPU",
        classify(K.CRASH, C.GPU_HARDWARE, A.SYSTEM_SOFTWARE, R.INITIATING, True, S.ERROR),
        "A GPU of the node cannot be used.",
    ),
    # CUDA memory and errors.
    _sig(
        "cuda_oom",
        r"(?i)CUDA out of memory|OutOfMemoryError|CUDA error: out of memory"
        r"|Cuda failure '?out of memory|cudaErrorMemoryAllocation|CUBLAS_STATUS_ALLOC_FAILED",
        _OOM,
        "The GPU ran out of memory.",
    ),
    _sig(
        "cuda_illegal_memory_access",
        r"(?i)illegal memory access|cudaErrorIllegalAddress|an illegal instruction was encountered"
        r"|misaligned address",
        _APP_CUDA,
        "A kernel touched memory it should not (usually an application or library bug).",
    ),
    _sig(
        "cuda_device_assert",
        r"device-side assert(?:ion)? triggered",
        _APP_CUDA,
        "A device-side assertion (often an index out of range).",
    ),
    _sig(
        "cuda_launch_failure",
        r"(?i)unspecified launch failure",
        _APP_CUDA,
        "A kernel crashed (application fault unless the driver logs a hardware Xid).",
    ),
    _sig(
        "cuda_previous_error",
        r"(?i)\bprevious (?:CUDA )?error\b|caused by a previous error",
        classify(K.CRASH, C.APPLICATION_ERROR, A.NONE, R.CASCADE, False, S.WARNING),
        "Reports an error that happened earlier.",
    ),
    # NCCL and the network.
    _sig(
        "nccl_ib_completion_error",
        r"NET/IB\w* ?: ?Got completion from peer (?P<peer>[^\s<,]{1,200})(?:<\d+>)?"
        r" with (?:error (?P<ibstatus>\d+)|status=(?P<ibstatus2>\d+))",
        classify(K.CRASH, C.INTERCONNECT_NETWORK, A.INTERCONNECT, R.INITIATING, True, S.ERROR),
        "InfiniBand/RoCE work completion error (status 12: transport retry counter exceeded).",
        refine=refine_ib,
    ),
    _sig(
        "nccl_remote_error",
        r"(?i)remote process exited or there was a network error|ncclRemoteError"
        r"|Connection closed by remote peer"
        r"|(?i:nccl|socket|\bnet\b|recv|send|store|c10d)[^\n]{0,200}(?:Connection reset by peer"
        r"|Broken pipe)"
        r"|NET/OFI [^\n]{0,200}completed with error",
        _NET_CASCADE,
        "A peer went away; usually the consequence of a failure elsewhere.",
        refine=flood,
    ),
    _sig(
        "nccl_system_error",
        r"unhandled system error|ncclSystemError",
        _NET_INIT,
        "NCCL system call (socket, memory) failure.",
    ),
    _sig(
        "nccl_invalid_usage",
        r"ncclInvalidUsage|invalid usage \(run with NCCL_DEBUG",
        _APP_CUDA,
        "The application called NCCL incorrectly.",
    ),
    _sig(
        "nccl_internal_error",
        r"ncclInternalError|unhandled cuda error|ncclUnhandledCudaError|NCCL error: internal error",
        classify(K.CRASH, C.INTERCONNECT_NETWORK, A.INTERCONNECT, R.CASCADE, False, S.WARNING),
        "NCCL internal or CUDA error report; the root cause is usually logged elsewhere.",
    ),
    _sig(
        "nccl_cuda_failure",
        r"NCCL WARN Cuda failure '(?P<cudaerr>[^'\n]{0,200})'",
        classify(K.CRASH, C.GPU_HARDWARE, A.HARDWARE, R.INITIATING, False, S.WARNING),
        "A CUDA call inside NCCL failed.",
    ),
    _sig(
        "nccl_watchdog_timeout",
        r"Watchdog caught collective operation timeout",
        _HANG_CASCADE,
        "PyTorch ProcessGroupNCCL watchdog: a collective did not finish in time.",
        refine=refine_watchdog,
    ),
    _sig(
        "nccl_heartbeat_timeout",
        r"(?i)Heartbeat monitor timed out|watchdog got stuck for \d+ seconds",
        _HANG_CASCADE,
        "PyTorch NCCL heartbeat monitor: the watchdog itself is stuck (a CUDA/NCCL call hangs).",
        refine=flood,
    ),
    _sig(
        "nccl_abort_aftermath",
        r"Some NCCL operations have failed or timed out|Timeout at NCCL work"
        r"|detected by watchdog at work|taking the entire process down"
        r"|NCCL communicator was aborted|failure detected by watchdog",
        _hint(C.NCCL_TIMEOUT_HANG, A.INTERCONNECT),
        "ProcessGroupNCCL tearing down after an error or timeout.",
    ),
    # c10d store and rendezvous.
    _sig(
        "c10d_rendezvous_error",
        r"Rendezvous(?:Timeout|Connection|Closed|State)?Error",
        _NET_INIT,
        "torchrun rendezvous failed.",
    ),
    _sig(
        "c10d_store_error",
        r"DistStoreError|DistNetworkError|client socket has timed out|connect\(\) timed out"
        r"|TCPStore[^\n]{0,120}(?:timed out|timeout|failed|refused)|Socket Timeout",
        _NET_INIT,
        "The c10d key-value store (TCPStore) could not be reached.",
    ),
    # Filesystem.
    _sig(
        "fs_no_space",
        r"No space left on device|\[Errno 28\]|Disk quota exceeded|\[Errno 122\]|StorageFull"
        r"|PytorchStreamWriter failed writing file|file write failed",
        _FS,
        "A write (usually a checkpoint) failed: the filesystem is full.",
    ),
    _sig(
        "fs_stale_handle",
        r"(?i)stale (?:NFS )?file handle|\[Errno 116\]",
        _FS,
        "A shared filesystem lost track of a file (NFS/Lustre stale handle).",
    ),
    _sig(
        "fs_io_error",
        r"Input/output error|\[Errno 5\]|\[Errno 30\] Read-only file system"
        r"|PytorchStreamReader failed reading",
        _FS,
        "I/O error reading or writing a file.",
    ),
    _sig(
        "fs_lustre_error",
        r"LustreError|Lustre: [^\n]{0,200}(?:evicted|timed out|not responding|lost connection)",
        _FS,
        "Lustre client error.",
        refine=flood,
    ),
    _sig(
        "fs_nfs_not_responding",
        r"nfs: server \S{1,255} not responding",
        _FS,
        "An NFS server stopped answering.",
        refine=flood,
    ),
    # Node, process and scheduler.
    _sig(
        "host_oom_killer",
        r"Out of memory: Kill(?:ed)? process|oom-kill:|\boom_reaper\b|Memory cgroup out of memory"
        r"|oom-kill event",
        classify(K.CRASH, C.NODE_OR_PROCESS_FAILURE, A.APPLICATION, R.INITIATING, False, S.ERROR),
        "The kernel OOM killer ended a process: the node ran out of host memory.",
    ),
    _sig(
        "dataloader_worker_killed",
        r"DataLoader worker \(pid[^)\n]{0,200}\)"
        r" (?:is killed by signal: Killed|exited unexpectedly)",
        classify(K.CRASH, C.NODE_OR_PROCESS_FAILURE, A.APPLICATION, R.INITIATING, False, S.ERROR),
        "A DataLoader worker was killed (usually by the host OOM killer).",
    ),
    _sig(
        "slurm_node_failure_named",
        r"srun: error: Node failure on (?P<host>[A-Za-z0-9][\w.-]{0,253})",
        classify(K.CRASH, C.NODE_OR_PROCESS_FAILURE, A.HARDWARE, R.INITIATING, True, S.CRITICAL),
        "srun names the node that failed.",
    ),
    _sig(
        "slurm_cancelled_node_failure",
        r"CANCELLED AT \S{1,40} DUE TO NODE FAIL",
        # The host in this message is where slurmstepd printed it: a survivor, not the culprit.
        classify(K.CRASH, C.NODE_OR_PROCESS_FAILURE, A.HARDWARE, R.INITIATING, False, S.CRITICAL),
        "Slurm cancelled the job because one of its nodes failed.",
        refine=flood,
    ),
    _sig(
        "slurm_cancelled_time_limit",
        r"CANCELLED AT \S{1,40} DUE TO TIME LIMIT",
        _SCHED,
        "Slurm ended the job at its time limit.",
        refine=flood,
    ),
    _sig(
        "slurm_cancelled_preemption",
        r"CANCELLED AT \S{1,40} DUE TO PREEMPTION",
        _SCHED,
        "Slurm preempted the job.",
        refine=flood,
    ),
    _sig(
        "process_sigkill",
        r"Signals\.SIGKILL|Signal 9 \(SIGKILL\)|signal SIGKILL|exitcode\s*:\s*-9\b"
        r"|exit code -9\b|\(exitcode: -9\)",
        classify(
            K.CRASH, C.NODE_OR_PROCESS_FAILURE, A.SYSTEM_SOFTWARE, R.INITIATING, False, S.WARNING
        ),
        "A process was killed with SIGKILL (OOM killer, scheduler or an operator).",
        refine=flood,
    ),
    _sig(
        "process_segfault",
        r"Segmentation fault|\bSIGSEGV\b|Signal 11 \(SIGSEGV\)|exitcode\s*:\s*-11\b",
        classify(K.CRASH, C.NODE_OR_PROCESS_FAILURE, A.APPLICATION, R.INITIATING, False, S.ERROR),
        "A process crashed with a segmentation fault.",
    ),
    _sig(
        "srun_task_failed",
        r"srun: error: (?P<host>[A-Za-z0-9][\w.-]{0,253}): tasks? [\d,\-\[\] ]{1,200}:"
        r" (?:Killed|Exited with exit code \d+|Terminated|Aborted|Segmentation fault)",
        _PROC_CASCADE,
        "srun reports tasks that ended badly (a consequence, not a cause).",
    ),
    _sig(
        "torchelastic_child_failed",
        r"ChildFailedError|failed \(exitcode: -?\d+\) local_rank:|ProcessExitedException",
        _PROC_CASCADE,
        "torchrun reports a worker that failed.",
        refine=flood,
    ),
    # Numerical divergence.
    _sig(
        "loss_scale_at_minimum",
        r"Current loss scale already at minimum",
        classify(K.CRASH, C.NUMERICAL_DIVERGENCE, A.APPLICATION, R.INITIATING, False, S.CRITICAL),
        "fp16 loss scaling cannot go lower: the gradients keep overflowing.",
    ),
    _sig(
        "deepspeed_overflow_min_scale",
        r"OVERFLOW! Rank (?P<rank>\d{1,6}) Skipping step\. Attempted loss scale: "
        r"(?P<scale>[0-9.eE+-]{1,30})",
        _NAN,
        "DeepSpeed keeps skipping steps at the minimum loss scale (higher scales are normal).",
        refine=refine_overflow,
    ),
    _sig(
        "loss_nan",
        r"(?i)loss['\"]?\s*[:=]?\s*['\"]?[-+]?(?:nan|inf)(?:inity)?\b",
        _NAN,
        "The loss is NaN or Inf.",
        refine=flood,
    ),
    _sig(
        "grad_norm_nan",
        r"(?i)grad[ _]norm['\"]?\s*[:=]\s*['\"]?[-+]?(?:nan|inf)\b",
        classify(K.CRASH, C.NUMERICAL_DIVERGENCE, A.APPLICATION, R.INITIATING, False, S.WARNING),
        "The gradient norm is NaN or Inf.",
        refine=flood,
    ),
    _sig(
        "nan_detected",
        r"(?i)found NaN in|Unexpected result nan|NaN or Inf found in input tensor"
        r"|Model diverged with loss = NaN|number of nan iterations:\s*[1-9]",
        _NAN,
        "A NaN check fired.",
        refine=flood,
    ),
    # Hints and bookkeeping: never a cause.
    _sig(
        "hint_cuda_async",
        r"CUDA kernel errors might be asynchronously reported",
        _hint(C.APPLICATION_ERROR),
        "PyTorch hint: " + _TORCH_HINT + ".",
    ),
    _sig(
        "hint_cuda_launch_blocking",
        r"(?i)consider passing CUDA_LAUNCH_BLOCKING=1",
        _hint(C.APPLICATION_ERROR),
        "PyTorch hint to debug with CUDA_LAUNCH_BLOCKING=1.",
    ),
    _sig(
        "hint_torch_dsa",
        r"Compile with .?TORCH_USE_CUDA_DSA",
        _hint(C.APPLICATION_ERROR),
        "PyTorch hint to enable device-side assertions.",
    ),
    _sig(
        "hint_nccl_debug_dump",
        r"preparing to dump debug info|Stack trace of the failed collective not found"
        r"|First PG on this rank to signal dumping",
        _hint(C.NCCL_TIMEOUT_HANG, A.INTERCONNECT),
        "ProcessGroupNCCL dumping its flight recorder.",
    ),
    _sig(
        "hint_torchelastic",
        r"To enable traceback see: \S+elastic/errors|Sending process \d+ closing signal SIGTERM"
        r"|terminate called after throwing an instance of|Received \d+ death signal",
        _hint(C.NODE_OR_PROCESS_FAILURE),
        "torchrun and C++ runtime teardown messages.",
    ),
    _sig(
        "slurm_cancelled",
        r"\*\*\* (?:JOB|STEP) \S{1,40} (?:ON \S{1,255} )?CANCELLED AT \S{1,40}(?: \*\*\*| by)",
        _hint(C.NODE_OR_PROCESS_FAILURE, A.SCHEDULER),
        "Slurm cancelled the job (by a user or an operator).",
    ),
    _sig(
        "nccl_warn",
        r"NCCL WARN",
        _NET_CASCADE,
        "Any other NCCL warning.",
        refine=flood,
    ),
    # Python tracebacks: assembled per stream into the exception line's finding.
    _sig(
        "python_traceback_start",
        r"Traceback \(most recent call last\)",
        _hint(C.APPLICATION_ERROR, A.APPLICATION),
        "Start of a Python traceback.",
        internal=True,
    ),
    _sig(
        "python_frame",
        r"File \"(?P<tb_file>[^\"\n]{1,512})\", line (?P<tb_line>\d{1,7}),"
        r" in (?P<tb_func>\S{1,200})",
        _hint(C.APPLICATION_ERROR, A.APPLICATION),
        "A Python traceback frame.",
        internal=True,
    ),
    _sig(
        "python_exception",
        r"(?:^|[\s\]:>|)])(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Exit|Interrupt)(?::|\s*$)",
        _APP_CUDA,
        "A Python exception raised by the program.",
        refine=refine_exception,
    ),
)
