"""Log formats of healthy training: launcher prefixes, start-up chatter, progress and checkpoints.

Formats are those of the real tools: Megatron-LM's ``training_log`` line, Megatron-DeepSpeed's
``log_dist`` and ``steps:`` lines, Hugging Face Trainer's logged dicts and tqdm bar, torchrun's
start-up warning, NCCL's ``NCCL_DEBUG=INFO`` lines. Failure text lives in ``failtext``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

# Kept word for word, the trailing space too: detectors must meet the real text.
TORCH_WARNING = (
    "Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, to avoid "
    "your system being overloaded, please further tune the variable for optimal performance in "
    "your application as needed. "
)
TYPED_STORAGE_WARNING = (
    "{path}/torch/_utils.py:831: UserWarning: TypedStorage is deprecated. It will be removed in "
    "the future and UntypedStorage will be the only storage class. This should only matter to "
    "you if you are using storages directly.  To access UntypedStorage directly, use "
    "tensor.untyped_storage() instead of tensor.storage()"
)
REENTRANT_WARNING = (
    "{path}/torch/utils/checkpoint.py:1399: FutureWarning: torch.utils.checkpoint: the "
    "use_reentrant parameter should be passed explicitly. In version 2.5 we will raise an "
    "exception if use_reentrant is not passed. use_reentrant=False is recommended, but if you "
    "need to preserve the current default behavior, you can pass use_reentrant=True. Refer to "
    "docs for more details on the differences between the two variants."
)
ALLOCATOR_WARNING = (
    "[WARNING] [stage3.py:2134:step] {n} pytorch allocator cache flushes since last step. this "
    "happens when there is high memory pressure and is detrimental to performance. if this is "
    "happening frequently consider adjusting settings to reduce memory consumption. If you are "
    "unable to make the cache flushes go away consider adding "
    "get_accelerator().empty_cache() calls in your training loop to ensure that all ranks flush "
    "their caches at the same time"
)
# Where NVIDIA's PyTorch containers install packages, as tracebacks show it.
SITE_PACKAGES = "/usr/local/lib/python3.10/dist-packages"


@dataclass(frozen=True)
class Voice:
    """How one attempt's processes write: the launcher's prefixes, hosts, ranks and pids.

    ``launcher`` is ``torchrun`` (srun starts one torchrun per node; exceptions carry
    ``[rankN]:``), ``srun`` (one task per GPU under ``srun --label``: every line starts ``N: ``)
    or ``pdsh`` (the DeepSpeed launcher: every line starts with the host name).
    """

    launcher: str
    framework: str
    job_id: str
    hosts: tuple[str, ...]
    ips: tuple[str, ...]
    gpn: int
    pids: tuple[int, ...]
    torch_new: bool
    script: str

    @property
    def world(self) -> int:
        return len(self.hosts) * self.gpn

    @property
    def log_rank(self) -> int:
        """The rank that prints progress: Megatron's last rank, everyone else's rank 0."""
        return self.world - 1 if self.framework == "megatron" else 0

    def host(self, rank: int) -> str:
        return self.hosts[rank // self.gpn]

    def pid(self, rank: int) -> int:
        return self.pids[rank // self.gpn] + rank % self.gpn + 1

    def out(self, rank: int, text: str) -> str:
        """A line a rank writes to stdout."""
        if self.launcher == "srun":
            # srun --label pads task numbers to the width of the largest one.
            return f"{rank:>{len(str(self.world - 1))}}: {text}"
        if self.launcher == "pdsh":
            return f"{self.host(rank)}: {text}"
        return text

    def err(self, rank: int, text: str) -> str:
        """A line of a rank's uncaught exception (torchrun prefixes these with the rank)."""
        if self.launcher == "torchrun":
            return f"[rank{rank}]: {text}"
        return self.out(rank, text)

    def glog(self, rank: int, d: datetime, where: str, text: str, level: str = "E") -> str:
        """A c10d C++ log line, in the format of the job's PyTorch version."""
        if self.torch_new:
            # c10d prints nanoseconds; the clock has microseconds, so the rank fills in the rest.
            nanos = f"{d.microsecond:06d}{rank * 37 % 1000:03d}"
            body = f"[{level}{d:%m%d %H:%M:%S}.{nanos} {where}] {text}"
        else:
            body = f"[{level} {where}] {text}"
        if self.launcher == "torchrun":
            # No space after the prefix before a C++ log line, as real torchrun logs show.
            return f"[rank{rank}]:{body}"
        return self.out(rank, body)

    def agent(self, pos: int, text: str) -> str:
        """A line from the per-node launcher (torchrun's agent, DeepSpeed's launch.py)."""
        if self.launcher == "pdsh":
            return f"{self.hosts[pos]}: {text}"
        return text

    def nccl(self, rank: int, text: str) -> str:
        """An NCCL debug line: ``host:pid:tid [cudaDev] NCCL ...``."""
        pid = self.pid(rank)
        return self.out(rank, f"{self.host(rank)}:{pid}:{pid} [{rank % self.gpn}] {text}")


