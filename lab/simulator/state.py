"""The simulator's mutable inner state: nodes, jobs, attempts and workloads.

These are plain slotted classes, not values: the event loop updates them in place millions of
times. Only frozen records (``fleet.core.scheduler``, ``detection.core.telemetry`` and
``records``) leave the package.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from enum import StrEnum

from fleet.core.scheduler import JobState, NodeState

from .catalogue import FaultEntry
from .textgen import Voice


class Phase(StrEnum):
    """Where an attempt's training processes are."""

    STARTUP = "startup"
    TRAIN = "train"
    HUNG = "hung"
    FAILING = "failing"
    OVER = "over"


@dataclass(frozen=True)
class Defect:
    """A fault that stays on a node until an operator resumes it."""

    # It strikes again, on the same GPU, until the node is resumed or rebooted.
    entry: FaultEntry
    gpu: int


class Node:
    """One compute node: its scheduler state, its hardware's health and its GPUs' counters."""

    __slots__ = (
        "index",
        "name",
        "partition",
        "gpus",
        "weight",
        "ip",
        "job",
        "completing",
        "down",
        "down_reason",
        "drain",
        "drain_reason",
        "offline",
        "defect",
        "boot_t",
        "xid",
        "dbe",
    )

    def __init__(self, index: int, name: str, partition: str, gpus: int, weight: float) -> None:
        self.index = index
        self.name = name
        self.partition = partition
        self.gpus = gpus
        # Relative fault rate: ``bad_node_factor`` for the bad few, 1.0 for the rest.
        self.weight = weight
        # Unique per index (250 hosts a /24), for the addresses NCCL and socket errors print.
        self.ip = f"10.{16 + index // 62500}.{index // 250 % 250}.{index % 250 + 1}"
        self.job: Job | None = None
        # The job has ended but still holds the node, as while Slurm's epilog runs.
        self.completing = False
        # Down and drain are kept apart, as Slurm does: a node that reboots by itself stays drained.
        self.down = False
        self.down_reason = ""
        self.drain = False
        self.drain_reason = ""
        # Crashed or rebooting: no slurmd, no dcgm-exporter.
        self.offline = False
        self.defect: Defect | None = None
        # Uptime in dmesg stamps counts from here.
        self.boot_t = 0.0
        # The last Xid and the double-bit ECC count per GPU, for the DCGM gauges.
        self.xid = [0] * gpus
        self.dbe = [0] * gpus

    @property
    def state(self) -> NodeState:
        if self.down:
            return NodeState.DOWN
        if self.drain:
            return NodeState.DRAINING if self.job is not None else NodeState.DRAINED
        if self.job is None:
            return NodeState.IDLE
        return NodeState.COMPLETING if self.completing else NodeState.ALLOCATED

    @property
    def reason(self) -> str:
        return self.down_reason if self.down else self.drain_reason if self.drain else ""

    @property
    def usable(self) -> bool:
        """Whether the scheduler may place a new job here."""
        return not (self.down or self.drain or self.offline)

    def reboot(self, t: float) -> None:
        """A fresh boot clears the driver's state and whatever was wrong with the node."""
        self.boot_t = t
        self.defect = None
        self.xid = [0] * self.gpus
        self.dbe = [0] * self.gpus


class Run:
    """One attempt's processes: where they run, how fast, and how far they got.

    Progress is kept as a segment (``seg_t0``, ``seg_iter0``, seconds per iteration ``spi``)
    so the iteration at any moment is computed, not counted tick by tick.
    """

    __slots__ = (
        "token",
        "start_t",
        "nodes",
        "voice",
        "phase",
        "seg_t0",
        "seg_iter0",
        "spi",
        "epoch",
        "slow",
        "stuck",
        "nccl_seq",
        "silent",
        "loss_shift",
    )

    def __init__(self, token: int, start_t: float, nodes: list[Node], voice: Voice) -> None:
        self.token = token
        self.start_t = start_t
        self.nodes = nodes
        self.voice = voice
        self.phase = Phase.STARTUP
        self.seg_t0 = start_t
        self.seg_iter0 = 0
        # No iterations while starting up: the speed is set when training begins.
        self.spi = math.inf
        # Bumped at every change of speed, so a progress tick queued before it can tell it is stale.
        self.epoch = 0
        self.slow = 1.0
        # (node position, gpu) of the GPU that is stuck in a kernel, for the metrics.
        self.stuck: tuple[int, int] | None = None
        self.nccl_seq = 0
        # A hang no watchdog reports: only the time limit ends it.
        self.silent = False
        # The factor a divergence put on the loss (1.0: none).
        self.loss_shift = 1.0

    def iteration_at(self, t: float) -> int:
        if self.spi == math.inf or t <= self.seg_t0:
            return self.seg_iter0
        return self.seg_iter0 + int((t - self.seg_t0) / self.spi)

    @property
    def alive(self) -> bool:
        return self.phase is not Phase.OVER


