"""Scripts of software, application, maintenance and unexplained faults.

Apart from a dead fabric manager, none of these is a node's fault: the root cause is in the
job's own output (or in a file system's kernel messages) and the ground truth names no host.
"""

from __future__ import annotations

from fleet.core.scheduler import JobState
from lab.simulator import failtext as ft

from .scenes import NCCL_VERSION, Scene, fast_teardown, peer_ranks, watchdog_teardown
from .state import Phase
from .textgen import deepspeed_step, ds_stamp, hf_logs, megatron_iteration

LUSTRE_LOST = (
    "LustreError: 11-0: {ost}-osc-ffff9a3c7e1f8000: operation ost_read to node 10.10.0.12@o2ib "
    "failed: rc = -107",
    "Lustre: {ost}-osc-ffff9a3c7e1f8000: Connection to {ost} (at 10.10.0.12@o2ib) was lost; in "
    "progress operations using this service will wait for recovery to complete",
)


def fs_crash(s: Scene) -> None:
    {"nospace": _no_space, "stale": _stale_handle}.get(s.entry.detail, _lustre_eio)(s)
    s.halt(Phase.FAILING)
    fast_teardown(s, 1.0)


def _no_space(s: Scene) -> None:
    """The checkpoint writer runs out of disk; rank 0 reports it."""
    v, w = s.voice, s.job.workload
    it = s.run.iteration_at(s.t0)
    saving = f"saving checkpoint at iteration {it:7d} to {w.ckpt_dir} in torch_dist format"
    s.say(0.0, [v.out(v.log_rank, saving)])
    # Rank 0 writes the checkpoint, so the teardown starts from it, whatever rank was drawn.
    s.rank, s.pos = 0, 0
    s.err(
        0.0, 0, ft.traceback(v.framework, "save", ["OSError: [Errno 28] No space left on device"])
    )


def _stale_handle(s: Scene) -> None:
    path = f"/nfs/datasets/{s.job.workload.name}/train_text_document.bin"
    error = f"OSError: [Errno 116] Stale file handle: '{path}'"
    s.err(0.0, s.rank, ft.traceback(s.voice.framework, "read", [error]))


def _lustre_eio(s: Scene) -> None:
    """The node's Lustre client loses an OST; a data-loader read on that node gets EIO."""
    ost = f"scratch-OST{s.rng.randrange(64):04x}"
    s.kernel(0.0, s.node, [line.format(ost=ost) for line in LUSTRE_LOST])
    path = f"/lustre/scratch/datasets/{s.job.workload.name}/train_text_document.bin"
    error = f"OSError: [Errno 5] Input/output error: '{path}'"
    s.err(0.5, s.rank, ft.traceback(s.voice.framework, "read", [error]))


def fs_hang(s: Scene) -> None:
    # The server is shared: every node of the job blocks on it, not only the one drawn.
    for pos, node in enumerate(s.run.nodes):
        s.kernel(0.0, node, ["nfs: server nfs01 not responding, still trying"])
        pid = s.voice.pid(pos * s.gpn)
        s.kernel(122.0, node, [f"INFO: task python3:{pid} blocked for more than 122 seconds."])
    s.halt(Phase.HUNG)
    # The drawn node's ranks are stuck in the read; the others wait in a collective and time out.
    watchdog_teardown(s, set(range(s.pos * s.gpn, (s.pos + 1) * s.gpn)))


def fabric_manager(s: Scene) -> None:
    # systemd's lines, not the kernel's: they carry no uptime stamp.
    s.syslog(
        0.0,
        s.node,
        [
            "systemd[1]: nvidia-fabricmanager.service: Main process exited, code=exited, "
            "status=1/FAILURE",
            "systemd[1]: nvidia-fabricmanager.service: Failed with result 'exit-code'.",
        ],
    )
    s.halt(Phase.FAILING)
    exc = ft.dist_backend_error(
        "unhandled cuda error (run with NCCL_DEBUG=INFO for details)",
        NCCL_VERSION,
        "Cuda failure 'system not yet initialized'",
        "ncclUnhandledCudaError: Call to CUDA function failed.",
    )
    s.err(1.0, s.rank, ft.traceback(s.voice.framework, "collective", exc))
    fast_teardown(s, 1.5)


STORE_LOST = (
    "Failed to recv, got 0 bytes. Connection was likely closed. Did the remote server shutdown "
    "or crash?"
)


