"""The simulated cluster: the public face of the simulator.

Drive it with ``advance(seconds)``; read what a telemetry source would read with the returned
log lines, ``snapshot()`` and ``gpu_metrics()``; act on it through ``cluster.scheduler``; score
detectors against ``ground_truth``. Everything is deterministic for a given config and sequence
of calls.
"""

from __future__ import annotations

from datetime import datetime

from detection.core.telemetry import LogLine, MetricSample
from fleet.core.scheduler import ClusterSnapshot, JobState
from lab.simulator import failtext as ft

from .baseline import ManualOperator
from .catalogue import BY_KEY
from .config import SimulationConfig
from .core import Core
from .dcgm import scrape
from .events import seeded
from .faults import FaultInjector
from .records import InjectedFault, WorkloadProgress
from .scheduler import SimulatedScheduler, StopCause
from .state import Job, Node, Phase, Workload
from .training import Trainer
from .workloads import Template, WorkloadFactory, comment_for, tag_in

# How long after a workload finishes its owner submits the next one.
_RESUBMIT_S = 60.0
# Phases in which an attempt's processes still run and can take a fault.
_WORKING = (Phase.STARTUP, Phase.TRAIN)


def _partition_names(config: SimulationConfig) -> list[str]:
    parts = config.partitions
    total = sum(p.share for p in parts)
    counts = [max(1, round(config.nodes * p.share / total)) for p in parts]
    counts[0] = max(1, config.nodes - sum(counts[1:]))  # the first absorbs the rounding
    return [p.name for p, n in zip(parts, counts, strict=True) for _ in range(n)][: config.nodes]


def build_nodes(config: SimulationConfig) -> list[Node]:
    """Nodes in partition blocks; a seeded few are "bad" and fault far more often."""
    rng = seeded(config.seed, "nodes")
    bad = set(rng.sample(range(1, config.nodes + 1), round(config.nodes * config.bad_node_share)))
    nodes = []
    for index, partition in enumerate(_partition_names(config), start=1):
        weight = config.bad_node_factor if index in bad else 1.0
        node = Node(
            index,
            config.node_name_pattern.format(index=index),
            partition,
            config.gpus_per_node,
            weight,
        )
        # Up for days to weeks already, so uptime stamps look like those of a real fleet.
        node.boot_t = -rng.uniform(2 * 86400.0, 60 * 86400.0)
        nodes.append(node)
    return nodes