def stamp(d: datetime) -> str:
    return f"{d:%Y-%m-%d %H:%M:%S}"


def ds_stamp(d: datetime) -> str:
    """DeepSpeed's logging timestamp: ``[2025-05-01 12:00:00,123]``."""
    return f"[{d:%Y-%m-%d %H:%M:%S},{d.microsecond // 1000:03d}]"


def glog_agent(d: datetime, level: str, pid: int, where: str, text: str) -> str:
    """torch.distributed.elastic's log format (glog-like, microseconds and the agent's pid)."""
    return f"{level}{d:%m%d %H:%M:%S}.{d.microsecond:06d} {pid} {where}] {text}"


def megatron_iteration(
    d: datetime,
    it: int,
    total: int,
    gbs: int,
    ms: float,
    tflops: float,
    lr: float,
    loss: float,
    gnorm: float,
    nan_iters: int = 0,
) -> str:
    """Megatron-LM's per-interval ``training_log`` line."""
    # Megatron prints nan, where Python's E format would print NAN.
    loss_text = "nan" if math.isnan(loss) else f"{loss:.6E}"
    norm_text = "nan" if math.isnan(gnorm) else f"{gnorm:.3f}"
    return (
        f" [{stamp(d)}] iteration {it:8d}/{total:8d} | consumed samples: {it * gbs:12d} | "
        f"elapsed time per iteration (ms): {ms:.1f} | throughput per GPU (TFLOP/s/GPU): "
        f"{tflops:.1f} | learning rate: {lr:.6E} | global batch size: {gbs:5d} | lm loss: "
        f"{loss_text} | loss scale: 1.0 | grad norm: {norm_text} | number of skipped iterations:"
        f"   0 | number of nan iterations: {nan_iters:3d} |"
    )


def deepspeed_step(
    d: datetime, it: int, lr: float, loss: float, secs: float, gbs: int
) -> list[str]:
    """Megatron-DeepSpeed's ``log_dist`` step line and its ``steps:`` summary."""
    return [
        f"{ds_stamp(d)} [INFO] [logging.py:96:log_dist] [Rank 0] step={it}, skipped=0, "
        f"lr=[{lr!r}, {lr!r}], mom=[(0.9, 0.95), (0.9, 0.95)]",
        f"steps: {it} loss: {loss:.4f} iter time (s): {secs:.3f} samples/sec: {gbs / secs:.3f}",
    ]


def hf_logs(
    it: int,
    total: int,
    loss: float,
    gnorm: float,
    lr: float,
    epochs: float,
    secs: float,
    elapsed: float,
) -> list[str]:
    """Hugging Face Trainer's logged metrics dict and the tqdm bar it redraws."""
    loss_text = "nan" if math.isnan(loss) else repr(round(loss, 4))
    metrics = (
        f"{{'loss': {loss_text}, 'grad_norm': {gnorm!r}, 'learning_rate': {lr:.4g}, "
        f"'epoch': {round(epochs, 2)!r}}}"
    )
    return [metrics, tqdm_bar(it, total, secs, elapsed)]


def tqdm_bar(it: int, total: int, secs: float, elapsed: float) -> str:
    done = it / total
    cells = int(done * 10)
    bar = "█" * cells + " " * (10 - cells)
    left = (total - it) * secs
    # tqdm turns the rate around once an iteration takes more than a second.
    rate = f"{secs:.2f}s/it" if secs >= 1 else f"{1 / secs:.2f}it/s"
    return f"{done:4.0%}|{bar}| {it}/{total} [{_mmss(elapsed)}<{_mmss(left)}, {rate:>9}]"


def _mmss(seconds: float) -> str:
    whole = int(seconds)
    hours, rest = divmod(whole, 3600)
    # tqdm shows hours only once there are some.
    if hours:
        return f"{hours}:{rest // 60:02d}:{rest % 60:02d}"
    return f"{rest // 60:02d}:{rest % 60:02d}"


def launcher_banner(voice: Voice, d: datetime, agent_pid: int) -> list[str]:
    """What each node's launcher prints before the ranks start."""
    if voice.launcher == "pdsh":
        return [
            voice.agent(
                pos,
                f"{ds_stamp(d)} [INFO] [launch.py:146:main] WORLD INFO DICT: "
                f"{{'{host}': [0, 1, 2, 3, 4, 5, 6, 7]}}",
            )
            for pos, host in enumerate(voice.hosts[:2])
        ]
    # Under srun --label every task is a rank itself: no launcher prints a banner.
    if voice.launcher != "torchrun":
        return []
    where = "torch/distributed/run.py:793"
    if not voice.torch_new:
        # Older torchrun logs through Python's logging, without glog stamps.
        return ["WARNING:torch.distributed.run:", "*" * 41, TORCH_WARNING, "*" * 41]
    return [
        glog_agent(d, "W", agent_pid, where, text)
        for text in ("", "*" * 41, TORCH_WARNING, "*" * 41)
    ]


