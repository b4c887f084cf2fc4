"""How each fault unfolds: root-cause text on the right host and rank, the cascade on the other
ranks, then the scheduler's view. One builder per ``FaultEntry.script``."""

from __future__ import annotations

import random
from datetime import datetime
from typing import Protocol

from fleet.core.scheduler import JobState
from lab.simulator import failtext as ft

from .catalogue import DBE_XIDS, FaultEntry
from .core import Core
from .scheduler import SimulatedScheduler
from .state import Job, Node, Phase, Run

# The version the start-up lines announce, so a job's log agrees with itself.
NCCL_VERSION = "2.21.5+cuda12.4"
REMOTE = "remote process exited or there was a network error"
REMOTE_CODE = (
    "ncclRemoteError: A call failed possibly due to a network error or a remote "
    "process exiting prematurely."
)


# The fault injector plays this part; a protocol, as ``faults`` imports this module.
class Stage(Protocol):
    """What a scene needs from the simulation."""

    core: Core
    scheduler: SimulatedScheduler
    rng: random.Random

    def halt(self, run: Run, phase: Phase) -> None: ...

    def slow_down(self, job: Job, run: Run, factor: float) -> None: ...


class Scene:
    """One fault unfolding on one attempt. Times given to its methods are seconds after the
    fault began; lines of the attempt's processes are dropped once those processes are gone."""

    def __init__(
        self, stage: Stage, job: Job, run: Run, entry: FaultEntry, node: Node, gpu: int
    ) -> None:
        self.stage, self.job, self.run, self.entry = stage, job, run, entry
        self.node, self.gpu = node, gpu
        self.rng = stage.rng
        self.voice = run.voice
        self.gpn = self.voice.gpn
        self.t0 = stage.core.clock.t
        self.pos = run.nodes.index(node)
        self.rank = self.pos * self.gpn + gpu

    def d(self, dt: float) -> datetime:
        return self.stage.core.clock.at(self.t0 + dt)

    def say(self, dt: float, texts: list[str]) -> None:
        self.stage.core.job_lines_at(self.t0 + dt, self.job, self.run.token, texts)

    def err(self, dt: float, rank: int, texts: list[str]) -> None:
        self.say(dt, [self.voice.err(rank, text) for text in texts])

    def kernel(self, dt: float, node: Node, texts: list[str]) -> None:
        uptime = self.t0 + dt - node.boot_t
        self.stage.core.host_lines_at(
            self.t0 + dt, node.name, [ft.dmesg(uptime, text) for text in texts]
        )

    def syslog(self, dt: float, node: Node, texts: list[str]) -> None:
        self.stage.core.host_lines_at(self.t0 + dt, node.name, texts)

    def halt(self, phase: Phase) -> None:
        self.stage.halt(self.run, phase)

    def end(self, dt: float, state: JobState, exit_code: int, signal: int, reason: str) -> None:
        self.stage.core.queue.push(self.t0 + dt, self._end, (state, exit_code, signal, reason))

    def node_down(self, dt: float, node: Node, reason: str, texts: list[str]) -> None:
        self.stage.core.queue.push(self.t0 + dt, self._node_down, node, reason, texts)

    def node_back(self, dt: float, node: Node) -> None:
        self.stage.core.queue.push(self.t0 + dt, self._node_back, node)

    def mark_xid(self, code: int) -> None:
        self.node.xid[self.gpu] = code
        if code in DBE_XIDS:
            self.node.dbe[self.gpu] += 1

    def _alive(self) -> bool:
        return self.job.run is self.run and self.run.alive

    def _end(self, final: tuple[JobState, int, int, str]) -> None:
        if self._alive():
            self.stage.scheduler.end(self.job, *final)

    def _node_down(self, node: Node, reason: str, texts: list[str]) -> None:
        if self._alive():
            self.stage.core.job_lines(self.job, texts)
        # Down even if the attempt already ended: the node's failure outlives the job.
        self.stage.scheduler.node_failed(node, reason)

    def _node_back(self, node: Node) -> None:
        # The reboot clears the node's defect, so it returns healthy without a repair.
        node.reboot(self.stage.core.clock.t)
        self.stage.scheduler.node_returned(node)


# -- cascades and teardown ------------------------------------------------------------------


