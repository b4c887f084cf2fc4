"""The shape of a failure's evidence, read from the lines themselves.

**Phase**: when in a job's life a failure came: before its first training step (start-up: launch,
rendezvous, communicator set-up, loading the model or a checkpoint) or after training had made
progress. The same failure means different things in each: a store that no client reaches at
start-up is a configuration a restart repeats; the same store lost after hours of training is
an outage a restart rides out. A progress line (``progress``) before the failure says training
ran; a start-up step named in the lines, with no progress before the failure, says it never did.

**Checkpoint I/O**: a storage failure while a checkpoint is saved or loaded. A retry saves to
(or loads from) the same storage and fails the same way, wherever it runs.

**A GPU left unusable**: a fault that may pass (a launch failure, an unknown error), after which
the GPU cannot be opened or reached at all: it did not recover, so its node is at fault now.

Pure Python on RE2.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Sequence
from enum import StrEnum

from detection.core.interruption import Interruption
from detection.core.progress import parse_progress
from detection.core.signatures.model import compile_re
from fleet.core.taxonomy import Attribution, Category, Kind

CHECKPOINT_IO_FAILED = "checkpoint_io_failed"


class Phase(StrEnum):
    STARTUP = "startup"
    TRAINING = "training"
    UNKNOWN = ""


# What only start-up does: launching and joining the job, building communicators, loading the
# model, its weights or a checkpoint to resume from. Python frames name these functions too.
_STARTUP = compile_re(
    r"(?i)(init_process_group|rendezvous|_?store[ _]based[ _]barrier|TCPStore\(|"
    r"DistStoreError|c10d.{0,40}(?:store|socket)|MASTER_ADDR|MASTER_PORT|"
    r"ncclCommInitRank|NCCL INFO Bootstrap|bootstrap.{0,20}(?:connect|init)|"
    r"INFO comm 0x[0-9a-fA-F]+ rank \d+ n[Rr]anks \d+|Init COMPLETE|bootstrap\.cc?u?:\d|"
    # Gloo's and JAX's process-group set-up.
    r"connectFullMesh|jax\.distributed\.initialize|PjRT_Client_Connect|"
    # Paddle's, Horovod's, DeepSpeed's and Ascend HCCL's set-up of the group and its links.
    r"init_parallel_env|hvd\.init\(|init_distributed|HcclCommInit|LinkEstablish|"
    # A task registering with JAX's (TensorFlow's) coordination service joins the job, and the
    # service's barrier that waits for every task to register is start-up's.
    r"CoordinationService/RegisterTask|Wait_for_all_tasks_to_register|"
    r"cluster registration failed|"
    # The first collective of a process group (sequence number 1), or a timeout report that no
    # collective ever completed: its ranks never met once, so no step can have run on it.
    r"WorkNCCL\(SeqNum=1,|last completed NCCL work: (?:-1|0)\b|"
    r"initializing (?:ddp|distributed): GLOBAL_RANK|"
    r"Bootstrap : Using|initialize_model_parallel|deepspeed\.initialize|"
    r"Loading checkpoint shards|load_checkpoint|load_state_dict|from_pretrained|"
    r"resume_from_checkpoint|torch\.load|safe_open|Address already in use|EADDRINUSE|"
    r"trying to connect to|failed to connect to|waiting for master|"
    r"no socket interface found|ncclSocketInit|NET/IB : No device found|"
    # Resuming loads the last checkpoint before any step; model-parallel groups and building
    # the model come before it too.
    r"resum(?:e|ing)(?: training)? from|initializing (?:model|pipeline|tensor) parallel|"
    r"initializing (?:ddp|pipeline) with size|\binit_model\b|_build_model|"
    # Preparing the data set (tokenizing, mapping) before the first step.
    r"running tokenizer on|tokeni[sz]ing (?:the )?(?:train|eval|valid|data)|"
    r"Map \(num_proc=|pre-?process(?:ing)? (?:the )?(?:train|data)|main_process_first)"
)


def is_startup_line(text: str) -> bool:
    # Tearing the rendezvous or a communicator down ends a job, and keep-alive heartbeats are
    # sent once it has joined: none says the job is still starting. XLA's tagged rendezvous is
    # a barrier any step may meet (a save, the end of an epoch).
    return (
        _STARTUP.search(text) is not None
        and "shutdown" not in text
        and "keep-alive" not in text
        and "wait timeout after" not in text
        and "Failed to meet rendezvous '" not in text
        and _TEARDOWN.search(text) is None
    )


# A communicator aborted or destroyed ends a job, though its line names the rank as the
# set-up line does.
_TEARDOWN = compile_re(r"(?:Abort|Destroy) COMPLETE|ncclCommAbort|ncclCommDestroy")


def phase_of(lines: Sequence[str], failed_at: int | None) -> Phase:
    """The phase of a failure whose first evidence is line ``failed_at`` (1-based; None: not
    known, judged on every line)."""
    end = len(lines) if failed_at is None else max(0, failed_at - 1)
    starting = False
    for number, line in enumerate(lines, start=1):
        if is_startup_line(line):
            starting = True
        elif number <= end and _trained(line):
            return Phase.TRAINING
    return Phase.STARTUP if starting else Phase.UNKNOWN


def _trained(line: str) -> bool:
    found = parse_progress(line)
    return found is not None and (found.step is None or found.step > 0)


# What saving or loading a checkpoint prints, or names in its frames. Activation (gradient)
# checkpointing is another thing altogether: its lines do not count.
_CHECKPOINT_IO = compile_re(
    r"(?i)(torch\.save|torch\.load|save_checkpoint|load_checkpoint|save_pretrained|"
    r"save_model|save_state|load_state|PytorchStreamWriter|PytorchStreamReader|"
    r"dist_checkpointing|\bcheckpoints?\b|checkpoint_|checkpoint-|orbax|tensorstore|"
    r"safetensors|pytorch_model|\.ckpt|\.pth?\b|\.h5\b|savez)"
)


# A checkpoint's save or load shows within the failure's own traceback or the lines around it;
# one saved an hour earlier says nothing of what failed now.
CHECKPOINT_BEFORE, CHECKPOINT_AFTER = 40, 10

_ACTIVATION_CHECKPOINTING = compile_re(r"(?i)(?:activation|gradient|grad)[ _-]checkpointing")


def checkpoint_line(lines: Sequence[str], failed_at: int | None) -> int | None:
    """The first line (1-based) near the failure at line ``failed_at`` (None: anywhere) that
    shows a checkpoint being saved or loaded, if any."""
    first = 1 if failed_at is None else max(1, failed_at - CHECKPOINT_BEFORE)
    last = len(lines) if failed_at is None else min(len(lines), failed_at + CHECKPOINT_AFTER)
    for number in range(first, last + 1):
        line = lines[number - 1]
        if (
            _ACTIVATION_CHECKPOINTING.search(line) is None
            and _CHECKPOINT_IO.search(line) is not None
        ):
            return number
    return None


# A finite gradient norm, as the lines that report a NaN one print it.
_FINITE_GRAD_NORM = compile_re(r"(?i)grad[ _]norm['\"]?\s*[:=]\s*['\"]?[-+]?\d")
_BARRIER_COMPLETED = compile_re(r"Completed store-based barrier for key")
# A connection a transport reports made after its retries.
_CONNECTED_AFTER_RETRIES = compile_re(
    r"(?i)\bconnected after \d+ (?:retries|attempts)|connection established after \d+"
)
# Failure signatures a later line shows the job got past: that line's pattern, why it is
# benign then (from the last failing line and the one that got past it), and a summary.
_GOT_PAST = {
    # A NaN gradient norm reported finite again is a skipped step, not a divergence.
    "grad_norm_nan": (
        _FINITE_GRAD_NORM,
        "The gradient norm was NaN or Inf up to line {bad} and finite again at line {back}: "
        "fp16 loss scaling skipped those steps, and training went on.",
        "a NaN gradient norm that recovered",
    ),
    # A store-based barrier that waited, then completed, had slow ranks, not missing ones.
    "store_barrier_waiting": (
        _BARRIER_COMPLETED,
        "The store-based barrier waited for ranks up to line {bad} and completed at line "
        "{back}: some ranks were slow to start, and all joined.",
        "a start-up barrier that completed",
    ),
    # Connection retries that end in a connection are how a slow peer's listener is met.
    "connect_retrying": (
        _CONNECTED_AFTER_RETRIES,
        "A connection was retried up to line {bad} and made at line {back}: the retries "
        "were recovered.",
        "connection retries that connected",
    ),
}


def read_shape(interruption: Interruption, lines: Sequence[str]) -> Interruption:
    """A failure's interruption with what the shape of its lines adds: its phase, a NaN that
    recovered, a storage failure that is a checkpoint's, a GPU fault that left the GPU dead."""
    if not interruption.is_failure:
        return interruption
    failed_at = min((e.line for e in interruption.evidence if e.line is not None), default=None)
    interruption = dataclasses.replace(interruption, phase=phase_of(lines, failed_at).value)
    interruption = _unless_got_past(interruption, lines)
    interruption = _as_checkpoint_wait(interruption, lines, failed_at)
    interruption = _as_collective_desync(interruption, lines)
    interruption = _as_gpu_left_unusable(interruption)
    return _as_host_memory(_as_checkpoint_io(interruption, lines, failed_at), lines, failed_at)