class Workload:
    """A logical training run and what it has achieved across its attempts."""

    __slots__ = (
        "tag",
        "name",
        "framework",
        "launcher",
        "partition",
        "num_nodes",
        "gpus",
        "spi",
        "tflops",
        "gbs",
        "seq_len",
        "train_iters",
        "iteration",
        "ckpt_iter",
        "start_iter",
        "log_every",
        "save_every",
        "script",
        "ckpt_dir",
        "lr_peak",
        "loss_floor",
        "rng",
        "job",
        "job_ids",
        "persistent",
        "first_start_t",
        "finished_t",
        "allocated_gpu_s",
        "lost_iters",
        "attempts",
        "fb_mib",
        "nccl_timeout_s",
        "torch_new",
    )

    def __init__(self, tag: str, name: str, rng: random.Random) -> None:
        self.tag = tag
        self.name = name
        self.rng = rng
        self.framework = "megatron"
        self.launcher = "torchrun"
        self.partition = ""
        self.num_nodes = 1
        self.gpus = 8
        self.spi = 1.0
        self.tflops = 400.0
        self.gbs = 512
        self.seq_len = 4096
        self.train_iters = 1000
        self.iteration = 0
        self.ckpt_iter = 0
        # Where the simulation found it: iterations done before are not credited as productive.
        self.start_iter = 0
        self.log_every = 10
        self.save_every = 1000
        self.script = "pretrain_gpt.py"
        self.ckpt_dir = ""
        self.lr_peak = 3e-4
        self.loss_floor = 1.8
        self.job: Job | None = None
        self.job_ids: list[str] = []
        # A bug in the workload's own code: every later attempt hits it again.
        self.persistent: FaultEntry | None = None
        self.first_start_t: float | None = None
        self.finished_t: float | None = None
        self.allocated_gpu_s = 0.0
        self.lost_iters = 0
        self.attempts = 0
        self.fb_mib = 70000.0
        self.nccl_timeout_s = 600.0
        self.torch_new = True


class Job:
    """One Slurm job (or array task) as the controller holds it."""

    __slots__ = (
        "job_id",
        "raw_id",
        "name",
        "partition",
        "num_nodes",
        "comment",
        "workload",
        "priority",
        "state",
        "reason",
        "nodes",
        "restart_count",
        "exit_code",
        "signal",
        "excluded",
        "held",
        "submit_t",
        "start_t",
        "end_t",
        "eligible_t",
        "token",
        "serial",
        "run",
        "final",
    )

    def __init__(
        self, job_id: str, raw_id: int, workload: Workload, priority: int, submit_t: float
    ) -> None:
        self.job_id = job_id
        # The numeric id slurmstepd prints (array tasks have one of their own).
        self.raw_id = raw_id
        self.name = workload.name
        self.partition = workload.partition
        self.num_nodes = workload.num_nodes
        self.comment = ""
        self.workload = workload
        self.priority = priority
        self.state = JobState.PENDING
        self.reason = "None"
        self.nodes: list[Node] = []
        self.restart_count = 0
        self.exit_code: int | None = None
        self.signal: int | None = None
        self.excluded: tuple[str, ...] = ()
        self.held = False
        self.submit_t = submit_t
        self.start_t: float | None = None
        self.end_t: float | None = None
        self.eligible_t = submit_t
        # token names an attempt's processes; serial changes with every state change, so
        # events scheduled for an older state can tell they are stale.
        self.token = 0
        self.serial = 0
        self.run: Run | None = None
        self.final: tuple[JobState, int, int, str] | None = None