def nccl_init(voice: Voice, rank: int, nccl_version: str) -> list[str]:
    """NCCL_DEBUG=INFO lines a rank prints while its communicator comes up."""
    ip = voice.ips[rank // voice.gpn]
    lines = [
        f"NCCL INFO Bootstrap : Using ib0:{ip}<0>",
        "NCCL INFO NET/Plugin: No plugin found (libnccl-net.so), using internal implementation",
        f"NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_3:1/IB [2]mlx5_4:1/IB [3]mlx5_5:1/IB "
        f"[4]mlx5_6:1/IB [5]mlx5_9:1/IB [6]mlx5_10:1/IB [7]mlx5_11:1/IB ; OOB ib0:{ip}<0>",
        # Each rank has its own comm handle, but all share the job's one commId.
        f"NCCL INFO comm 0x{0x55D0C0 + rank * 4096:x} rank {rank} nranks {voice.world} cudaDev "
        f"{rank % voice.gpn} nvmlDev {rank % voice.gpn} busId {PCI_BUSES[rank % 8]}000 "
        f"commId 0x{0x3C8D93D1 * (rank // voice.world + 1):x} - Init COMPLETE",
    ]
    if rank == 0:
        lines.insert(1, f"NCCL INFO NCCL version {nccl_version}")
    return [voice.nccl(rank, line) for line in lines]


def megatron_banner(voice: Voice, d: datetime) -> list[str]:
    # Tensor parallelism within a node, data parallelism across nodes: the usual layout.
    tp = min(voice.gpn, 8)
    return [
        f"using world size: {voice.world}, data-parallel size: {voice.world // tp}, "
        f"context-parallel size: 1, tensor-model-parallel size: {tp}, "
        f"pipeline-model-parallel size: 1",
        "> building GPTTokenizer tokenizer ...",
        f"[after megatron is initialized] datetime: {stamp(d)} ",
    ]


def checkpoint_loaded(framework: str, ckpt_dir: str, iteration: int) -> list[str]:
    """What a starting run prints about the checkpoint it resumes from (or its absence)."""
    if framework == "hf":
        if iteration == 0:
            return []
        return [
            "  Continuing training from checkpoint, will skip to saved global_step",
            "  Continuing training from epoch 0",
            f"  Continuing training from global step {iteration}",
        ]
    if iteration == 0:
        return [
            "WARNING: could not find the metadata file "
            f"{ckpt_dir}/latest_checkpointed_iteration.txt",
            "    will not load any checkpoints and will start from random",
        ]
    return [
        f" loading checkpoint from {ckpt_dir} at iteration {iteration}",
        f"  successfully loaded checkpoint from {ckpt_dir} [ t 1/8, p 1/1 ] at iteration "
        f"{iteration}",
    ]


def hf_banner(examples: int, gbs: int, total: int) -> list[str]:
    return [
        "***** Running training *****",
        f"  Num examples = {examples:,}",
        "  Num Epochs = 3",
        "  Instantaneous batch size per device = 4",
        f"  Total train batch size (w. parallel, distributed & accumulation) = {gbs:,}",
        f"  Gradient Accumulation steps = {max(1, gbs // 64)}",
        f"  Total optimization steps = {total:,}",
        "  Number of trainable parameters = 6,738,415,616",
    ]


def checkpoint_saved(framework: str, d: datetime, ckpt_dir: str, it: int) -> list[str]:
    """The lines of a periodic checkpoint save."""
    if framework == "hf":
        path = f"{ckpt_dir}/checkpoint-{it}"
        return [
            f"Saving model checkpoint to {path}",
            f"Configuration saved in {path}/config.json",
            f"Model weights saved in {path}/model.safetensors",
        ]
    lines = [f"saving checkpoint at iteration {it:7d} to {ckpt_dir} in torch_dist format"]
    if framework == "deepspeed":
        lines.append(
            f"{ds_stamp(d)} [INFO] [torch_checkpoint_engine.py:33:commit] [Torch] Checkpoint "
            f"global_step{it} is ready now!"
        )
    lines.append(
        f"  successfully saved checkpoint from iteration {it:7d} to {ckpt_dir} [ t 1/8, p 1/1 ]"
    )
    return lines


# PCI bus numbers of the eight GPUs of an HGX H100 board, as the driver names them.
PCI_BUSES = ("18", "2a", "3a", "5d", "9a", "ab", "ba", "db")


def pci_bus(gpu: int) -> str:
    """The ``PCI:0000:xx:00`` address NVRM uses for a GPU."""
    # Boards with more than eight GPUs get made-up but distinct bus numbers.
    bus = PCI_BUSES[gpu] if gpu < len(PCI_BUSES) else f"{0x10 + gpu * 0x11 & 0xFF:02x}"
    return f"0000:{bus}:00"