def peer_ranks(s: Scene, count: int) -> list[int]:
    """Ranks on other nodes (or the same node, for a one-node job) that notice the failure."""
    world = range(s.voice.world)
    others = [r for r in world if r // s.gpn != s.pos] or [r for r in world if r != s.rank]
    if not others:
        return [s.rank]  # a one-GPU job: there is nobody else to notice
    return sorted(s.rng.sample(others, min(count, len(others))))


def peer_errors(s: Scene, dt: float, count: int = 2) -> None:
    """Ranks whose NCCL connection to the failed rank broke raise ncclRemoteError."""
    ip = s.voice.ips[s.pos]
    for rank in peer_ranks(s, count):
        last = (
            f"socketProgressOpt: Call to recv from {ip}<{40000 + s.rank}> failed : "
            "Connection reset by peer"
        )
        exc = ft.dist_backend_error(REMOTE, NCCL_VERSION, last, REMOTE_CODE)
        trace = ft.traceback(s.voice.framework, "collective", exc)
        s.err(dt + s.rng.uniform(0.0, 1.0), rank, trace)


def fast_teardown(s: Scene, dt: float, exitcode: int = 1) -> None:
    """srun --kill-on-bad-exit: the failed task takes the whole step down within seconds."""
    v, local = s.voice, s.rank % s.gpn
    others = [r for r in range(s.pos * s.gpn, (s.pos + 1) * s.gpn) if r != s.rank]
    if v.launcher != "srun":
        s.say(dt + 1.5, ft.agent_failure(v, s.pos, s.d(dt + 1.5), local, exitcode, others))
    # DeepSpeed's launcher runs outside any Slurm step: no srun reports or tears anything down.
    if v.launcher != "pdsh":
        s.say(dt + 2.0, [ft.srun_task_exit(v, s.rank, exitcode), *ft.srun_abort(v, s.pos)])
        for pos in range(len(v.hosts)):
            if pos != s.pos:
                s.say(dt + 2.5, ft.agent_sigterm(v, pos, s.d(dt + 2.5)))
        s.say(dt + 3.0, ft.step_cancelled(v, s.job.raw_id, s.d(dt + 3.0))[:1])
    fail(s, dt + s.rng.uniform(5.0, 30.0), exitcode)


def watchdog_teardown(s: Scene, skip: set[int]) -> None:
    """Every waiting rank's NCCL watchdog times out, aborts its process, and the job fails."""
    v, timeout = s.voice, s.job.workload.nccl_timeout_s
    dt = timeout + s.rng.uniform(0.05, 0.6)
    seq, lines = s.run.nccl_seq, []
    for rank in range(v.world):
        # Skipped ranks are stuck themselves (in a kernel, or frozen) and print nothing.
        if rank not in skip:
            ran = int(timeout * 1000) + s.rng.randint(3, 150)
            lines += ft.watchdog_timeout(v, rank, s.d(dt), seq, timeout, ran)
    s.say(dt, lines)
    first = min(set(range(v.world)) - skip, default=s.rank)
    if v.launcher == "srun":
        s.say(dt + 1.0, [ft.srun_task_exit(v, first, -6), *ft.srun_abort(v, first // s.gpn)])
    else:
        for pos in range(len(v.hosts)):
            local = next(
                (r for r in range(pos * s.gpn, (pos + 1) * s.gpn) if r not in skip), pos * s.gpn
            )
            s.say(dt + 1.0, ft.agent_failure(v, pos, s.d(dt + 1.0), local % s.gpn, -6, []))
    fail(s, dt + s.rng.uniform(4.0, 12.0), -6)


def fail(s: Scene, dt: float, exitcode: int) -> None:
    # srun reports a signal death as the signal; a launcher exits 1 whatever killed its ranks.
    if s.voice.launcher == "srun" and exitcode < 0:
        s.end(dt, JobState.FAILED, 0, -exitcode, "RaisedSignal")
    else:
        s.end(dt, JobState.FAILED, 1, 0, "NonZeroExitCode")


def xid_line(s: Scene, code: int, text: str) -> str:
    # The driver reports these two with no process: the GPU is gone, or it is bookkeeping.
    pid = None if code in (63, 79) else s.voice.pid(s.rank)
    detail = text.format(
        addr=s.rng.randrange(0x1000, 0xFFFFFF),
        part=s.rng.randrange(8),
        link=s.rng.randrange(18),
        gpu=s.gpu,
    )
    return ft.xid(s.gpu, code, pid, detail)
