"""The whole loop on a simulated cluster in accelerated time: every poll interval of simulated
time the simulator advances and its scheduler snapshot is recorded, detection scans the lines
and metrics it produced (handed over in-process), advice is decided, and the Slurm Advisor
Controller acts on the simulated scheduler. The cluster is in action mode. Afterwards the stored
rows are read back as plain records for ``scoring``.

The runs without the loop (the manual-recovery baseline, and no recovery at all) use the same
configuration and seed on the simulator alone.
"""

from __future__ import annotations

from collections import Counter
from contextlib import suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from detection.models import Anomaly
from detection.scan import scan_cluster
from fleet import services
from fleet.models import Attempt, AuditEntry, Cluster, ClusterMode
from lab.bench import scoring
from lab.demo.runner import SimulationRunner
from lab.simulator import (
    ENTRIES,
    InjectedFault,
    ManualRecoveryBaseline,
    SchedulerError,
    SimulatedCluster,
    SimulationConfig,
)
from remediation.models import Advice, Milestone, NodeHealth, NodeHealthState
from remediation.services import advise_cluster, release_node

from .progress_bar import Tick

ACTOR = "system:bench"
START = datetime(2026, 1, 5, 8, 0, tzinfo=UTC)
# The controller's poll interval: each step of the loop advances this much simulated time.
POLL_S = 5.0
# Fixed, so the loop and the runs without it number their jobs alike for the same seed.
FIRST_JOB_ID = 4200
# The site's hardware team repairs a drained node and returns it to service this long after the
# drain. The run packs weeks of faults into hours, so repairs are quick too; without them the
# drained nodes fill the circuit breaker's budget for good and nothing can be isolated again.
REPAIR_S = 2 * 3600.0
# The circuit breaker's window (policy default: 60 minutes) shrinks by the same factor as the
# run packs faults (its fault rate over the simulator's default): the breaker then sees as many
# exclusions per window as it would on a real cluster of this size. Unscaled, the packed faults
# trip it every hour and jobs go back onto nodes known to be bad. The policy's floor is a minute.
BREAKER_WINDOW_MINUTES = 60.0
# Checked once a simulated minute: repairs need no finer timing.
REPAIR_EVERY_STEPS = 12
REPAIRER = "system:bench-repairs"
# The controller milestones that finish carrying out an advice.
FINAL_STEPS = ("release", "cancel")
# Faults that come back after every restart: only a stop helps.
UNFIXABLE = frozenset(entry.key for entry in ENTRIES if entry.persistent)


@dataclass(frozen=True)
class LoopSpec:
    """The simulated cluster the loop runs on, and for how long."""

    seed: int
    nodes: int
    workloads: int
    hours: float
    fault_rate: float
    detection: bool = True

    @property
    def breaker_window_minutes(self) -> float:
        packing = max(self.fault_rate / SimulationConfig.fault_rate, 1.0)
        return round(max(1.0, BREAKER_WINDOW_MINUTES / packing), 2)

    @property
    def steps(self) -> int:
        return max(1, round(self.hours * 3600 / POLL_S))

    def simulation(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "nodes": self.nodes,
            "workloads": self.workloads,
            "fault_rate": self.fault_rate,
            "first_job_id": FIRST_JOB_ID,
        }


@dataclass
class LoopOutcome:
    """What happened, as plain records."""

    faults: list[scoring.Fault]
    detected: list[scoring.Detected]
    resume_s: list[float]
    progress: list[tuple[float, float]]
    ended_at: datetime
    advice: dict[str, dict[str, int]] = field(default_factory=dict)
    circuit_breaker_refusals: int = 0
    repaired_nodes: int = 0


def enter_action_mode(cluster: Cluster) -> None:
    """Action mode at once. A real cluster gets there through reviews and a second person's
    approval; the benchmark's cluster lives in a throwaway database and measures acting."""
    cluster.mode = ClusterMode.ACTION
    cluster.save()


def simulated_cluster(
    name: str, simulation: dict[str, Any], policy: dict[str, Any] | None = None
) -> Cluster:
    cluster = services.create_cluster(
        ACTOR,
        name,
        scheduler={"backend": "simulated", "simulation": simulation},
        policy=policy or {},
    )
    enter_action_mode(cluster)
    return cluster


def run_loop(spec: LoopSpec, tick: Tick) -> LoopOutcome:
    """Run the loop for ``spec.hours`` of simulated time, one poll interval at a time."""
    policy = {"circuit_breaker_window_minutes": spec.breaker_window_minutes}
    cluster = simulated_cluster("bench-loop", spec.simulation(), policy)
    runner = SimulationRunner(cluster, start=START, in_process=True)
    controller = runner.controller()
    repaired = 0
    for step in range(spec.steps):
        runner.step(POLL_S)
        if spec.detection:
            scan_cluster(cluster, runner.now, runner.sources)
        advise_cluster(cluster, runner.now)
        controller.cycle()
        if step % REPAIR_EVERY_STEPS == 0:
            repaired += repair_drained(cluster, runner)
        tick((step + 1) / spec.steps)
    progress = [(p.productive_gpu_s, p.wall_gpu_s) for p in runner.simulator.progress()]
    return LoopOutcome(
        faults=[fault_record(f) for f in runner.simulator.ground_truth],
        detected=detected_records(cluster),
        resume_s=resume_times(cluster),
        progress=progress,
        ended_at=runner.now,
        advice=advice_counts(cluster),
        circuit_breaker_refusals=circuit_breaker_refusals(cluster),
        repaired_nodes=repaired,
    )


