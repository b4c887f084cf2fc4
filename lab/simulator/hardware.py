"""Scripts of hardware and interconnect faults: GPUs, NVLink, InfiniBand/RoCE and hosts.

Each writes the root cause on the implicated host (kernel log) and rank, lets the other ranks
notice, and leaves the scheduler to record the end.
"""

from __future__ import annotations

from fleet.core.scheduler import JobState
from lab.simulator import failtext as ft

from .catalogue import XID63_TEXT
from .scenes import (
    NCCL_VERSION,
    REMOTE,
    REMOTE_CODE,
    Scene,
    fast_teardown,
    peer_errors,
    peer_ranks,
    watchdog_teardown,
    xid_line,
)
from .state import Phase
from .textgen import pci_bus

SYSTEM = (
    "unhandled system error (run with NCCL_DEBUG=INFO for details)",
    "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or "
    "device error.",
)


def gpu_crash(s: Scene) -> None:
    e = s.entry
    # The driver asks for a row remap (Xid 63) before it reports that the remap failed.
    if e.xid == 64:
        s.kernel(0.0, s.node, [xid_line(s, 63, XID63_TEXT)])
        s.mark_xid(63)
    if e.xid:
        s.kernel(0.0, s.node, [xid_line(s, e.xid, e.detail)])
        s.mark_xid(e.xid)
    elif e.detail:
        # A kernel line that is not the driver's (the PCIe root port's AER report).
        bus = pci_bus(s.gpu).split(":")[1]
        root = f"{max(0, int(bus, 16) - 1):02x}"
        s.kernel(0.0, s.node, [e.detail.format(bus=bus, root=root)])
    s.halt(Phase.FAILING)
    # The error shows in the step's traceback or in NCCL's watchdog, by where the rank was;
    # without a kernel line first, it is the first evidence itself.
    dt = s.rng.uniform(0.3, 3.0) if e.xid or e.detail else 0.0
    if s.rng.random() < 0.6:
        error = ft.cuda_error(e.error, hint=s.rng.random() < 0.5)
        s.err(dt, s.rank, ft.traceback(s.voice.framework, "backward", error))
    else:
        s.say(
            dt,
            [
                ft.watchdog_cuda(s.voice, s.rank, s.d(dt), e.error),
                s.voice.err(
                    s.rank, "terminate called after throwing an instance of 'c10::DistBackendError'"
                ),
            ],
        )
    # Peers see their connections break at once, or only when their watchdogs time out.
    if s.rng.random() < 0.6:
        peer_errors(s, dt + 0.5)
        fast_teardown(s, dt + 1.0, -6 if s.voice.launcher == "srun" else 1)
    else:
        watchdog_teardown(s, {s.rank})


def gpu_hang(s: Scene) -> None:
    if s.entry.xid:
        s.kernel(0.0, s.node, [xid_line(s, s.entry.xid, s.entry.detail)])
        s.mark_xid(s.entry.xid)
    s.halt(Phase.HUNG)
    s.run.stuck = (s.pos, s.gpu)
    if not s.entry.xid and s.rng.random() < 0.3:
        # No watchdog fires (async error handling off): the job sits until its time limit.
        s.run.silent = True
        return
    watchdog_teardown(s, {s.rank})


def throttle(s: Scene) -> None:
    kind = s.entry.detail
    low, high = {"thermal": (1.5, 2.2), "power": (1.8, 2.6)}.get(kind, (1.3, 1.8))
    if kind == "network":
        s.kernel(0.0, s.node, [ft.ib_port(s.gpu, "DOWN")])
        s.kernel(2.5, s.node, [ft.ib_port(s.gpu, "ACTIVE")])
    s.stage.slow_down(s.job, s.run, s.rng.uniform(low, high))


