"""The recovery decision for one attributed interruption: the policy's rule, then the bounds
around it (restart caps, retries without progress), then isolation within the circuit breaker.

Pure Python. Every decision carries its reasons; a stop also says what the user must change.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from fleet.core.taxonomy import Action, category_words

from .incident import History, Incident
from .isolation import isolate
from .policy import NODE_LOCAL, Limits, Policy, rule_for


@dataclass(frozen=True)
class Decision:
    """What to do, with every reason that led there; ``rule`` names the rule table's key that
    chose the action, ``fix`` what to change before resubmitting (stops only)."""

    action: Action
    exclude: tuple[str, ...] = ()
    drain: tuple[str, ...] = ()
    reasons: tuple[str, ...] = ()
    rule: str = ""
    fix: str = ""


# What a user changes before resubmitting, by the rule that stopped the job.
FIXES: Mapping[str, str] = {
    "cuda_oom": (
        "the job runs out of GPU memory with these settings: lower the micro-batch size or the "
        "sequence length, enable activation checkpointing or more sharding (ZeRO, FSDP), or "
        "use more GPUs"
    ),
    "application_error": "fix the error in the code or the configuration, then resubmit",
    "numerical_divergence": (
        "training diverged: resume from an earlier checkpoint with a lower learning rate or "
        "another data order, or find what produces the NaN/Inf (fp16 overflow, bad samples)"
    ),
    "fs_no_space": "the filesystem (or the quota) is full: free space or write elsewhere",
    "fs_read_only": "the filesystem is mounted read-only: fix the mount or write elsewhere",
    "fs_stale_handle": "a shared filesystem handle went stale: remount it or move the files",
    "host_oom_killer": (
        "the node ran out of host memory: use fewer DataLoader workers or less pinned memory, "
        "or request more memory from Slurm (--mem)"
    ),
    "slurm_oom_kill": (
        "Slurm killed the step for exceeding its memory: request more (--mem, --mem-per-gpu) or "
        "use less host memory"
    ),
    "slurm_out_of_memory": (
        "Slurm ended the job for exceeding its memory: request more (--mem, --mem-per-gpu) or "
        "use less host memory"
    ),
    "process_killed_bare": (
        "the process was killed with SIGKILL, almost always by the kernel's OOM killer: use "
        "less host memory (fewer DataLoader workers, smaller buffers) or request more"
    ),
    "checkpoint_unwritable": (
        "the checkpoint file cannot be written: create its directory, check its permissions and "
        "the free space, or write elsewhere"
    ),
    "checkpoint_io_failed": (
        "a checkpoint could not be saved or loaded: check the storage it goes to (free space, "
        "quota, the mount's health, permissions) and, for a load, that the checkpoint is whole; "
        "then resume from the last good one"
    ),
    "dataloader_worker_killed": (
        "DataLoader workers are being killed (host memory): use fewer workers or less memory "
        "per worker"
    ),
    "nccl_network_config": (
        "NCCL cannot use the network it is told to: fix NCCL_SOCKET_IFNAME / NCCL_IB_HCA or the "
        "interfaces on every node"
    ),
    "storage_write_failed": (
        "writes to the storage fail the same way on every retry: check the mount, its "
        "locking (HDF5_USE_FILE_LOCKING=FALSE where the filesystem has none) and its endpoint"
    ),
    "pod_evicted": (
        "Kubernetes evicts the pod for using more memory or local storage than it asked for: "
        "set the pod's requests and limits to what the job uses"
    ),
    "nccl_shm_setup_failed": (
        "NCCL cannot create its shared-memory segments: give the container a larger /dev/shm "
        "(--shm-size, --ipc=host) or set NCCL_SHM_DISABLE=1"
    ),
    "host_memory_exhausted": (
        "the host's memory was nearly full when the processes were killed: lower what each "
        "host holds (CPU offload, data loader workers, processes per node) or ask for more"
    ),
    "memory_monitor_kill": (
        "a memory monitor killed the job's processes for the host's memory: lower what each "
        "host holds (workers or actors per node, buffers, CPU offload) or ask for more memory"
    ),
    "collective_timeout_in_checkpoint_save": (
        "the other ranks time out waiting while a checkpoint is saved: raise the collective "
        "timeout (timeout= of init_process_group) above the save's time, or save faster "
        "(sharded or asynchronous checkpoints, faster storage)"
    ),
    "checkpoint_save_failed": (
        "the distributed checkpoint's save failed on its ranks: fix the save (its path, the "
        "checkpointing code or its settings) before training again, or the next save fails too"
    ),
    "collective_desync": (
        "the ranks issued different collectives (one took another code path: a logging or "
        "evaluation hook, a data-dependent branch): make every rank run the same collectives"
    ),
    "container_start_failed": (
        "the job's container cannot start: fix its image or entrypoint, or the container "
        "runtime's configuration (its runtime and cache directories)"
    ),
    "container_import_failed": (
        "the container runtime cannot import the job's image: read the lines of its log the "
        "excerpt prints, and fix the image or the runtime's configuration"
    ),
    "accelerator_call_refused": (
        "a GPU library refused the job's call or could not be loaded: change the setting it "
        "refuses (batch size, data layout, algorithm) or repair the environment's libraries"
    ),
    "cluster_config_invalid": (
        "the job's cluster description (ranktable) is invalid: fix its addresses and ranks"
    ),
    "launch_directory_missing": (
        "the job's working directory is not mounted on the compute nodes: start the job from "
        "a file system they mount (scratch), or cd there in the script"
    ),
    "cuda_arch_mismatch": (
        "the CUDA/NCCL build has no kernels for this GPU's architecture: use a build (image, "
        "wheel) compiled for it"
    ),
    "invalid_device_ordinal": (
        "the job asks for a GPU the node does not expose: match the device ids and processes "
        "per node to the GPUs CUDA_VISIBLE_DEVICES leaves"
    ),
    "job_submission_refused": (
        "the scheduler refuses the job as written: correct the submission's options "
        "(a dependency, the account, partition or request)"
    ),
    "checkpoint_archive_broken": (
        "the checkpoint file is truncated or corrupt: resume from the last whole checkpoint, "
        "and check the storage it was written to"
    ),
    "fabric_manager_mismatch": (
        "the fabric manager and the GPU driver differ in version in the node image: install "
        "matching packages on every node built from it"
    ),
    "ib_setup_refused": (
        "the InfiniBand/RoCE set-up was refused: check the GID index (NCCL_IB_GID_INDEX), "
        "NCCL_IB_HCA, the HCA and driver versions on every node, and the container's access to "
        "the devices (locked memory, /dev/infiniband)"
    ),
    "ib_access_error": (
        "RDMA hit a protection or access error: check GPUDirect RDMA (nvidia-peermem), ACS and "
        "the IOMMU on the nodes, and any NCCL net plugin or library that changed"
    ),
    "ofi_provider_setup_failed": (
        "the libfabric provider (EFA) cannot set up NCCL's resources: check the EFA driver and "
        "aws-ofi-nccl versions, the instance's EFA-enabled security group and FI_* settings"
    ),
    "duplicate_gpu_per_rank": (
        "two ranks were started on the same GPU: set each process's device from its local "
        "rank (torch.cuda.set_device(LOCAL_RANK)), leave CUDA_VISIBLE_DEVICES to the launcher, "
        "and start no more processes per node than it has GPUs"
    ),
    "collective_usage_refused": (
        "the collective library refuses how the program calls it: change the calls it does "
        "not support (several sends to one peer in one group: batched point-to-point off, "
        "such as the pipeline's disable_batch_p2p_comm) or update the library"
    ),
    "nccl_collective_mismatch": (
        "the ranks disagree on a collective's size: make every node run the same code, "
        "configuration and NCCL version (and the same NCCL_* environment)"
    ),
    "startup:interconnect_network": (
        "no rank got past setting up the job's network: check that MASTER_ADDR and MASTER_PORT "
        "are reachable from every node and free, the rendezvous settings (nodes, run id), "
        "NCCL_SOCKET_IFNAME / NCCL_IB_HCA / NCCL_IB_GID_INDEX, and the firewall between nodes"
    ),
    "duplicate_rank_at_init": (
        "two processes took the same global rank: give each node its own NODE_RANK (or "
        "SLURM_NODEID) and the same world size and master on every node"
    ),
    "startup:nccl_timeout_hang": (
        "the ranks never met in their first collectives: one of them was still busy (tokenizing "
        "or preprocessing the data, loading a model) past the collective timeout; prepare the "
        "data before launch or on every rank, or raise the timeout (timeout= of "
        "init_process_group)"
    ),
    "startup:node_or_process_failure": (
        "the job dies before its first step, while launching or loading: a process killed "
        "while loading the model or checkpoint shards needs more host memory (--mem) or a "
        "lighter load (fewer shards in memory at once, low_cpu_mem_usage)"
    ),
}
GENERIC_FIX = "a retry would fail the same way: fix the cause, then resubmit"


def decide(policy: Policy, incident: Incident, history: History, comment: str = "") -> Decision:
    """The decision for one interruption: the rule table's action, bounded by the limits, with
    the nodes to exclude and drain (within the circuit breaker)."""
    limits = _job_limits(policy.limits_for(incident.partition), job_options(comment))
    if not limits.enabled:
        return Decision(Action.NONE, reasons=("recovery is disabled for this job or partition",))
    if incident.kind == "none":
        return Decision(Action.NONE, reasons=("nothing failed: the event was recorded only",))
    action, rule = rule_for(
        policy.rules_for(incident.partition),
        incident.signature,
        incident.node_local,
        incident.category,
        _phase_that_decides(incident, history),
    )
    if action is Action.STOP:
        return _stop(incident, rule)
    if action is Action.NONE:
        return Decision(Action.NONE, reasons=(_none_reason(incident, rule),), rule=rule)
    bound = _bound_reason(incident, history, limits)
    if bound:
        return Decision(Action.STOP, reasons=(bound,), rule="limits", fix=_bound_fix(incident))
    if action is Action.RESTART_EXCLUDING_NODE and _first_on_its_hosts(incident, history):
        return _restart(incident, history, rule, (_recurrence_note(incident),))
    if action is Action.RESTART_EXCLUDING_NODE:
        return _exclude(policy, incident, history, rule)
    return _restart(incident, history, rule)


def _phase_that_decides(incident: Incident, history: History) -> str:
    """The phase a rule may be qualified by. The scheduler's endings (a time limit, a
    preemption) mean the same in any phase; and a start-up failure of a workload whose earlier
    attempt trained shows that its set-up works, so it is no configuration error."""
    if incident.attribution == "scheduler":
        return ""
    if incident.phase == "startup" and any(step for _, step in history.root_causes):
        return ""
    return incident.phase


# Errors a faulty GPU raises, but so do driver hiccups and some application bugs: the first one
# on a host restarts the job; the same error again on that host (in an earlier attempt of the
# workload, or a strike from another workload) takes the host out. One after which the GPU
# cannot be used at all is read as ``gpu_left_unusable`` (``detection.core.shape``): out at once.
RECURRING_ON_A_HOST = frozenset({"gpu_cuda_unknown_error", "cuda_launch_failure"})


def _first_on_its_hosts(incident: Incident, history: History) -> bool:
    if incident.signature not in RECURRING_ON_A_HOST:
        return False
    if not incident.hosts:
        return True
    earlier = {
        host
        for cause, _ in history.root_causes
        if cause.partition(":")[0] in RECURRING_ON_A_HOST
        for host in cause.partition(":")[2].split(",")
    }
    struck = {host for host, count in history.strikes.items() if count > 0}
    return not (set(incident.hosts) & (earlier | struck))


def _recurrence_note(incident: Incident) -> str:
    where = f"on {', '.join(incident.hosts)}" if incident.hosts else "with no host named"
    return (
        f"recurrence: the first such error {where}; the same error again on that host takes it "
        "out of the job"
    )


def _stop(incident: Incident, rule: str) -> Decision:
    fix = FIXES.get(rule) or FIXES.get(incident.category) or GENERIC_FIX
    if incident.detail:
        fix = f"{fix} ({incident.detail})"
    what = category_words(incident.category)
    reason = f"a {what} ({_rule_words(rule)}) repeats on a retry: stop; to fix: {fix}"
    return Decision(Action.STOP, reasons=(reason,), rule=rule, fix=fix)


def _none_reason(incident: Incident, rule: str) -> str:
    if incident.kind == "straggler" and incident.hosts:
        return f"a slowdown on {', '.join(incident.hosts)} ({_rule_words(rule)}): reported only"
    if incident.kind == "straggler":
        return "a slowdown with no node to blame: reported only"
    if rule == "slurm_cancelled":
        return "the job was cancelled by a person, not by a failure: nothing to do"
    return f"nothing to recover from ({_rule_words(rule)}): no action"


def _exclude(policy: Policy, incident: Incident, history: History, rule: str) -> Decision:
    isolated = isolate(policy.isolation_rules, incident, history)
    new = [h for h in isolated.exclude if h not in history.excluded]
    if new:
        reason = f"node-local evidence implicates {', '.join(new)}: restart without it"
        return Decision(
            Action.RESTART_EXCLUDING_NODE,
            isolated.exclude,
            isolated.drain,
            (reason, *isolated.reasons),
            rule=rule,
        )
    if not incident.hosts:
        # The evidence is node-local but says nothing of which node: the advice still says so,
        # so a person (or an origin the loop knows) can name it.
        reason = (
            "node-local evidence, but the log does not say which node: restart without the node "
            "that logged it"
        )
        return Decision(
            Action.RESTART_EXCLUDING_NODE,
            isolated.exclude,
            (),
            (reason, *isolated.reasons),
            rule=rule,
        )
    # The hosts are named but may not be isolated (only suspected, or the breaker refused).
    if incident.kind == "straggler":
        # A slow job still runs: restarting it on the same nodes would gain nothing.
        kept = (
            f"a slowdown on {', '.join(incident.hosts)}, which cannot be taken out: reported only"
        )
        return Decision(Action.NONE, reasons=(kept, *isolated.reasons), rule=rule)
    return _restart(incident, history, rule, isolated.reasons)


def _restart(
    incident: Incident, history: History, rule: str, notes: Sequence[str] = ()
) -> Decision:
    reasons = [_restart_reason(incident, rule), *notes]
    if history.excluded:
        # Nodes earlier advice took out stay out: they are still suspect.
        reasons.append(f"{', '.join(history.excluded)} stay excluded, as earlier advice said")
        action = Action.RESTART_EXCLUDING_NODE
    else:
        action = Action.RESTART
    return Decision(action, tuple(sorted(history.excluded)), (), tuple(reasons), rule=rule)


def _restart_reason(incident: Incident, rule: str) -> str:
    if incident.signature in RECURRING_ON_A_HOST:
        return (
            "a CUDA error that a faulty GPU raises, but so does a passing driver or application "
            "fault: restart"
        )
    if incident.kind == "hang":
        return "the job stopped making progress: restart it from its last checkpoint"
    if rule == NODE_LOCAL and incident.hosts:
        hosts = ", ".join(incident.hosts)
        return f"node-local evidence implicates {hosts}, but it cannot be taken out: restart"
    if rule == NODE_LOCAL:
        return "node-local evidence, but the node cannot be taken out: restart"
    return f"a transient {category_words(incident.category)} ({_rule_words(rule)}): restart"


def _rule_words(rule: str) -> str:
    if rule == NODE_LOCAL:
        return "rule node_local"
    if rule == "default":
        return "no rule matched"
    return f"rule {rule}"


def job_options(comment: str) -> dict[str, Any]:
    """The ``recovery`` key of a job's Slurm comment (JSON): ``false`` opts out, an object may
    carry ``enabled`` and the job's own ``max_restarts_per_workload``/``..._per_root_cause``."""
    try:
        document = json.loads(comment) if comment.strip().startswith("{") else {}
    except (ValueError, RecursionError):
        return {}
    value = document.get("recovery") if isinstance(document, dict) else None
    if value is False:
        return {"enabled": False}
    return value if isinstance(value, dict) else {}


