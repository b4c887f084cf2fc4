"""Log formats of failures: tracebacks, CUDA and NCCL errors, launcher and Slurm messages, and the
kernel lines a node's system log gets. The wording is copied from PyTorch, NCCL, Slurm, the
NVIDIA driver and the Linux kernel, so detectors meet what they will meet on a real cluster.
"""

from __future__ import annotations

from datetime import datetime

from .textgen import SITE_PACKAGES, Voice, glog_agent, pci_bus

# (path, line number, function, source line) of one traceback frame.
Frame = tuple[str, int, str, str]

_MEGATRON = "/workspace/Megatron-LM"
_MDS = "/workspace/Megatron-DeepSpeed"
# Each framework's training loop from the script down to its step, with paths and line
# numbers as real tracebacks print them; a leaf below adds where the failure happened.
_FRAMES: dict[str, tuple[Frame, ...]] = {
    "megatron": (
        (f"{_MEGATRON}/pretrain_gpt.py", 284, "<module>", "pretrain("),
        (
            f"{_MEGATRON}/megatron/training/training.py",
            386,
            "pretrain",
            "iteration, num_floating_point_operations_so_far = train(",
        ),
        (
            f"{_MEGATRON}/megatron/training/training.py",
            1345,
            "train",
            "train_step(forward_step_func,",
        ),
        (
            f"{_MEGATRON}/megatron/training/training.py",
            753,
            "train_step",
            "losses_reduced = forward_backward_func(",
        ),
    ),
    "deepspeed": (
        (f"{_MDS}/pretrain_gpt.py", 352, "<module>", "pretrain("),
        (f"{_MDS}/megatron/training.py", 227, "pretrain", "iteration = train(forward_step_func,"),
        (f"{_MDS}/megatron/training.py", 1211, "train", "train_step(forward_step_func,"),
        (
            f"{SITE_PACKAGES}/deepspeed/runtime/engine.py",
            2046,
            "backward",
            "self.optimizer.backward(loss, retain_graph=retain_graph)",
        ),
    ),
    "hf": (
        ("/workspace/finetune/train.py", 187, "<module>", "main()"),
        (
            "/workspace/finetune/train.py",
            181,
            "main",
            "trainer.train(resume_from_checkpoint=resume)",
        ),
        (f"{SITE_PACKAGES}/transformers/trainer.py", 2123, "train", "return inner_training_loop("),
        (
            f"{SITE_PACKAGES}/transformers/trainer.py",
            2481,
            "_inner_training_loop",
            "tr_loss_step = self.training_step(model, inputs, num_items_in_batch)",
        ),
    ),
}
# Keyed by the ``leaf`` a scene names: the call that raised.
LEAVES: dict[str, tuple[Frame, ...]] = {
    "collective": (
        (
            f"{SITE_PACKAGES}/torch/distributed/c10d_logger.py",
            83,
            "wrapper",
            "return func(*args, **kwargs)",
        ),
        (
            f"{SITE_PACKAGES}/torch/distributed/distributed_c10d.py",
            2501,
            "all_reduce",
            "work = group.allreduce([tensor], opts)",
        ),
    ),
    "backward": (
        (
            f"{SITE_PACKAGES}/torch/autograd/graph.py",
            825,
            "_engine_run_backward",
            "return Variable._execution_engine.run_backward(  # Calls into the C++ engine to run "
            "the backward pass",
        ),
    ),
    "forward": (
        (
            f"{SITE_PACKAGES}/torch/nn/modules/linear.py",
            125,
            "forward",
            "return F.linear(input, self.weight, self.bias)",
        ),
    ),
    "save": (
        (
            f"{SITE_PACKAGES}/torch/distributed/checkpoint/filesystem.py",
            436,
            "write_data",
            "_write_files_from_queue(",
        ),
        (
            f"{SITE_PACKAGES}/torch/distributed/checkpoint/filesystem.py",
            307,
            "_write_item",
            "stream.write(data.getbuffer())",
        ),
    ),
    "read": (
        (
            f"{_MEGATRON}/megatron/core/datasets/indexed_dataset.py",
            367,
            "read",
            'self._bin_buffer_mmap = numpy.memmap(self._path, mode="r", order="C")',
        ),
    ),
    "config": (
        (
            "/workspace/common/model_config.py",
            58,
            "from_dict",
            'rope_scaling = config["rope_scaling"]',
        ),
    ),
    "import": (
        (
            "/workspace/common/attention.py",
            12,
            "<module>",
            "from flash_attn import flash_attn_func",
        ),
    ),
}
# PyTorch appends these to a CUDA error. Scenes add them only sometimes, so detectors
# cannot come to rely on them.
CUDA_HINT = (
    "CUDA kernel errors might be asynchronously reported at some other API call, so the "
    "stacktrace below might be incorrect.",
    "For debugging consider passing CUDA_LAUNCH_BLOCKING=1",
    "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.",
)
ELASTIC_DOCS = "https://pytorch.org/docs/stable/elastic/errors.html"
# The only signals the scenes deliver.
SIGNALS = {6: "SIGABRT", 9: "SIGKILL", 15: "SIGTERM"}