def _unless_got_past(interruption: Interruption, lines: Sequence[str]) -> Interruption:
    """Benign when a later line shows the job got past what its failure signature reported."""
    got_past = _GOT_PAST.get(interruption.signature)
    last_bad = max((e.line for e in interruption.evidence if e.line is not None), default=None)
    if got_past is None or last_bad is None:
        return interruption
    pattern, why, summary = got_past
    back = next(
        (
            number
            for number in range(last_bad + 1, len(lines) + 1)
            if pattern.search(lines[number - 1]) is not None
        ),
        None,
    )
    if back is None:
        return interruption
    return dataclasses.replace(
        interruption,
        kind=Kind.NONE,
        category=Category.BENIGN,
        attribution=Attribution.NONE,
        explanation=why.format(bad=last_bad, back=back),
        summary=summary,
    )


def _as_checkpoint_io(
    interruption: Interruption, lines: Sequence[str], failed_at: int | None
) -> Interruption:
    """A storage failure while a checkpoint is saved or loaded decides as its own family
    (``checkpoint_io_failed``), unless it names a node-local device: a retry meets the same
    storage. The evidence keeps each line's own signature."""
    if interruption.category is not Category.FILESYSTEM_IO or interruption.node_local:
        return interruption
    at = checkpoint_line(lines, failed_at)
    if at is None:
        return interruption
    note = f" The failing I/O is a checkpoint's save or load (line {at})."
    cause = interruption.root_cause
    return dataclasses.replace(
        interruption,
        signature=CHECKPOINT_IO_FAILED,
        root_cause=cause.replace(interruption.signature, CHECKPOINT_IO_FAILED, 1)
        if interruption.signature
        else CHECKPOINT_IO_FAILED,
        explanation=interruption.explanation.rstrip() + note,
    )