def _job_limits(limits: Limits, options: Mapping[str, Any]) -> Limits:
    """A job may opt out or lower its limits; it can never raise them above the cluster's."""
    enabled = limits.enabled and options.get("enabled", True) is not False
    restarts, retries = limits.max_restarts_per_workload, limits.max_retries_per_root_cause
    if _count(options.get("max_restarts_per_workload")) is not None:
        restarts = min(restarts, int(options["max_restarts_per_workload"]))
    if _count(options.get("max_retries_per_root_cause")) is not None:
        retries = min(retries, int(options["max_retries_per_root_cause"]))
    return replace(
        limits,
        enabled=enabled,
        max_restarts_per_workload=restarts,
        max_retries_per_root_cause=retries,
    )


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _bound_reason(incident: Incident, history: History, limits: Limits) -> str:
    if history.restarts >= limits.max_restarts_per_workload:
        return (
            f"the workload was restarted {history.restarts} times without getting further "
            f"(limit {limits.max_restarts_per_workload})"
        )
    retries = retries_without_progress(history.root_causes, incident.root_cause, incident.step)
    if retries >= limits.max_retries_per_root_cause:
        return (
            f"{retries} restarts after '{incident.root_cause}' made no progress "
            f"(limit {limits.max_retries_per_root_cause})"
        )
    return ""


def _bound_fix(incident: Incident) -> str:
    if incident.node_local and incident.hosts:
        # The job is not what failed: the node is, and it could not be taken out.
        hosts = ", ".join(incident.hosts)
        return (
            f"the failures come from {hosts}, which stayed in service (the circuit breaker, or "
            "a suspicion too weak to act on): repair or drain it, then resubmit"
        )
    return (
        f"look into the repeated {category_words(incident.category)} before resubmitting: "
        "restarts did not get the workload further"
    )


def retries_without_progress(
    past: Sequence[tuple[str, int | None]], root_cause: str, step: int | None
) -> int:
    """How many times in a row, counting back from now, the workload failed for this same root
    cause without getting further; any progress (a later step) resets the count."""
    count, reached = 0, step
    for cause, past_step in reversed(past):
        if cause != root_cause:
            break
        progressed = reached is not None and past_step is not None and reached > past_step
        if progressed:
            break
        count, reached = count + 1, past_step
    return count