def traceback(framework: str, leaf: str, exception: list[str]) -> list[str]:
    """A Python traceback through the framework's training loop down to ``leaf``."""
    lines = ["Traceback (most recent call last):"]
    # An unknown leaf ends the traceback at the training step.
    for path, line, func, code in _FRAMES[framework] + LEAVES.get(leaf, ()):
        lines.append(f'  File "{path}", line {line}, in {func}')
        lines.append(f"    {code}")
    return lines + exception


def cuda_error(error: str, hint: bool) -> list[str]:
    return [error, *CUDA_HINT] if hint else [error]


def dist_backend_error(reason: str, nccl_version: str, last_error: str, code: str) -> list[str]:
    """The DistBackendError PyTorch raises when an NCCL call fails."""
    # PyTorch prints the bare version, without the CUDA build suffix.
    short = nccl_version.split("+")[0]
    return [
        "torch.distributed.DistBackendError: NCCL error in: /opt/pytorch/pytorch/torch/csrc/"
        f"distributed/c10d/ProcessGroupNCCL.cpp:3356, {reason}, NCCL version {short}",
        code,
        "Last error:",
        last_error,
    ]


def watchdog_timeout(
    voice: Voice, rank: int, d: datetime, seq: int, timeout_s: float, ran_ms: int
) -> list[str]:
    """What a rank prints when its NCCL watchdog gives up on a collective."""
    work = (
        f"WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, NumelIn=466119168, NumelOut=466119168, "
        f"Timeout(ms)={int(timeout_s * 1000)})"
    )
    caught = (
        f"[Rank {rank}] Watchdog caught collective operation timeout: {work} ran for "
        f"{ran_ms} milliseconds before timing out."
    )
    down = f"[Rank {rank}] To avoid data inconsistency, we are taking the entire process down."
    if not voice.torch_new:
        # PyTorch before 2.2: no timestamps, and a std::runtime_error with the message.
        return [
            voice.glog(rank, d, "ProcessGroupNCCL.cpp:475", caught),
            voice.glog(rank, d, "ProcessGroupNCCL.cpp:495", down),
            voice.err(rank, "terminate called after throwing an instance of 'std::runtime_error'"),
            voice.err(rank, f"  what():  {caught}"),
        ]
    detected = (
        f"[PG ID 0 PG GUID 0(default_pg) Rank {rank}] Exception (either an error or timeout) "
        f"detected by watchdog at work: {seq}, last enqueued NCCL work: {seq + 2}, last "
        f"completed NCCL work: {seq - 1}."
    )
    return [
        voice.glog(rank, d, "ProcessGroupNCCL.cpp:616", caught),
        voice.glog(rank, d, "ProcessGroupNCCL.cpp:1785", detected),
        voice.glog(rank, d, "ProcessGroupNCCL.cpp:636", down),
        voice.err(rank, "terminate called after throwing an instance of 'c10::DistBackendError'"),
    ]