def c10d_store(s: Scene) -> None:
    """The TCPStore on the first node goes away; ranks elsewhere lose their store connection."""
    v, master = s.voice, s.voice.hosts[0]
    ranks = peer_ranks(s, 3)
    # The first rank to lose the store is the one whose exit brings the step down.
    s.rank, s.pos = ranks[0], ranks[0] // s.gpn
    error = [f"torch.distributed.DistStoreError: {STORE_LOST}"]
    for rank in ranks:
        where = f"SocketImpl(fd={40 + rank}, addr=[{v.host(rank)}]:{41000 + rank}, "
        where += f"remote=[{master}]:29500)"
        warning = f"[c10d] recvValue failed on {where}: {STORE_LOST}"
        s.say(0.0, [v.glog(rank, s.d(0.0), "TCPStore.cpp:122", warning, level="W")])
        s.err(0.2, rank, ft.traceback(v.framework, "collective", error))
    s.halt(Phase.FAILING)
    fast_teardown(s, 1.0)


def cuda_oom(s: Scene) -> None:
    v, gib = s.voice, s.rng.choice((1.0, 2.0, 3.5, 4.0))
    # Newer PyTorch names the exception at the top level; older jobs print the CUDA one.
    name = "torch.OutOfMemoryError" if v.torch_new else "torch.cuda.OutOfMemoryError"
    message = (
        f"{name}: CUDA out of memory. Tried to allocate {gib:.2f} GiB. GPU {s.gpu} has a "
        f"total capacity of 79.10 GiB of which {gib * 0.6:.2f} GiB is free. Process "
        f"{v.pid(s.rank)} has 78.04 GiB memory in use. Of the allocated memory 74.12 GiB "
        "is allocated by PyTorch, and 2.31 GiB is reserved by PyTorch but unallocated. If "
        "reserved but unallocated memory is large try setting "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See "
        "documentation for Memory Management  "
        "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
    )
    s.err(0.0, s.rank, ft.traceback(v.framework, "forward", [message]))
    s.halt(Phase.FAILING)
    fast_teardown(s, 0.5)


def nan_loss(s: Scene) -> None:
    """The loss goes NaN: the progress log shows it, then the framework's guard stops the run."""
    v, w = s.voice, s.job.workload
    # The NaN shows on the rank that logs progress; no GPU is to blame.
    s.rank, s.pos = v.log_rank, v.log_rank // s.gpn
    it = max(1, s.run.iteration_at(s.t0))
    shown, exception = _NAN[w.framework](s, it)
    s.say(0.0, [v.out(s.rank, line) for line in shown])
    s.err(0.5, s.rank, ft.traceback(w.framework, "backward", [exception]))
    s.halt(Phase.FAILING)
    fast_teardown(s, 1.0)


def _megatron_nan(s: Scene, it: int) -> tuple[list[str], str]:
    w, nan, rank = s.job.workload, float("nan"), s.rank
    ms = w.spi * 1000
    line = megatron_iteration(
        s.d(0.0), it, w.train_iters, w.gbs, ms, w.tflops, w.lr_peak, nan, nan, nan_iters=1
    )
    # Megatron's --check-for-nan-in-loss-and-grad names the node, though it is not to blame.
    error = (
        f"AssertionError: Rank {rank}: found NaN in local grad norm in backward pass before "
        f"data-parallel communication collective. Device: {rank % s.gpn}, node: "
        f"{s.voice.host(rank)}"
    )
    return [line], error


def _deepspeed_nan(s: Scene, it: int) -> tuple[list[str], str]:
    stamp = ds_stamp(s.d(0.0))
    # fp16 loss scaling halves the scale at each overflow until it cannot go lower.
    lines = [
        f"{stamp} [INFO] [loss_scaler.py:183:update_scale] [deepspeed] OVERFLOW! Rank {s.rank} "
        f"Skipping step. Attempted loss scale: {n}, reducing to {max(1, n // 2)}"
        for n in (4, 2, 1)
    ]
    return lines, (
        "Exception: Current loss scale already at minimum - cannot decrease scale anymore. "
        "Exiting run."
    )


def _hf_nan(s: Scene, it: int) -> tuple[list[str], str]:
    w = s.job.workload
    epoch = round(3.0 * it / w.train_iters, 2)
    line = (
        f"{{'loss': nan, 'grad_norm': nan, 'learning_rate': {w.lr_peak:.4g}, 'epoch': {epoch!r}}}"
    )
    return [line], (
        "RuntimeError: Function 'LogSoftmaxBackward0' returned nan values in its 0th output."
    )


_NAN = {"megatron": _megatron_nan, "deepspeed": _deepspeed_nan, "hf": _hf_nan}