COLLECTIVE_TIMEOUT_IN_SAVE = "collective_timeout_in_checkpoint_save"
# Saving a checkpoint, as frames and trainers' own lines name it (not loading one).
_CHECKPOINT_SAVE = compile_re(
    r"(?i)(torch\.save|save_checkpoint|save_pretrained|save_model|save_state|"
    r"saving (?:the )?(?:model )?checkpoint|checkpoint save|PytorchStreamWriter|"
    r"dist_checkpointing\.save|orbax[^\n]*save)"
)


def _as_checkpoint_wait(
    interruption: Interruption, lines: Sequence[str], failed_at: int | None
) -> Interruption:
    """Collectives that time out while a checkpoint is being saved: the other ranks wait in a
    barrier while one gathers and writes it, for longer than the timeout. Every retry reaches
    the same save and waits as long: the timeout or the save must change."""
    if interruption.category is not Category.NCCL_TIMEOUT_HANG or interruption.node_local:
        return interruption
    end = len(lines) if failed_at is None else failed_at
    first = 1 if failed_at is None else max(1, failed_at - CHECKPOINT_BEFORE)
    at = next(
        (n for n in range(first, end + 1) if _CHECKPOINT_SAVE.search(lines[n - 1]) is not None),
        None,
    )
    if at is None:
        return interruption
    return dataclasses.replace(
        interruption,
        signature=COLLECTIVE_TIMEOUT_IN_SAVE,
        attribution=Attribution.APPLICATION,
        root_cause=COLLECTIVE_TIMEOUT_IN_SAVE,
        explanation=interruption.explanation.rstrip()
        + f" The ranks were waiting while a checkpoint was saved (line {at}).",
    )


COLLECTIVE_DESYNC = "collective_desync"
# A watchdog's report of one rank's timed-out collective: its rank, sequence number and kind.
_RANK_WORK = compile_re(
    r"\[Rank (?P<rank>\d+)\][^\n]*WorkNCCL\(SeqNum=(?P<seq>\d+), OpType=(?P<op>\w+)"
)
# Sequence numbers this close apart on one kind of collective are one process group's.
_DESYNC_SPAN = 16


def _as_collective_desync(interruption: Interruption, lines: Sequence[str]) -> Interruption:
    """Ranks that time out on the same kind of collective at different sequence numbers issued
    different numbers of collectives: the code took different paths on them (a desync), and a
    retry takes the same paths. Far-apart numbers are other process groups' and say nothing."""
    if interruption.category is not Category.NCCL_TIMEOUT_HANG or interruption.node_local:
        return interruption
    if interruption.hosts:
        return interruption
    seen: dict[tuple[str, str], int] = {}
    for line in lines:
        match = _RANK_WORK.search(line)
        if match is not None:
            seen.setdefault((match["op"], match["rank"]), int(match["seq"]))
    by_op: dict[str, list[int]] = {}
    for (op, _), seq in seen.items():
        by_op.setdefault(op, []).append(seq)
    if not any(_desynced(seqs) for seqs in by_op.values()):
        return interruption
    return dataclasses.replace(
        interruption,
        signature=COLLECTIVE_DESYNC,
        attribution=Attribution.APPLICATION,
        root_cause=COLLECTIVE_DESYNC,
        explanation=interruption.explanation.rstrip()
        + " The ranks timed out on the same collective at different sequence numbers: they "
        "issued different collectives.",
    )