def watchdog_cuda(voice: Voice, rank: int, d: datetime, error: str) -> str:
    """The watchdog line of the rank whose GPU failed under a running collective."""
    # The watchdog quotes the CUDA error without Python's exception name.
    return voice.glog(
        rank,
        d,
        "ProcessGroupNCCL.cpp:1595",
        f"[PG ID 0 PG GUID 0(default_pg) "
        f"Rank {rank}] Process group watchdog thread terminated with exception: "
        f"{error.removeprefix('RuntimeError: ')}",
    )


def ib_completion(
    voice: Voice, rank: int, peer_ip: str, status: int, vendor: int, op: str
) -> list[str]:
    """NCCL's IB transport reporting a failed work completion, then the error unwinding."""
    ip = voice.ips[rank // voice.gpn]
    # Ports and HCAs follow from the rank, so a rank always shows the same ones, with no draw.
    warn = (
        f"transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion from peer "
        f"{peer_ip}<{40000 + rank * 13 % 9000}> with status={status} opcode=0 len=0 vendor "
        f"err {vendor} ({op}) localGid ::ffff:{ip} remoteGids::ffff:{peer_ip} hca "
        f"mlx5_{rank % 8}"
    )
    return [
        voice.nccl(rank, warn),
        # Each level of NCCL passes the error up; 6 is ncclRemoteError.
        voice.nccl(rank, "NCCL INFO transport/net.cc:1302 -> 6"),
        voice.nccl(rank, "NCCL INFO proxy.cc:878 -> 6 [Progress Thread]"),
    ]


def socket_reset(voice: Voice, rank: int, peer_host: str, peer_ip: str) -> list[str]:
    port = 30000 + rank * 7 % 20000
    return [
        voice.nccl(
            rank,
            f"misc/socket.cc:50 NCCL WARN socketProgressOpt: Call to recv from "
            f"{peer_ip}<{port}> failed : Connection reset by peer",
        ),
        voice.nccl(
            rank,
            f"misc/socket.cc:538 NCCL WARN Net : Connection closed by remote peer "
            f"{peer_host}<{port}>",
        ),
    ]


def agent_failure(
    voice: Voice, pos: int, d: datetime, local: int, exitcode: int, others: list[int]
) -> list[str]:
    """A node's launcher reporting that one of its ranks died, and stopping the rest."""
    rank = pos * voice.gpn + local
    if voice.launcher == "pdsh":
        # DeepSpeed's launcher kills its children itself and reports through pdsh.
        return _deepspeed_failure(voice, pos, d, local, exitcode, others)
    pid = voice.pids[pos]
    api = "torch/distributed/elastic/multiprocessing/api.py"
    # torchrun stops the node's other ranks before it reports the one that failed.
    lines = [
        _elastic(
            voice,
            d,
            "W",
            pid,
            f"{api}:897",
            f"Sending process {voice.pid(r)} closing signal SIGTERM",
        )
        for r in others
    ]
    lines.append(
        _elastic(
            voice,
            d,
            "E",
            pid,
            f"{api}:869",
            f"failed (exitcode: {exitcode}) "
            f"local_rank: {local} (pid: {voice.pid(rank)}) of binary: "
            "/usr/bin/python3",
        )
    )
    return lines + child_failed(voice, pos, d, rank, exitcode)


def _elastic(voice: Voice, d: datetime, level: str, pid: int, where: str, text: str) -> str:
    if voice.torch_new:
        return glog_agent(d, level, pid, where, text)
    name = {"W": "WARNING", "E": "ERROR"}[level]
    return f"{name}:torch.distributed.elastic.multiprocessing.api:{text}"


def child_failed(voice: Voice, pos: int, d: datetime, rank: int, exitcode: int) -> list[str]:
    """torchrun's ChildFailedError report, root cause last."""
    pid = voice.pid(rank)
    # A negative exit code is the signal that killed the child, as torchrun reports it.
    signal = SIGNALS.get(-exitcode)
    # Without ``@record`` on the script's main torchrun has no traceback, only its docs link.
    cause = (
        f"Signal {-exitcode} ({signal}) received by PID {pid}"
        if signal
        else (f"To enable traceback see: {ELASTIC_DOCS}")
    )
    return [
        "Traceback (most recent call last):",
        '  File "/usr/local/bin/torchrun", line 8, in <module>',
        "    sys.exit(main())",
        f'  File "{SITE_PACKAGES}/torch/distributed/launcher/api.py", line 269, in launch_agent',
        "    raise ChildFailedError(",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
        "=" * 60,
        f"{voice.script} FAILED",
        "-" * 60,
        "Failures:",
        "  <NO_OTHER_FAILURES>",
        "-" * 60,
        "Root Cause (first observed failure):",
        "[0]:",
        f"  time      : {d:%Y-%m-%d_%H:%M:%S}",
        f"  host      : {voice.hosts[pos]}",
        f"  rank      : {rank} (local_rank: {rank % voice.gpn})",
        f"  exitcode  : {exitcode} (pid: {pid})",
        "  error_file: <N/A>",
        f"  traceback : {cause}",
        "=" * 60,
    ]


def _deepspeed_failure(
    voice: Voice, pos: int, d: datetime, local: int, exitcode: int, others: list[int]
) -> list[str]:
    stamp = f"[{d:%Y-%m-%d %H:%M:%S},{d.microsecond // 1000:03d}]"
    lines = [
        voice.agent(
            pos, f"{stamp} [INFO] [launch.py:316:sigkill_handler] Killing subprocess {voice.pid(r)}"
        )
        for r in others
    ]
    cmd = (
        f"['/usr/bin/python3', '-u', '{voice.script}', '--local_rank={local}', '--deepspeed', "
        "'--deepspeed_config', 'ds_config.json']"
    )
    lines.append(
        voice.agent(
            pos,
            f"{stamp} [ERROR] [launch.py:321:sigkill_handler] {cmd} exits "
            f"with return code = {exitcode}",
        )
    )
    # ssh reports a death by signal as 128 plus the signal number.
    lines.append(
        f"pdsh@{voice.hosts[0]}: {voice.hosts[pos]}: ssh exited with exit code "
        f"{exitcode if exitcode > 0 else 128 - exitcode}"
    )
    return lines


def agent_sigterm(voice: Voice, pos: int, d: datetime) -> list[str]:
    """A launcher that srun told to stop because another node's task failed."""
    # srun's own tasks and DeepSpeed's launcher log nothing on SIGTERM.
    if voice.launcher != "torchrun":
        return []
    pid = voice.pids[pos]
    where = "torch/distributed/elastic/agent/server/api.py:704"
    return [
        _elastic(
            voice,
            d,
            "W",
            pid,
            where,
            "Received Signals.SIGTERM death signal, shutting down workers",
        ),
        f"torch.distributed.elastic.multiprocessing.api.SignalException: Process {pid} got "
        "signal: 15",
    ]


def stepd(voice: Voice, text: str) -> str:
    """A slurmstepd message, with the host suffix newer Slurm versions print."""
    # The job's PyTorch stands in for the site's age: a site that runs a newer one
    # runs a newer Slurm too.
    who = f"slurmstepd-{voice.hosts[0]}" if voice.torch_new else "slurmstepd"
    return f"{who}: error: {text}"


def step_cancelled(voice: Voice, raw_id: int, d: datetime, due: str = "") -> list[str]:
    """slurmstepd's banners for a job whose step was stopped (``due``: ``TIME LIMIT`` ...)."""
    when = f"{d:%Y-%m-%dT%H:%M:%S}"
    tail = f" DUE TO {due}" if due else ""
    if due == "NODE FAILURE":
        tail += ", SEE SLURMCTLD LOG FOR DETAILS"
    return [
        stepd(voice, f"*** STEP {raw_id}.0 ON {voice.hosts[0]} CANCELLED AT {when}{tail} ***"),
        stepd(voice, f"*** JOB {raw_id} ON {voice.hosts[0]} CANCELLED AT {when}{tail} ***"),
    ]


def srun_task_exit(voice: Voice, rank: int, exitcode: int) -> str:
    """srun's report of the task that failed first (a node's torchrun, or a rank)."""
    # Under torchrun srun starts one task per node, so the task is the node's position.
    task = rank if voice.launcher == "srun" else rank // voice.gpn
    host = voice.host(rank)
    if exitcode < 0:
        what = {6: "Aborted (core dumped)", 9: "Killed"}.get(-exitcode, "Terminated")
        return f"srun: error: {host}: task {task}: {what}"
    return f"srun: error: {host}: task {task}: Exited with exit code {exitcode}"


def srun_abort(voice: Voice, skip_pos: int) -> list[str]:
    """srun tearing the step down after a failed task."""
    lines = ["srun: Job step aborted: Waiting up to 32 seconds for job step to finish."]
    for pos, host in enumerate(voice.hosts):
        # The failed node's task was reported already.
        if pos == skip_pos:
            continue
        if voice.launcher == "srun":
            first, last = pos * voice.gpn, (pos + 1) * voice.gpn - 1
            lines.append(f"srun: error: {host}: tasks {first}-{last}: Terminated")
        else:
            lines.append(f"srun: error: {host}: task {pos}: Terminated")
    return lines


def dmesg(uptime: float, text: str) -> str:
    """A kernel ring-buffer line with its ``[seconds.micros]`` uptime stamp."""
    whole = int(uptime)
    return f"[{whole:5d}.{int((uptime - whole) * 1e6):06d}] {text}"


def xid(gpu: int, code: int, pid: int | None, text: str) -> str:
    """The NVIDIA driver's Xid report."""
    # With no process to name the driver prints placeholders, quotes and all.
    who = f"pid={pid}, name=python3" if pid else "pid='<unknown>', name=<unknown>"
    return f"NVRM: Xid (PCI:{pci_bus(gpu)}): {code}, {who}, {text}"


def oom_killer(pid: int, rss_kb: int) -> list[str]:
    # Every size follows from the killed process's RSS, so the three lines agree.
    return [
        "python3 invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE|__GFP_COMP), "
        "order=0, oom_score_adj=0",
        f"Out of memory: Killed process {pid} (python3) total-vm:{rss_kb + 91234567}kB, "
        f"anon-rss:{rss_kb}kB, file-rss:65432kB, shmem-rss:8192kB, UID:1000 "
        f"pgtables:{rss_kb // 512}kB oom_score_adj:0",
        f"oom_reaper: reaped process {pid} (python3), now anon-rss:0kB, file-rss:0kB, "
        "shmem-rss:8192kB",
    ]


def machine_check(cpu: int) -> list[str]:
    return [
        f"mce: [Hardware Error]: CPU {cpu}: Machine Check Exception: 5 Bank 17: bea0000001000108",
        "mce: [Hardware Error]: RIP !INEXACT! 10:<ffffffff8e6b4f4e> {native_safe_halt+0xe/0x10}",
        "Kernel panic - not syncing: Fatal machine check",
    ]


def ib_port(gpu: int, state: str) -> str:
    """mlx5's port state change for the HCA next to ``gpu``."""
    # Each GPU's HCA sits on the PCI bus just after it, as on HGX boards.
    bus = pci_bus(gpu).split(":")[1]
    return f"mlx5_core 0000:{int(bus, 16) + 1:02x}:00.0 mlx5_{gpu}: Port: 1 Link {state}"
