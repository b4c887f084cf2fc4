"""GPU-hours lost and the last checkpoint, per workload and per cluster, read from the rows in a
few grouped queries (the arithmetic is ``detection.core.losses``). The REST API and ``/metrics``
read these; the workload page computes the same from the attempts it already shows."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from detection.core.constants import DEFAULT_GPUS_PER_NODE
from detection.core.losses import AttemptCostInput, GpuHoursLost, gpu_hours_lost
from fleet.models import ENDED_ATTEMPT_STATES, Attempt, Cluster, Node

from .models import AttemptMonitor

# An attempt that ended any other way than completing was interrupted.
FAILED_STATES = frozenset(ENDED_ATTEMPT_STATES - {"COMPLETED"})


@dataclass(frozen=True)
class WorkloadCost:
    lost: GpuHoursLost
    last_checkpoint_step: int | None = None
    last_checkpoint_at: datetime | None = None


def workload_costs(workload_ids: Iterable[int]) -> dict[int, WorkloadCost]:
    """Each workload's GPU-hours lost and its newest checkpoint (workloads with no attempt are
    left out)."""
    ids = list(workload_ids)
    attempts: list[dict[str, Any]] = [
        dict(row)
        for row in Attempt.objects.filter(workload_id__in=ids).values(
            "pk",
            "workload_id",
            "cluster_id",
            "state",
            "nodes",
            "started_at",
            "ended_at",
            "failed_at",
            "time_to_resume_s",
        )
    ]
    monitors: dict[int, dict[str, Any]] = {
        m["attempt_id"]: dict(m)
        for m in AttemptMonitor.objects.filter(attempt__workload_id__in=ids).values(
            "attempt_id", "last_progress_at", "checkpoint_step", "checkpoint_at"
        )
    }
    gpus = _gpus_of_nodes(attempts)
    by_workload: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for row in attempts:
        by_workload[row["workload_id"]].append(row)
    return {workload: _cost(rows, monitors, gpus) for workload, rows in by_workload.items()}


def cluster_gpu_hours_lost(cluster: Cluster) -> GpuHoursLost:
    """The sum over the cluster's workloads that had an interruption (the others lost none)."""
    interrupted = (
        Attempt.objects.filter(cluster=cluster, state__in=FAILED_STATES)
        .values_list("workload_id", flat=True)
        .distinct()
    )
    total = GpuHoursLost()
    for cost in workload_costs(interrupted).values():
        total += cost.lost
    return total


def _cost(
    rows: list[dict[str, Any]],
    monitors: dict[int, dict[str, Any]],
    gpus: dict[tuple[int, str], int],
) -> WorkloadCost:
    inputs = []
    newest: dict[str, Any] | None = None
    for row in rows:
        monitor = monitors.get(row["pk"], {})
        if monitor.get("checkpoint_at") and (
            newest is None or monitor["checkpoint_at"] > newest["checkpoint_at"]
        ):
            newest = monitor
        inputs.append(_input(row, monitor, gpus))
    lost = gpu_hours_lost(inputs, checkpoints_known=newest is not None)
    if newest is None:
        return WorkloadCost(lost)
    return WorkloadCost(lost, newest["checkpoint_step"], newest["checkpoint_at"])


def _input(
    row: dict[str, Any], monitor: dict[str, Any], gpus: dict[tuple[int, str], int]
) -> AttemptCostInput:
    return AttemptCostInput(
        # A node the scheduler never described, or with no GPU count, counts as a default one.
        gpus=sum(gpus.get((row["cluster_id"], n)) or DEFAULT_GPUS_PER_NODE for n in row["nodes"]),
        failed=row["state"] in FAILED_STATES,
        started_at=row["started_at"],
        ended_at=row["ended_at"],
        failed_at=row["failed_at"],
        last_progress_at=monitor.get("last_progress_at"),
        checkpoint_at=monitor.get("checkpoint_at"),
        time_to_resume_s=row["time_to_resume_s"],
    )


def _gpus_of_nodes(attempts: list[dict[str, Any]]) -> dict[tuple[int, str], int]:
    names = {n for row in attempts for n in row["nodes"]}
    clusters = {row["cluster_id"] for row in attempts}
    rows = Node.objects.filter(cluster_id__in=clusters, name__in=names).values_list(
        "cluster_id", "name", "gpus"
    )
    return {(cluster, name): count for cluster, name, count in rows}
