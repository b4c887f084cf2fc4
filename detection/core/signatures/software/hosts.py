"""Built-in signatures of the hosts and schedulers: the kernel's OOM killer and hung-task and
lockup reports, signals, the launchers (torchrun, DeepSpeed, srun, PALS) and the schedulers
(Slurm, PBS)."""

from __future__ import annotations

from detection.core.signatures.entries import (
    HOST_OOM,
    NODE_FAILED,
    PROC_CASCADE,
    PROC_KILLED,
    SCHED,
    SCHED_NODE,
    A,
    C,
    K,
    R,
    S,
    sig,
)
from detection.core.signatures.model import classify
from detection.core.signatures.refiners import flood

# Memory monitors that end a job's processes before the kernel's OOM killer would (Ray's, a
# Kubernetes cgroup, systemd-oomd, earlyoom, YARN): the job's own footprint, which a retry on
# the same hosts repeats. Checked before the CUDA table, whose "OutOfMemoryError" Ray reuses.
MEMORY_MONITORS = (
    sig(
        "memory_monitor_kill",
        r"killed due to memory pressure \(OOM\)|killed due to the node running low on memory"
        r"|ray\.exceptions\.OutOfMemoryError|\bOOMKilled\b"
        r"|systemd-oomd[^\n]*Killed [^\n]*due to memory|earlyoom[^\n]*sending SIG(?:TERM|KILL)"
        r"|is running beyond (?:physical|virtual) memory limits"
        r"|Container killed by YARN for exceeding memory limits",
        HOST_OOM,
        "A memory monitor (Ray's, Kubernetes', systemd-oomd, earlyoom, YARN) killed the job's "
        "processes: the host ran short of memory for what the job uses.",
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
        "slurm_node_launch_failed",
        r"Task launch for \S{1,40} failed on node (?P<host>[A-Za-z0-9][\w.-]{0,253})"
        r"|Prolog failure on node (?P<host2>[A-Za-z0-9][\w.-]*)"
        r"|Prolog hung on node (?P<host4>[A-Za-z0-9][\w.-]*)"
        r"|(?:spank-)?(?:prolog|epilog): error: "
        r"|STEPD TERMINATED ON (?P<host3>[A-Za-z0-9][\w.-]*) AT \S+ DUE TO JOB NOT"
        r" ENDING WITH SIGNALS"
        r"|_job_complete: JobId=\d{1,20} WTERMSIG (?:6|7|9|11)\b"
        r"|(?i:error running (?:the )?prolog|prolog failed|prolog_slurmctld failed)"
        r"|slurmstepd: error: execve\(\)"
        r"|slurmstepd: error: [^\n]*(?:spool|job_container|TMPDIR)",
        SCHED_NODE,
        "The node's Slurm daemon could not start the job's tasks (prolog, execve, spool): the "
        "node is not fit to run it.",
        refine=flood,
    ),
    sig(
        "pod_evicted",
        r"(?i)The node was low on resource: (?:memory|ephemeral-storage)"
        r"|Pod ephemeral local storage usage exceeds"
        r"|Container [^\n]* was using [^\n]*, which exceeds its request",
        HOST_OOM,
        "Kubernetes evicted the pod: the node ran short of memory or local storage for what "
        "the pod uses beyond its request.",
        refine=flood,
    ),
    sig(
        "ray_node_dead",
        r"The node with node id: \w+ and (?:ip|address): (?P<host>[A-Za-z0-9][\w.:-]*)"
        r" (?:and node name: \S+ )?has been marked dead"
        # An actor whose owner's node went down takes the owner's address with it.
        r"|Owner Ip address: (?P<host2>[A-Za-z0-9][\w.:-]*)[^\n]*Owner's node has crashed",
        NODE_FAILED,
        "Ray lost a node of the job (its raylet stopped answering heartbeats).",
        refine=flood,
    ),
    sig(
        "horovod_stall",
        r"waiting for remainder of ranks for more than \d{1,6} seconds",
        classify(K.HANG, C.NCCL_TIMEOUT_HANG, A.NONE, R.INITIATING, False, S.ERROR),
        "Horovod's stall check: some ranks wait in a collective the others never joined.",
        refine=flood,
    ),
    sig(
        "slurm_step_refused",
        r"Unable to create step for job \d{1,20}: \S",
        SCHED,
        "Slurm could not create the job step (resources busy or not available).",
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
        r"CANCELLED AT \S{1,40} DUE TO TIME LIMIT|\bTIMEOUT\b[^\n]{0,40}\btime limit\b"
        r"|TERM_RUNLIMIT: job killed after reaching LSF run time limit",
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
        "cloud_capacity_preempted",
        # A cloud or its orchestrator (SkyPilot, GKE, EC2, TPU VMs) took the spot or preemptible
        # capacity back: the job was well; run it again on new capacity.
        r"(?i:\b(?:cluster|instance|node|vm|tpu(?: vm)?|spot (?:instance|cluster|vm))"
        r"(?: [\w.-]{1,64})? (?:is|was|has been|got) (?:preempted|reclaimed)\b)"
        r"|compute\.instances\.preempted|(?i:spot instance interruption)"
        # The notice before the capacity goes, as a VM's agent relays the metadata service
        # (GCP's preemption, EC2's instance action, Azure's scheduled Preempt event).
        r"|(?i:\btermination is imminent\b)"
        r"|(?i:\b(?:spot|preemption|preemptible)(?: instance| vm)? (?:termination|interruption)"
        r" notice\b)|(?i:received (?:a |the )?preemption notice)"
        r"|\bEventType\W{1,4}Preempt\b",
        SCHED,
        "The cloud reclaimed the job's spot or preemptible capacity.",
        refine=flood,
    ),
    sig(
        "orchestrator_job_failed",
        # A batch orchestrator's record of a failed job (Volcano's job phase and its restart
        # actions, the Kubeflow operators' job condition): it says that the job failed, not
        # why; a cause in the log beside it decides instead.
        r"^\s*Phase:\s{1,20}Failed\b|execute action (?:RestartJob|RestartTask|RestartPod)\b"
        r"|\b(?:PyTorchJob|TFJob|MPIJob|JAXJob|XGBoostJob|PaddleJob|TrainJob) \S{1,253} is "
        r"failed because",
        SCHED,
        "The orchestrator reports that the job failed (or restarts it), with no cause of its own.",
        refine=flood,
    ),
    sig(
        "container_exited_with_error",
        # An orchestrator (Kubeflow's operators, Kubernetes) reporting the training container's
        # own exit status: a code below 128 is the program's exit, not a signal it received.
        r"(?:[Pp]od|[Cc]ontainer|[Rr]eplica)\b[^\n]{0,200}? (?:exited|terminated) with "
        r"(?:exit )?code (?:[1-9]|[1-9][0-9]|1[01][0-9]|12[0-7])\b",
        classify(K.CRASH, C.APPLICATION_ERROR, A.APPLICATION, R.INITIATING, False, S.WARNING),
        "The training container exited with an error status of its own (not a signal): the "
        "program failed, and its own log says why.",
        refine=flood,
    ),
    sig(
        "mpi_peer_lost",
        # An MPI launcher (Open MPI's ORTE or PRRTE, MPICH's hydra) or an MPI process losing
        # its connection to a remote daemon or peer: the peer's host or process went away, and
        # the line does not say why; a cause logged anywhere beside it comes first.
        r"\b(?:ORTE|PRRTE|PRTE) has lost communication with (?:a remote daemon|its daemon)"
        r"|An MPI communication peer process has unexpectedly disconnected"
        r"|control_cb \(pm/pmiserv/pmiserv_cb\.c:\d{1,6}\): assert \(!closed\) failed",
        PROC_KILLED,
        "The MPI launcher or a process lost a remote daemon or peer (its host or process went "
        "away; the cause is not in this line).",
        refine=flood,
    ),
    sig(
        "coordination_task_lost",
        # JAX/TensorFlow's coordination service: a worker stopped sending its heartbeat.
        r"heartbeat timeout\. This indicates that the remote task has failed"
        r"|has been set to ERROR in coordination service"
        r"|(?i:task \S+ heartbeat timeout)",
        classify(K.CRASH, C.NODE_OR_PROCESS_FAILURE, A.NONE, R.INITIATING, False, S.ERROR),
        "The coordination service lost a worker process (no heartbeat): it crashed, was killed "
        "or preempted; the line does not say which node.",
        refine=flood,
    ),
    sig(
        "scheduler_unreachable",
        # The scheduler's controller did not answer (Slurm's RPC timeouts, PBS's server, LSF's
        # daemons): an outage of the controller, not of the job or its nodes.
        r"Unable to confirm allocation for job|(?i:unable to contact slurm controller)"
        r"|Socket timed out on send/recv operation|Zero Bytes were transmitted or received"
        r"|(?i:cannot connect to (?:default )?server[^\n]*(?:pbs_server|errno))"
        r"|LSF daemon \(LIM\) not responding|batch system daemon not responding",
        SCHED,
        "The scheduler's controller did not answer the job's request (an RPC timed out).",
        refine=flood,
    ),
    sig(
        "job_submission_refused",
        r"(?:sbatch|salloc|srun|qsub|bsub): error: (?:Batch job submission failed"
        r"|Unable to allocate resources)[^\n]*: \S",
        classify(K.CRASH, C.APPLICATION_ERROR, A.APPLICATION, R.INITIATING, False, S.ERROR),
        "The scheduler refused the job as submitted (its options, dependency or request).",
    ),
    sig(
        "launch_directory_missing",
        # The launcher on a compute node cannot enter the job's working directory: that
        # file system is not mounted there (home on a login-only file system).
        r"(?:Exec|execve?)[^\n]* failed: chdir \S+ No such file or directory"
        r"|(?:aprun|srun|mpirun|mpiexec)[^\n]*(?:cannot|can't|could not) chdir[^\n]*No such file",
        classify(K.CRASH, C.FILESYSTEM_IO, A.APPLICATION, R.INITIATING, False, S.ERROR),
        "The launcher cannot enter the job's working directory on the compute node.",
        refine=flood,
    ),
    sig(
        "accounting_job_failed",
        # sacct's table: the job or a step FAILED with a non-zero exit code, no reason given.
        r"^\s*\d+(?:\.[\w+]+)?\s[^\n]*\sFAILED\s+[1-9]\d*:\d+\s*$",
        classify(K.CRASH, C.NODE_OR_PROCESS_FAILURE, A.SCHEDULER, R.INITIATING, False, S.WARNING),
        "The scheduler's accounting shows the job failed with an exit code (no cause given).",
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
        r"|exit code -9\b|\(exitcode: -9\)|died from signal 9\b"
        # mpirun/prterun's report of a rank it lost to SIGKILL.
        r"|exited on signal 9 \(Killed\)",
        PROC_KILLED,
        "A process was killed with SIGKILL (OOM killer, scheduler or an operator).",
        refine=flood,
    ),
    sig(
        "process_killed_bare",
        # Alone on its line, or right after a progress bar that the shell's line ended.
        r"^Killed\s*$|\|[^\n]*\]Killed\s*$"
        # The shell's status of a child killed by SIGKILL (128 + 9), as a platform reports it.
        r"|(?i:(?:return|exit|error) (?:code|status)\s*[:=]?\s*137\b)",
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
        "xla_rendezvous_peer_lost",
        # XLA's mesh service: the other processes of the job fail a rendezvous whose peer's
        # socket closed under them (that process ended first, the cause is its own).
        r"Failed to meet rendezvous '[^'\n]{1,200}': (?:Socket closed|Connection reset by peer)",
        PROC_CASCADE,
        "A process could not meet its peers at a rendezvous: one of them had already gone.",
        refine=flood,
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
