"""Built-in signatures of the software stack: CUDA and NCCL errors as PyTorch reports them, the
c10d watchdog, filesystems, the kernel's OOM killer and hung-task reports, the launchers
(torchrun, DeepSpeed, srun, PALS) and the schedulers (Slurm, PBS), numerical divergence, and
the application's own exceptions.

Roles follow what the line proves: a line that states a cause initiates; a line that reports a
failure elsewhere (a peer that exited, a launcher killing its children, a "previous error") is a
cascade; teardown noise and debugging hints are context.
"""

from __future__ import annotations

from detection.core.signatures.entries import (
    APP_ERROR,
    APP_FATAL,
    FS,
    HANG_CASCADE,
    HOST_OOM,
    NAN,
    NET_CASCADE,
    NODE_FAILED,
    OOM,
    PROC_CASCADE,
    PROC_KILLED,
    SCHED,
    A,
    C,
    K,
    R,
    S,
    hint,
    sig,
)
from detection.core.signatures.model import classify
from detection.core.signatures.refiners import (
    flood,
    refine_exception,
    refine_overflow,
    refine_ranks,
    refine_watchdog,
)

_TORCH_HINT = "CUDA kernel errors might be asynchronously reported"

CUDA = (
    sig(
        "cuda_oom",
        r"(?i)CUDA out of memory|OutOfMemoryError|CUDA error: out of memory"
        r"|Cuda failure '?out of memory|cudaErrorMemoryAllocation|CUBLAS_STATUS_ALLOC_FAILED"
        r"|HIP out of memory|RESOURCE_EXHAUSTED: Out of memory",
        OOM,
        "The GPU ran out of memory.",
    ),
    sig(
        "cuda_illegal_memory_access",
        r"(?i)illegal memory access|cudaErrorIllegalAddress|an illegal instruction was encountered"
        r"|misaligned address",
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
        "cuda_previous_error",
        r"(?i)\bprevious (?:CUDA )?error\b|caused by a previous error",
        classify(K.CRASH, C.APPLICATION_ERROR, A.NONE, R.CASCADE, False, S.WARNING),
        "Reports an error that happened earlier.",
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
        r"|collective operation timeout|Collective \w+ timed out",
        HANG_CASCADE,
        "A collective did not finish in time (PyTorch's NCCL watchdog, its flight recorder or "
        "NCCL's RAS).",
        refine=refine_watchdog,
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
        hint(C.NCCL_TIMEOUT_HANG, A.INTERCONNECT),
        "ProcessGroupNCCL tearing down after an error or timeout.",
    ),
)

FILESYSTEMS = (
    sig(
        "fs_no_space",
        r"No space left on device|\[Errno 28\]|Disk quota exceeded|\[Errno 122\]|StorageFull"
        r"|ENOSPC|EDQUOT",
        FS,
        "A write (usually a checkpoint) failed: the filesystem or the quota is full.",
    ),
    sig(
        "fs_read_only",
        r"Read-only file system|\[Errno 30\]|EROFS",
        FS,
        "A write failed because the filesystem is mounted read-only.",
    ),
    sig(
        "fs_stale_handle",
        r"(?i)stale (?:NFS )?file handle|\[Errno 116\]|ESTALE",
        FS,
        "A shared filesystem lost track of a file (NFS/Lustre stale handle).",
    ),
    sig(
        "checkpoint_unwritable",
        r"File \S{1,512} cannot be opened|Parent directory \S{1,512} does not exist",
        FS,
        "PyTorch could not open a checkpoint file for writing (its directory is missing or the "
        "filesystem is full).",
    ),
    sig(
        "fs_io_error",
        r"Input/output error|\[Errno 5\]|PytorchStreamReader failed reading"
        r"|PytorchStreamWriter failed writing file|file write failed"
        # EIO as a word alone turns up by chance in binary output: only as an error code.
        r"|(?i:errno|error|err|returned|code|status|with|=)[ :(]{0,2}-?EIO\b|\(-?EIO\)",
        FS,
        "I/O error reading or writing a file.",
    ),
    sig(
        "fs_lustre_error",
        r"LustreError|Lustre: [^\n]{0,200}(?:evicted|timed out|not responding|lost connection)",
        FS,
        "Lustre client error.",
        refine=flood,
    ),
    sig(
        "fs_nfs_not_responding",
        r"nfs: server \S{1,255} not responding",
        FS,
        "An NFS server stopped answering.",
        refine=flood,
    ),
)