def ib_crash(s: Scene) -> None:
    """The bad link is on the implicated host: its HCA port drops, its rank's sends fail with
    retry-exceeded (status 12), and the peer sees flushed receives or a reset connection."""
    v = s.voice
    peer = peer_ranks(s, 1)[0]
    s.kernel(0.0, s.node, [ft.ib_port(s.gpu, "DOWN")])
    if s.entry.detail == "reset":
        s.kernel(3.0, s.node, [ft.ib_port(s.gpu, "ACTIVE")])
        s.say(1.0, ft.socket_reset(v, peer, s.node.name, s.node.ip))
    else:
        s.say(1.0, ft.ib_completion(v, peer, s.node.ip, 5, 249, "Recv"))
    s.halt(Phase.FAILING)
    warn = ft.ib_completion(v, s.rank, v.ips[peer // s.gpn], 12, 129, "Send")
    s.say(0.8, warn)
    last = warn[0].split("NCCL WARN ", 1)[1]
    # NCCL versions disagree on whether this surfaces as a remote or a system error.
    reason, code = (REMOTE, REMOTE_CODE) if s.rng.random() < 0.5 else SYSTEM
    exc = ft.dist_backend_error(reason, NCCL_VERSION, last, code)
    s.err(1.2, s.rank, ft.traceback(v.framework, "collective", exc))
    fast_teardown(s, 1.5)


def ib_hang(s: Scene) -> None:
    s.kernel(0.0, s.node, [ft.ib_port(s.gpu, "DOWN")])
    s.halt(Phase.HUNG)
    watchdog_teardown(s, set())


def node_crash(s: Scene) -> None:
    # A machine check leaves a last word in the kernel log; a power loss leaves none, and the
    # first evidence is the peers losing their connections.
    panic = s.rng.random() < 0.6
    if panic:
        s.kernel(0.0, s.node, ft.machine_check(s.rng.randrange(96)))
    s.node.offline = True
    s.halt(Phase.FAILING)
    for n, rank in enumerate(peer_ranks(s, 2)):
        dt = 0.0 if n == 0 and not panic else s.rng.uniform(2.0, 15.0)
        s.say(dt, ft.socket_reset(s.voice, rank, s.node.name, s.node.ip))
    detect = s.rng.uniform(25.0, 30.0)
    lines = [
        f"srun: error: Node failure on {s.node.name}",
        *ft.step_cancelled(s.voice, s.job.raw_id, s.d(detect), "NODE FAILURE"),
    ]
    s.node_down(detect, s.node, "Not responding", lines)
    # It comes back by itself after a reboot, which clears the defect: no operator needed.
    s.node_back(detect + s.rng.uniform(1200.0, 2700.0), s.node)


def host_oom(s: Scene) -> None:
    v, pid = s.voice, s.voice.pid(s.rank)
    s.kernel(0.0, s.node, ft.oom_killer(pid, s.rng.randrange(180_000_000, 250_000_000)))
    s.halt(Phase.FAILING)
    task = s.rank if v.launcher == "srun" else s.pos
    stepd = ft.stepd(
        v,
        f"Detected 1 oom_kill event in StepId={s.job.raw_id}.0. Some of the step "
        "tasks have been OOM Killed.",
    )
    if v.launcher != "srun":
        others = [r for r in range(s.pos * s.gpn, (s.pos + 1) * s.gpn) if r != s.rank]
        s.say(1.0, ft.agent_failure(v, s.pos, s.d(1.0), s.rank % s.gpn, -9, others))
    s.say(
        1.5,
        [
            stepd,
            f"srun: error: {s.node.name}: task {task}: Out Of Memory",
            *ft.srun_abort(v, s.pos),
        ],
    )
    # Slurm records an OOM kill as exit code 0:125.
    s.end(s.rng.uniform(5.0, 20.0), JobState.OUT_OF_MEMORY, 0, 125, "OutOfMemory")


def soft_lockup(s: Scene) -> None:
    cpu, pid = s.rng.randrange(96), s.voice.pid(s.rank)
    for dt, stuck in ((0.0, 22), (28.0, 49)):
        s.kernel(
            dt,
            s.node,
            [f"watchdog: BUG: soft lockup - CPU#{cpu} stuck for {stuck}s! [python3:{pid}]"],
        )
    s.halt(Phase.HUNG)
    # The frozen node's ranks print nothing; every other rank's watchdog fires.
    watchdog_teardown(s, set(range(s.pos * s.gpn, (s.pos + 1) * s.gpn)))