def repair_drained(cluster: Cluster, runner: SimulationRunner) -> int:
    """Nodes drained ``REPAIR_S`` ago are repaired (the simulator's resume clears a node's
    defect) and released in the console, with a reason, as a person would."""
    due = NodeHealth.objects.filter(
        cluster=cluster,
        state=NodeHealthState.DRAINED,
        drained_at__lte=runner.now - timedelta(seconds=REPAIR_S),
    )
    names = list(due.values_list("name", flat=True))
    for name in names:
        # A node already back in service (it rebooted, or someone resumed it) needs no resume.
        with suppress(SchedulerError):
            runner.simulator.scheduler.resume(name)
        release_node(
            REPAIRER,
            cluster,
            name,
            "repaired by the site's hardware team (benchmark)",
            now=runner.now,
        )
    return len(names)


def fault_record(fault: InjectedFault) -> scoring.Fault:
    return scoring.Fault(
        fault_id=fault.fault_id,
        job_id=fault.job_id,
        attempt=fault.attempt,
        kind=fault.kind.value,
        category=fault.category.value,
        attribution=fault.attribution.value,
        hosts=fault.implicated_hosts,
        at=fault.at,
        entry=fault.entry,
        unfixable=fault.entry in UNFIXABLE,
    )


def detected_records(cluster: Cluster) -> list[scoring.Detected]:
    """Every anomaly of the cluster with its advice's action and when it was carried out."""
    advice = {
        a.anomaly_id: (a.pk, a.action)
        for a in Advice.objects.filter(cluster=cluster).only("pk", "anomaly_id", "action")
    }
    done = _last_steps(cluster)
    # Audit entries are stamped on the wall clock: when each anomaly row was written.
    stored = dict(
        AuditEntry.objects.filter(cluster=cluster, verb="anomaly.detected").values_list(
            "object_id", "at"
        )
    )
    records = []
    for anomaly in Anomaly.objects.filter(cluster=cluster).select_related("attempt").order_by("pk"):
        advice_id, action = advice.get(anomaly.pk, (None, None))
        executed, recorded = done.get(advice_id or 0, (None, None))
        wall_start = stored.get(str(anomaly.pk))
        records.append(
            scoring.Detected(
                anomaly_id=anomaly.pk,
                job_id=anomaly.attempt.job_id,
                attempt=anomaly.attempt.attempt_index,
                family=anomaly.family,
                kind=anomaly.kind,
                category=anomaly.category,
                attribution=anomaly.attribution,
                hosts=tuple(anomaly.implicated_hosts),
                first_evidence_at=anomaly.first_evidence_at,
                detected_at=anomaly.detected_at,
                action=action,
                executed_at=executed,
                action_wall_s=(recorded - wall_start).total_seconds()
                if recorded and wall_start
                else None,
            )
        )
    return records


def _last_steps(cluster: Cluster) -> dict[int, tuple[datetime, datetime]]:
    """Per advice, its last release or cancel: when (simulated clock) and when it was
    recorded (wall clock)."""
    done: dict[int, tuple[datetime, datetime]] = {}
    # In order, so an advice's last release or cancel overwrites its earlier ones.
    finals = Milestone.objects.filter(cluster=cluster, action__in=FINAL_STEPS).order_by("at", "pk")
    for advice_id, at, recorded in finals.values_list("advice_id", "at", "recorded_at"):
        done[advice_id] = (at, recorded)
    return done


def resume_times(cluster: Cluster) -> list[float]:
    values = Attempt.objects.filter(cluster=cluster, time_to_resume_s__isnull=False)
    listed = values.order_by("pk").values_list("time_to_resume_s", flat=True)
    return [float(v) for v in listed if v is not None]


def advice_counts(cluster: Cluster) -> dict[str, dict[str, int]]:
    rows = list(Advice.objects.filter(cluster=cluster).values_list("action", "state"))
    return {
        "by_action": dict(sorted(Counter(action for action, _ in rows).items())),
        "by_state": dict(sorted(Counter(state for _, state in rows).items())),
    }


def circuit_breaker_refusals(cluster: Cluster) -> int:
    """Advice whose reasons say the circuit breaker kept a node in service."""
    reasons = Advice.objects.filter(cluster=cluster).values_list("reasons", flat=True)
    return sum(1 for listed in reasons if any("circuit breaker" in r for r in listed))


def without_the_loop(spec: LoopSpec, manual: ManualRecoveryBaseline | None) -> float | None:
    """Effective training time of the same cluster (same configuration and seed) with no
    controller: a manual operator's recovery, or none at all."""
    config = SimulationConfig(start_time=START, manual_recovery=manual, **spec.simulation())
    simulator = SimulatedCluster(config)
    for _ in range(spec.steps):
        simulator.advance(POLL_S)
    progress = simulator.progress()
    return scoring.effective_training_time((p.productive_gpu_s, p.wall_gpu_s) for p in progress)


def scoring_cutoff(outcome: LoopOutcome, settle_s: float) -> datetime:
    return outcome.ended_at - timedelta(seconds=settle_s)