class SimulatedCluster:
    """A Slurm GPU cluster running training workloads that fail the way real ones do."""

    def __init__(self, config: SimulationConfig | None = None) -> None:
        self.config = config or SimulationConfig()
        self._core = Core(self.config)
        self._nodes = build_nodes(self.config)
        self.scheduler = SimulatedScheduler(
            self.config, self._nodes, self._core.clock, self._core.queue, self
        )
        self._trainer = Trainer(self._core, self.scheduler)
        self._injector = FaultInjector(self._core, self.scheduler, self._trainer)
        sizes = {
            p.name: sum(n.partition == p.name for n in self._nodes) for p in self.config.partitions
        }
        self._factory = WorkloadFactory(self.config, sizes)
        self._workloads: list[Workload] = []
        self.operator: ManualOperator | None = None
        if self.config.manual_recovery is not None:
            self.operator = ManualOperator(self._core, self.scheduler, self.config.manual_recovery)
            self._injector.listeners.append(self.operator.notice)
        # The cluster starts busy: the configured workloads are queued at time zero.
        self._fill()

    @property
    def now(self) -> datetime:
        return self._core.clock.now

    @property
    def ground_truth(self) -> list[InjectedFault]:
        """Every fault injected so far, in the order they began."""
        return list(self._injector.faults)

    def advance(self, seconds: float) -> list[LogLine]:
        """Move simulated time forward; return the output written meanwhile, in time order.

        Real time and accelerated time both come through here: a caller passes the wall-clock
        time that passed, times its speed-up.
        """
        if seconds < 0:
            raise ValueError("time only moves forward")
        clock, queue = self._core.clock, self._core.queue
        end = clock.t + seconds
        while (event := queue.pop_due(end)) is not None:
            # The clock jumps to each event in turn, so a handler's now is its own time.
            clock.t, handler, args = event
            handler(*args)
        clock.t = end
        out, self._core.out = self._core.out, []
        return out

    def snapshot(self) -> ClusterSnapshot:
        """What ``squeue --json`` and ``sinfo --json`` report now."""
        return self.scheduler.snapshot()

    def gpu_metrics(self) -> list[MetricSample]:
        """One scrape of every node's dcgm-exporter, now."""
        return scrape(self._nodes, self._core.clock.now, self._core.clock.t, self.config.seed)

    def progress(self) -> list[WorkloadProgress]:
        """Productive and wall GPU time of every workload, for effective training time."""
        return [self._trainer.progress(w) for w in self._workloads]

    def progress_of(self, job_id: str) -> WorkloadProgress:
        """The progress of the workload a job (any of its jobs) runs."""
        for workload in self._workloads:
            if job_id in workload.job_ids:
                return self._trainer.progress(workload)
        raise KeyError(job_id)

    def inject(
        self, job_id: str, fault: str, *, host: str | None = None, gpu: int = 0
    ) -> InjectedFault:
        """Inject the catalogue fault named ``fault`` into a running job now, on ``host`` (the
        job's first node by default) and ``gpu``. For demos and tests."""
        entry = BY_KEY.get(fault)
        if entry is None:
            raise ValueError(f"no fault {fault!r} in the catalogue")
        job = self.scheduler.job(job_id)
        run = job.run
        if job.state is not JobState.RUNNING or run is None or run.phase not in _WORKING:
            raise ValueError(f"job {job_id} is not running")
        node = run.nodes[0] if host is None else self.scheduler.node(host)
        if node not in run.nodes or not 0 <= gpu < node.gpus:
            raise ValueError(f"job {job_id} has no GPU {gpu} on {node.name}")
        return self._injector.fire(job, run, entry, node, gpu)

    # -- SchedulerHooks ---------------------------------------------------------------------

    def job_started(self, job: Job) -> None:
        run = self._trainer.start(job)
        self._injector.arm(job, run)

    def job_stopped(self, job: Job, cause: StopCause) -> None:
        run = job.run
        if run is not None and run.alive and cause in (StopCause.CANCELLED, StopCause.REQUEUED):
            due = "JOB REQUEUE" if cause is StopCause.REQUEUED else ""
            self._core.job_lines(job, ft.step_cancelled(run.voice, job.raw_id, self.now, due))
        self._trainer.stop(job)
        completed = job.final is not None and job.final[0] is JobState.COMPLETED
        # A failed job's workload stays live: it waits for a requeue, by a controller or by hand.
        if cause is StopCause.CANCELLED or completed:
            self._retire(job.workload)

    def workload_for(self, name: str, nodes: int, partition: str, comment: str) -> Workload:
        tag = tag_in(comment)
        known = next((w for w in self._workloads if tag is not None and w.tag == tag), None)
        # A finished tag, or one whose job is still live, gets a fresh workload: one job each.
        if known is None or known.finished_t is not None or self._busy(known):
            known = self._factory.named(name, partition, nodes, tag)
            self._workloads.append(known)
        known.partition, known.num_nodes = partition, nodes
        known.gpus = nodes * self.config.gpus_per_node
        return known

    # -- inside -----------------------------------------------------------------------------

    def _busy(self, workload: Workload) -> bool:
        job = workload.job
        return job is not None and job.state in (JobState.PENDING, JobState.RUNNING)

    def _retire(self, workload: Workload) -> None:
        if workload.finished_t is None:
            workload.finished_t = self._core.clock.t
        self._core.queue.push(self._core.clock.t + _RESUBMIT_S, self._fill)

    def _fill(self) -> None:
        """Submit workloads until the configured number is live again."""
        live = sum(1 for w in self._workloads if w.finished_t is None)
        while live < self.config.workloads:
            template = self._factory.pick()
            room = self.config.workloads - live
            if template.array and room >= 2:
                live += self._submit_array(template, self._factory.array_size(room))
            # An array drawn with a single slot left is skipped; a later draw fills the slot.
            elif not template.array:
                live += self._submit_one(self._factory.make(template))

    def _submit_one(self, workload: Workload) -> int:
        self._workloads.append(workload)
        job_id = self.scheduler.new_raw_id()
        self.scheduler.enqueue(workload, str(job_id), job_id, comment_for(workload.tag))
        return 1

    def _submit_array(self, template: Template, size: int) -> int:
        base = self.scheduler.new_array_id()
        first = self._factory.make(template)
        for task in range(size):
            workload = (
                first
                if task == 0
                else self._factory.make(template, first.partition, first.num_nodes)
            )
            self._workloads.append(workload)
            # Task 0 has the array's own id; later tasks get ids of their own, as slurmstepd prints.
            raw = base if task == 0 else self.scheduler.new_raw_id()
            self.scheduler.enqueue(workload, f"{base}_{task}", raw, comment_for(workload.tag))
        return size