def _desynced(seqs: list[int]) -> bool:
    """Nearby but different sequence numbers, with no one rank behind ranks that agree: one
    rank left behind by the rest is stuck itself (its node is the suspect), not desynced."""
    counts = Counter(seqs)
    if len(counts) < 2 or max(counts) - min(counts) > _DESYNC_SPAN:
        return False
    return not (len(counts) == 2 and min(counts.values()) == 1 < max(counts.values()))


HOST_MEMORY_EXHAUSTED = "host_memory_exhausted"
# Processes killed without a word of why (SIGKILL, a launcher ending its workers).
_KILLED = frozenset(
    {
        "process_sigkill",
        "launcher_killing_children",
        "torchelastic_child_failed",
        "srun_task_failed",
    }
)
# The job's own report of the host's memory (DeepSpeed's see_memory_usage, a trainer's
# resource line): the share of it in use.
_HOST_MEMORY = compile_re(
    r"(?i)(?:CPU|host|system)[ _](?:virtual )?(?:memory|RAM)\b[^\n]*?"
    r"(?:percent|used|usage)\s*[=:]?\s*(?P<pct>\d{1,3}(?:\.\d+)?)\s*%"
)
# Memory this full when the kill came: the kernel's OOM killer, though its line is elsewhere.
HOST_MEMORY_FULL_PERCENT = 80.0
HOST_MEMORY_BEFORE = 20


def host_memory_before(lines: Sequence[str], failed_at: int | None) -> float | None:
    """The last share of host memory in use (percent) the job reported in the lines just
    before line ``failed_at`` (None: anywhere), if any."""
    end = len(lines) if failed_at is None else failed_at - 1
    for number in range(end, max(0, end - HOST_MEMORY_BEFORE), -1):
        found = _HOST_MEMORY.search(lines[number - 1])
        if found is not None:
            return float(found["pct"])
    return None


def _as_host_memory(
    interruption: Interruption, lines: Sequence[str], failed_at: int | None
) -> Interruption:
    """Processes killed with no cause shown, just after the job reported the host's memory
    nearly full, were killed for memory: the job's own footprint, which a retry repeats."""
    if interruption.signature not in _KILLED or interruption.node_local:
        return interruption
    used = host_memory_before(lines, failed_at)
    if used is None or used < HOST_MEMORY_FULL_PERCENT:
        return interruption
    note = f" The job reported {used:g}% of the host's memory in use just before."
    return dataclasses.replace(
        interruption,
        signature=HOST_MEMORY_EXHAUSTED,
        attribution=Attribution.APPLICATION,
        root_cause=HOST_MEMORY_EXHAUSTED,
        explanation=interruption.explanation.rstrip() + note,
    )


GPU_LEFT_UNUSABLE = "gpu_left_unusable"
# Errors a passing fault raises too: the first one on a host restarts the job (``decisions``).
_PASSING_GPU_FAULTS = frozenset({"gpu_cuda_unknown_error", "cuda_launch_failure"})
# What a GPU that did not come back says: it cannot be opened, reached or used until a reset.
_GPU_UNUSABLE = frozenset(
    {"gpu_unavailable", "gpu_handle_lost", "gpu_reset_required", "gpu_fallen_off_bus"}
)


def _as_gpu_left_unusable(interruption: Interruption) -> Interruption:
    """A GPU fault that might pass, after which the GPU cannot be used at all: it did not
    recover, and a restart on its node meets the same dead GPU."""
    if interruption.signature not in _PASSING_GPU_FAULTS:
        return interruption
    fault_at = interruption.evidence[0].line if interruption.evidence else None
    after = next(
        (
            e
            for e in interruption.evidence
            if e.signature in _GPU_UNUSABLE
            and (e.line is None or fault_at is None or e.line > fault_at)
        ),
        None,
    )
    if after is None:
        return interruption
    where = f" (line {after.line})" if after.line is not None else ""
    return dataclasses.replace(
        interruption,
        signature=GPU_LEFT_UNUSABLE,
        root_cause=interruption.root_cause.replace(interruption.signature, GPU_LEFT_UNUSABLE, 1),
        explanation=interruption.explanation.rstrip()
        + f" The GPU could not be used after it{where}: it did not recover.",
    )