def app_error(s: Scene) -> None:
    v = s.voice
    leaf = {"shape_mismatch": "forward", "config_key_error": "config"}.get(s.entry.key, "import")
    # The same code fails on every rank at once; the first one to print is rank 0.
    for n, rank in enumerate(sorted({0, *range(0, v.world, s.gpn)})[:8]):
        dt = 0.0 if n == 0 else s.rng.uniform(0.0, 0.5)
        if s.entry.detail:
            # A kernel's own assertion, one line per failing thread, before the exception.
            lines = [s.entry.detail.format(thread=117 + t) for t in range(4)]
            s.err(dt, rank, lines)
        s.err(dt, rank, ft.traceback(v.framework, leaf, [s.entry.error]))
    s.rank, s.pos = 0, 0
    s.halt(Phase.FAILING)
    fast_teardown(s, 1.0)


def diverge(s: Scene) -> None:
    """The loss jumps well above where it was and stays there; the run goes on regardless."""
    s.run.loss_shift = s.rng.uniform(1.8, 2.6)


def preempted(s: Scene) -> None:
    _ended_by_slurm(s, "PREEMPTION", JobState.PREEMPTED, "Preempted")


def admin_down(s: Scene) -> None:
    reason = s.rng.choice(
        (
            "maint: BMC firmware update",
            "maint: reseat HGX baseboard",
            "hw swap: PSU2",
            "kernel upgrade 6.8.0-51",
        )
    )
    lines = [
        f"srun: error: Node failure on {s.node.name}",
        *ft.step_cancelled(s.voice, s.job.raw_id, s.d(0.0), "NODE FAILURE"),
    ]
    s.node.offline = True
    s.halt(Phase.FAILING)
    # No error comes first: the job's only evidence is Slurm's NODE FAILURE banner.
    s.node_down(0.0, s.node, reason, lines)
    s.node_back(s.rng.uniform(1800.0, 5400.0), s.node)


def time_limit(s: Scene) -> None:
    _ended_by_slurm(s, "TIME LIMIT", JobState.TIMEOUT, "TimeLimit")


def _ended_by_slurm(s: Scene, due: str, state: JobState, reason: str) -> None:
    v = s.voice
    lines = ft.step_cancelled(v, s.job.raw_id, s.d(0.0), due)
    for pos in range(len(v.hosts)):
        # Slurm signals every node at once, so every node's launcher reports the SIGTERM.
        lines += ft.agent_sigterm(v, pos, s.d(0.0))
    s.say(0.0, lines)
    s.halt(Phase.FAILING)
    s.end(s.rng.uniform(0.5, 2.0), state, 0, 15, reason)


def unknown_exit(s: Scene) -> None:
    v, w = s.voice, s.job.workload
    if s.entry.detail == "sigkill":
        # The batch script's srun started just before the launchers, so its pid is lower.
        pid = v.pids[0] - 7
        s.say(
            0.0,
            [
                f"/var/spool/slurmd/job{s.job.raw_id:05d}/slurm_script: line 38: {pid} "
                f"Killed                  srun --kill-on-bad-exit=1 python3 {w.script}"
            ],
        )
        s.halt(Phase.FAILING)
        # The batch shell exits 137 (128 + SIGKILL) after its srun was killed.
        s.end(s.rng.uniform(1.0, 3.0), JobState.FAILED, 137, 0, "NonZeroExitCode")
        return
    # The log just stops, mid-line, as when a process dies while its buffer is flushed.
    line = _progress_text(s, max(1, s.run.iteration_at(s.t0)))
    s.say(0.0, [v.out(v.log_rank, line[: s.rng.randrange(len(line) // 3, len(line) - 5)])])
    s.halt(Phase.FAILING)
    s.end(s.rng.uniform(3.0, 15.0), JobState.FAILED, 1, 0, "NonZeroExitCode")


def _progress_text(s: Scene, it: int) -> str:
    w, d, loss = s.job.workload, s.d(0.0), s.job.workload.loss_floor + 0.3
    if w.framework == "megatron":
        ms = w.spi * 1000
        return megatron_iteration(d, it, w.train_iters, w.gbs, ms, w.tflops, w.lr_peak, loss, 0.5)
    if w.framework == "deepspeed":
        return deepspeed_step(d, it, w.lr_peak, loss, w.spi, w.gbs)[0]
    return hf_logs(it, w.train_iters, loss, 0.5, w.lr_peak, 1.0, w.spi, 60.0)[0]