HOSTS_AND_SCHEDULERS = (
    sig(
        "host_oom_killer",
        r"Out of memory: Kill(?:ed)? process|oom-kill:|\boom_reaper\b|Memory cgroup out of memory"
        r"|oom-kill event|^\[?[\d. ]*\]? ?Killed process \d+ \(",
        HOST_OOM,
        "The kernel OOM killer ended a process: the node ran out of host memory.",
    ),
    sig(
        "slurm_oom_kill",
        r"Detected \d+ oom[-_]kill events? in (?:StepId|step)|oom[-_]kill event\(s\) in"
        r"|Exceeded (?:job|step) memory limit|OUT_OF_MEMORY",
        HOST_OOM,
        "Slurm's cgroup caught the step exceeding its memory.",
        refine=flood,
    ),
    sig(
        "dataloader_shm_bus_error",
        r"Unexpected bus error encountered in worker|is killed by signal: Bus error"
        r"|insufficient shared memory \(shm\)",
        classify(
            K.CRASH, C.NODE_OR_PROCESS_FAILURE, A.SYSTEM_SOFTWARE, R.INITIATING, False, S.ERROR
        ),
        "DataLoader workers ran out of shared memory (/dev/shm) on the node.",
        refine=flood,
    ),
    sig(
        "dataloader_worker_killed",
        r"DataLoader worker \(pid[^)\n]{0,200}\)"
        r" (?:is killed by signal: Killed|exited unexpectedly)",
        HOST_OOM,
        "A DataLoader worker was killed (usually by the host OOM killer).",
        refine=flood,
    ),
    sig(
        "slurm_node_failure_named",
        r"(?:srun|salloc|sbatch|slurmstepd): error: Node failure on"
        r" (?P<host>[A-Za-z0-9][\w.-]{0,253})"
        r"|Killing job step \S{1,40} on failed node (?P<host2>[A-Za-z0-9][\w.-]{0,253})"
        r"|(?:srun|slurmstepd): error: (?:Task launch|Node) (?P<host3>[A-Za-z0-9][\w.-]{0,253})"
        r" not responding",
        NODE_FAILED,
        "Slurm names the node that failed.",
    ),
    sig(
        "slurm_cancelled_node_failure",
        r"CANCELLED AT \S{1,40} DUE TO NODE FAIL|Job requeued due to node failure",
        # The host in this message is where slurmstepd printed it: a survivor, not the culprit.
        # Slurm marks the failed node down itself; the scheduler's node states name it.
        classify(K.CRASH, C.NODE_OR_PROCESS_FAILURE, A.HARDWARE, R.INITIATING, False, S.CRITICAL),
        "Slurm ended the job because one of its nodes failed.",
        refine=flood,
    ),
    sig(
        "pbs_node_failure",
        r"job preempted \(node failure\)|Job killed due to node failure"
        r"|MOM (?P<host>\S{1,255}) is down|send to MOM '(?P<host2>[^'\s]{1,255})' failed",
        NODE_FAILED,
        "PBS lost the job to a node failure (its execution daemon, MOM, is down or unreachable).",
        refine=flood,
    ),
    sig(
        "pals_node_failure",
        r"shepherd died from signal \d+|ping RPC timeout from (?P<host>[A-Za-z0-9][\w.-]{0,253})"
        r"|PALS: [^\n]{0,120}(?:node|host) (?P<host2>[A-Za-z0-9][\w.-]{0,253}) (?:failed|lost)",
        NODE_FAILED,
        "HPE PALS lost a node's shepherd (the per-node launcher daemon died or stopped answering).",
    ),
    sig(
        "slurm_cancelled_time_limit",
        r"CANCELLED AT \S{1,40} DUE TO TIME LIMIT|\bTIMEOUT\b[^\n]{0,40}\btime limit\b",
        SCHED,
        "Slurm ended the job at its time limit.",
        refine=flood,
    ),
    sig(
        "slurm_cancelled_preemption",
        r"CANCELLED AT \S{1,40} DUE TO PREEMPTION|job preempted\b|\bPREEMPTED\b"
        r"|this job is preempted",
        SCHED,
        "The scheduler preempted the job.",
        refine=flood,
    ),
    sig(
        "hung_task",
        r"INFO: task \S{1,64}:\d+ blocked for more than \d+ seconds",
        classify(
            K.HANG, C.NODE_OR_PROCESS_FAILURE, A.SYSTEM_SOFTWARE, R.INITIATING, False, S.WARNING
        ),
        "The kernel reports a process stuck in uninterruptible sleep (I/O or a driver call).",
        refine=flood,
    ),
    sig(
        "cpu_lockup",
        # Linux's lockup detectors and RCU stall warnings: a CPU of the node stopped scheduling.
        r"BUG: soft lockup - CPU#\d+ stuck for \d+s"
        r"|Watchdog detected hard LOCKUP on cpu \d+"
        r"|rcu: INFO: rcu_(?:sched|preempt) (?:self-)?detected stalls? on CPU",
        # A brief lockup under heavy I/O passes; when the job then hangs or its peers time out,
        # this node froze its ranks: exclude it.
        classify(K.HANG, C.NODE_OR_PROCESS_FAILURE, A.SYSTEM_SOFTWARE, R.CONTEXT, True, S.WARNING),
        "A CPU of the node locked up (the kernel's soft/hard lockup or RCU stall detector).",
        refine=flood,
    ),
    sig(
        "hung_task_in_filesystem",
        # The call trace of a hung task, in a filesystem client's module: the task waits on it.
        r"\+0x[0-9a-f]{1,8}/0x[0-9a-f]{1,8} \[(?:mmfs26|mmfslinux|nfs|nfsv4|nfsv3|sunrpc|lustre"
        r"|lnet|ptlrpc|osc|mdc|lov|llite|ceph|fuse|beegfs|wekafsio|gpfs)\]\s*$",
        classify(K.HANG, C.FILESYSTEM_IO, A.SYSTEM_SOFTWARE, R.INITIATING, False, S.ERROR),
        "A hung task's call trace shows it waiting on a shared filesystem (GPFS, NFS, Lustre ...).",
        refine=flood,
    ),
    sig(
        "process_sigkill",
        r"Signals\.SIGKILL|Signal 9 \(SIGKILL\)|signal SIGKILL|exitcode\s*:\s*-9\b"
        r"|exit code -9\b|\(exitcode: -9\)|died from signal 9\b",
        PROC_KILLED,
        "A process was killed with SIGKILL (OOM killer, scheduler or an operator).",
        refine=flood,
    ),
    sig(
        "process_killed_bare",
        r"^Killed\s*$",
        classify(K.CRASH, C.NODE_OR_PROCESS_FAILURE, A.APPLICATION, R.INITIATING, False, S.ERROR),
        "The shell reports the foreground process killed (SIGKILL: almost always the OOM killer).",
        refine=flood,
    ),
    sig(
        "process_segfault",
        r"Segmentation fault|\bSIGSEGV\b|Signal 11 \(SIGSEGV\)|exitcode\s*:\s*-11\b",
        classify(
            K.CRASH, C.NODE_OR_PROCESS_FAILURE, A.SYSTEM_SOFTWARE, R.INITIATING, False, S.ERROR
        ),
        "A process crashed with a segmentation fault.",
    ),
    sig(
        "srun_task_failed",
        r"srun: error: (?P<host>[A-Za-z0-9][\w.-]{0,253}): tasks? [\d,\-\[\] ]{1,200}:"
        r" (?:Killed|Exited with exit code \d+|Terminated|Aborted|Segmentation fault)",
        PROC_CASCADE,
        "srun reports tasks that ended badly (a consequence, not a cause).",
    ),
    sig(
        "torchelastic_child_failed",
        r"ChildFailedError|failed \(exitcode: -?\d+\) local_rank:|ProcessExitedException",
        PROC_CASCADE,
        "torchrun reports a worker that failed.",
        refine=flood,
    ),
    sig(
        "launcher_killing_children",
        r"sigkill_handler\] Killing subprocess|^Killing subprocess \d+|rank \d+ died from signal"
        r"|exits with return code = -?\d+",
        PROC_CASCADE,
        "A launcher (DeepSpeed, PALS) ends the other workers after one failed.",
        refine=flood,
    ),
)

