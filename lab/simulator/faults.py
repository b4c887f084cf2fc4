"""Fault injection: when faults strike a running attempt, on which node and GPU, and the ground
truth record of each. How a fault then unfolds is scripted in ``scenes``."""

from __future__ import annotations

from collections.abc import Callable

from lab.simulator import hardware, software

from .catalogue import TIME_LIMIT, FaultEntry, draw_entry
from .core import Core
from .events import seeded
from .records import FaultKind, InjectedFault
from .scenes import Scene
from .scheduler import SimulatedScheduler
from .state import Defect, Job, Node, Phase, Run
from .training import Trainer

FaultListener = Callable[[InjectedFault, Job], None]
SCRIPTS: dict[str, Callable[[Scene], None]] = {
    "gpu_crash": hardware.gpu_crash,
    "gpu_hang": hardware.gpu_hang,
    "throttle": hardware.throttle,
    "ib_crash": hardware.ib_crash,
    "ib_hang": hardware.ib_hang,
    "node_crash": hardware.node_crash,
    "host_oom": hardware.host_oom,
    "soft_lockup": hardware.soft_lockup,
    "fs_crash": software.fs_crash,
    "fs_hang": software.fs_hang,
    "fabric_manager": software.fabric_manager,
    "c10d_store": software.c10d_store,
    "cuda_oom": software.cuda_oom,
    "nan_loss": software.nan_loss,
    "app_error": software.app_error,
    "diverge": software.diverge,
    "preempted": software.preempted,
    "admin_down": software.admin_down,
    "time_limit": software.time_limit,
    "unknown_exit": software.unknown_exit,
}
_RUNNING = (Phase.STARTUP, Phase.TRAIN)


class FaultInjector:
    """Draws faults for running attempts (a Poisson process per attempt, its rate the sum of its
    nodes' rates), re-injects faults that stay with a node or a workload, and records each."""

    def __init__(self, core: Core, scheduler: SimulatedScheduler, trainer: Trainer) -> None:
        self.core = core
        self.scheduler = scheduler
        self.trainer = trainer
        self.rng = seeded(core.config.seed, "faults")
        self.faults: list[InjectedFault] = []
        self.listeners: list[FaultListener] = []

    # Scenes reach the trainer through these two.
    def halt(self, run: Run, phase: Phase) -> None:
        self.trainer.halt(run, phase)

    def slow_down(self, job: Job, run: Run, factor: float) -> None:
        self.trainer.slow_down(job, run, factor)

    def arm(self, job: Job, run: Run) -> None:
        """Schedule what will go wrong with a freshly started attempt."""
        t, queue = self.core.clock.t, self.core.queue
        self._schedule_hazard(job, run)
        broken = next((node for node in run.nodes if node.defect is not None), None)
        if broken is not None:
            queue.push(t + self.rng.uniform(20.0, 90.0), self._recur, job, run.token, broken)
        persistent = job.workload.persistent
        if persistent is not None:
            early = persistent.key in ("config_key_error", "missing_module")
            delay = self.rng.uniform(15.0, 40.0) if early else self.rng.uniform(180.0, 900.0)
            queue.push(t + delay, self._persist, job, run.token)
        queue.push(t + self.core.config.time_limit_s, self._time_limit, job, run.token)

    def fire(self, job: Job, run: Run, entry: FaultEntry, node: Node, gpu: int) -> InjectedFault:
        """Inject ``entry`` on ``node``/``gpu`` of this attempt now, and record it."""
        fault = self._record(job, entry, node, gpu)
        if entry.sticky:
            node.defect = Defect(entry, gpu)
        if entry.persistent:
            job.workload.persistent = entry
        SCRIPTS[entry.script](Scene(self, job, run, entry, node, gpu))
        for listener in self.listeners:
            listener(fault, job)
        return fault

    # -- inside -----------------------------------------------------------------------------

    def _schedule_hazard(self, job: Job, run: Run) -> None:
        weight = sum(node.weight for node in run.nodes)
        rate = self.core.config.fault_rate * weight / 3600.0
        if rate > 0:
            at = self.core.clock.t + self.rng.expovariate(rate)
            self.core.queue.push(at, self._hazard, job, run.token)

    def _live(self, job: Job, token: int) -> Run | None:
        run = job.run
        if run is None or run.token != token or run.phase not in _RUNNING:
            return None
        return run

    def _hazard(self, job: Job, token: int) -> None:
        run = self._live(job, token)
        if run is None:
            return
        entry = draw_entry(self.rng)
        while entry.kind is FaultKind.STRAGGLER and run.slow > 1.0:
            entry = draw_entry(self.rng)  # an attempt is already as slow as its slowest node
        node = self._pick_node(run, entry)
        self.fire(job, run, entry, node, self.rng.randrange(node.gpus))
        if run.phase in _RUNNING:
            self._schedule_hazard(job, run)

    def _pick_node(self, run: Run, entry: FaultEntry) -> Node:
        if entry.blames_host:
            # Bad nodes fault more often, so hardware faults land on them more often.
            return self.rng.choices(run.nodes, [node.weight for node in run.nodes])[0]
        return self.rng.choice(run.nodes)

    def _recur(self, job: Job, token: int, node: Node) -> None:
        run, defect = self._live(job, token), node.defect
        if run is None or defect is None:
            return
        if defect.entry.kind is FaultKind.STRAGGLER and run.slow > 1.0:
            return
        self.fire(job, run, defect.entry, node, defect.gpu)

    def _persist(self, job: Job, token: int) -> None:
        run, entry = self._live(job, token), job.workload.persistent
        if run is not None and entry is not None:
            self.fire(job, run, entry, run.nodes[0], 0)

    def _time_limit(self, job: Job, token: int) -> None:
        run = job.run
        if run is None or run.token != token or not run.alive:
            return
        if run.silent:
            # The silent hang is already on record; the time limit is only its consequence.
            SCRIPTS[TIME_LIMIT.script](Scene(self, job, run, TIME_LIMIT, run.nodes[0], 0))
            return
        self.fire(job, run, TIME_LIMIT, run.nodes[0], 0)

    def _record(self, job: Job, entry: FaultEntry, node: Node, gpu: int) -> InjectedFault:
        hosts = (node.name,) if entry.blames_host else ()
        where = f" on {node.name} GPU {gpu}" if entry.blames_host else ""
        fault = InjectedFault(
            fault_id=f"F{len(self.faults) + 1:05d}",
            at=self.core.clock.now,
            job_id=job.job_id,
            attempt=job.restart_count,
            kind=entry.kind,
            category=entry.category,
            attribution=entry.attribution,
            implicated_hosts=hosts,
            family=entry.family.value,
            description=entry.description + where,
            workload=job.workload.tag,
            entry=entry.key,
            rank=job.nodes.index(node) * node.gpus + gpu if entry.blames_host else None,
            gpu=gpu if entry.blames_host else None,
        )
        self.faults.append(fault)
        return fault