APPLICATION = (
    sig(
        "state_dict_mismatch",
        r"Error\(s\) in loading state_dict|Missing key\(s\) in state_dict"
        r"|Unexpected key\(s\) in state_dict|size mismatch for \S{1,200}: copying a param",
        APP_FATAL,
        "The checkpoint does not fit the model (missing, unexpected or resized weights).",
        refine=flood,
    ),
    sig(
        "script_not_found",
        r"can't open file '[^'\n]{1,512}': \[Errno 2\]",
        APP_FATAL,
        "The launcher cannot find the training script.",
    ),
    sig(
        "undefined_symbol",
        r"\.so(?:\.\d+)*: undefined symbol: |version `[^'\n]{1,80}' not found \(required by",
        APP_FATAL,
        "A compiled extension does not match the installed libraries (rebuild it).",
    ),
    sig(
        "config_key_missing",
        r"Key '[^'\n]{1,200}' not in '[^'\n]{1,200}'|Missing mandatory value: \S{1,200}"
        r"|ConfigAttributeError|ConfigKeyError",
        APP_FATAL,
        "The configuration names a key the schema does not have (or lacks a required one).",
    ),
)

NUMERICAL = (
    sig(
        "loss_scale_at_minimum",
        r"Current loss scale already at minimum|Loss scale reached minimum"
        r"|minimum loss scale reached",
        classify(K.CRASH, C.NUMERICAL_DIVERGENCE, A.APPLICATION, R.INITIATING, False, S.CRITICAL),
        "fp16 loss scaling cannot go lower: the gradients keep overflowing.",
    ),
    sig(
        "deepspeed_overflow_min_scale",
        r"OVERFLOW! Rank (?P<rank>\d{1,6}) Skipping step\. Attempted loss scale: "
        r"(?P<scale>[0-9.eE+-]{1,30})",
        NAN,
        "DeepSpeed keeps skipping steps with the loss scale near its floor (skips at higher "
        "scales are dynamic loss scaling doing its job).",
        refine=refine_overflow,
    ),
    sig(
        "rerun_correct_result",
        r"unexpected result is reproducible on a different GPU, therefore it was likely correct"
        r"|Correct result \(but possible Application error\)",
        NAN,
        "Megatron's re-run check: the unexpected result (NaN, spike) is reproducible on another "
        "GPU, so the model itself diverges.",
        refine=flood,
    ),
    sig(
        "rerun_unexpected_result",
        r"Unexpected result \S{1,120} on rank \d+ at iteration #\d+",
        classify(K.CRASH, C.NUMERICAL_DIVERGENCE, A.NONE, R.CASCADE, False, S.WARNING),
        "Megatron's re-run check saw an unexpected result and re-runs the step to tell a "
        "faulty GPU from a diverging model.",
        refine=flood,
    ),
    sig(
        "loss_nan",
        r"(?i)loss['\"]?\s*[:=]?\s*['\"]?[-+]?(?:nan|inf)(?:inity)?\b|loss is (?:NaN|Inf)\b",
        NAN,
        "The loss is NaN or Inf.",
        refine=flood,
    ),
    sig(
        "grad_norm_nan",
        r"(?i)grad[ _]norm['\"]?\s*[:=]\s*['\"]?[-+]?(?:nan|inf)\b",
        NAN,
        "The gradient norm is NaN or Inf.",
        refine=flood,
    ),
    sig(
        "nan_detected",
        r"(?i)found NaN in|Unexpected result nan|NaN or Inf found in input tensor"
        r"|Model diverged with loss = NaN|number of nan iterations:\s*[1-9]"
        r"|detected (?:a )?(?:NaN|Inf) (?:in|loss)",
        NAN,
        "A NaN check fired.",
        refine=flood,
    ),
)

STRAGGLERS = (
    sig(
        "straggler_warning",
        r"STRAGGLER DETECTION WARNING: [^\n]{0,200}Affected ranks: \[(?P<ranks>[\d, ]{1,1000})"
        r"|^\s*(?:COMPUTE|INPUT|H2D|COMM)_STRAGGLER\s*$",
        classify(K.STRAGGLER, C.STRAGGLER, A.HARDWARE, R.INITIATING, True, S.ERROR),
        "A straggler detector (NVRx, Megatron, TraceML) names slow ranks.",
        refine=refine_ranks,
    ),
)

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

# Python tracebacks: assembled per stream into the exception line's finding.
PYTHON = (
    sig(
        "python_traceback_start",
        r"Traceback \(most recent call last\)",
        hint(C.APPLICATION_ERROR, A.APPLICATION),
        "Start of a Python traceback.",
        internal=True,
    ),
    sig(
        "python_frame",
        r"File \"(?P<tb_file>[^\"\n]{1,512})\", line (?P<tb_line>\d{1,7}),"
        r" in (?P<tb_func>\S{1,200})",
        hint(C.APPLICATION_ERROR, A.APPLICATION),
        "A Python traceback frame.",
        internal=True,
    ),
    sig(
        "python_exception",
        r"(?:^|[\s\]:>|)*])(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Exit|Interrupt)(?::|\s*$)",
        APP_ERROR,
        "A Python exception raised by the program.",
        refine=refine_exception,
    ),
)
