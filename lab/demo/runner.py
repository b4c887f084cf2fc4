"""Runs the simulated cluster for a Cluster row: advances it, writes its jobs' output files and
nodes' system logs where a real site keeps them, publishes its GPU metrics as an exposition
file, and records its scheduler snapshots. Detection then reads all of it like a real site's."""

from __future__ import annotations

import os
import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from django.conf import settings

from detection.core.telemetry import LogLine, MetricSample
from detection.sources.config import ClusterSources, simulator_directory
from detection.sources.files import job_output_name
from detection.sources.memory import MemoryLogSource, MemoryMetrics
from fleet import services
from fleet.models import Attempt, Cluster
from lab.demo.slurm import SimulatedSlurm
from lab.simulator import ManualRecoveryBaseline, SimulatedCluster, SimulationConfig
from remediation.controller.reconciler import Controller
from remediation.local_advisor import LocalAdvisor, controller_token_for

ACTOR = "system:simulator"
# The leading number of a job id: array tasks (4200_3) count as their array's id.
_NUMERIC_JOB = re.compile(r"^(\d+)")


def output_dir(cluster: Cluster) -> Path:
    return simulator_directory(settings.SIMULATOR_OUTPUT_DIR, cluster.name)


def job_output_path(cluster: Cluster, job_id: str) -> Path:
    """Slurm's default output name: ``slurm-%j.out``, and ``slurm-%A_%a.out`` for array tasks."""
    return output_dir(cluster) / job_output_name(job_id)


def simulation_config(cluster: Cluster, start: datetime) -> SimulationConfig:
    """The simulator's configuration from ``cluster.scheduler["simulation"]``; job ids continue
    after the cluster's history, so a restarted simulator never reuses one."""
    raw: dict[str, Any] = dict(cluster.scheduler.get("simulation", {}))
    known = {f.name for f in fields(SimulationConfig)}
    unknown = set(raw) - known
    # Refused, not ignored: a misspelt setting would otherwise run silently on the default.
    if unknown:
        raise ValueError(f"unknown simulation settings: {', '.join(sorted(unknown))}")
    if "manual_recovery" in raw and raw["manual_recovery"] is not None:
        raw["manual_recovery"] = ManualRecoveryBaseline(**raw["manual_recovery"])
    # JSON has no tuples; the frozen config wants them.
    for name in ("nodes_per_job",):
        if name in raw:
            raw[name] = tuple(raw[name])
    raw.setdefault("first_job_id", _next_job_id(cluster))
    return SimulationConfig(start_time=start, **raw)


def _next_job_id(cluster: Cluster) -> int:
    ids = [
        int(m.group(1))
        for job_id in Attempt.objects.filter(cluster=cluster).values_list("job_id", flat=True)
        if (m := _NUMERIC_JOB.match(job_id))
    ]
    # A cluster with no history starts at 4200, the simulator's own default.
    return max(ids, default=4199) + 1


class SimulationRunner:
    """Drives one simulated cluster and writes what it produces where detection reads it.

    By default it writes files, as a real site would. ``in_process`` hands lines and metrics
    to detection directly instead (``sources``), keeping the simulator's clock: the benchmark
    and tests run simulated hours in seconds that way."""

    def __init__(
        self, cluster: Cluster, start: datetime | None = None, *, in_process: bool = False
    ) -> None:
        self.cluster = cluster
        self.simulator = SimulatedCluster(simulation_config(cluster, start or datetime.now(UTC)))
        self.directory = output_dir(cluster)
        self.sources: ClusterSources | None = None
        if in_process:
            self.sources = ClusterSources({"memory": MemoryLogSource()}, MemoryMetrics())
        else:
            (self.directory / "nodes").mkdir(parents=True, exist_ok=True)

    @property
    def now(self) -> datetime:
        return self.simulator.now

    def controller(self) -> Controller:
        """The cluster's Slurm Advisor Controller, acting on this simulator's scheduler. It
        reports no snapshots of its own: ``step`` records them."""
        advisor = LocalAdvisor(controller_token_for(self.cluster, "simulated"))
        return Controller(
            advisor,
            SimulatedSlurm(self.simulator),
            lambda: self.simulator.now,
            transport_name="simulated",
            report_state=False,
        )

    def step(self, seconds: float) -> services.SnapshotResult:
        """Advance ``seconds`` of simulated time, write the output and record the snapshot."""
        self.write_lines(self.simulator.advance(seconds))
        self.write_metrics(self.simulator.gpu_metrics())
        return services.record_snapshot(ACTOR, self.cluster, self.simulator.snapshot())

    def write_lines(self, lines: Iterable[LogLine]) -> None:
        if self.sources is not None:
            self.sources.logs["memory"].push(lines)  # type: ignore[attr-defined]
            return
        # Grouped per file, so each file is opened once per step, not once per line.
        by_file: dict[Path, list[str]] = defaultdict(list)
        for line in lines:
            if line.job_id:
                by_file[job_output_path(self.cluster, line.job_id)].append(line.text)
            elif line.host:
                by_file[self.directory / "nodes" / f"{line.host}.log"].append(line.text)
        for path, texts in by_file.items():
            with path.open("a", encoding="utf-8") as handle:
                handle.write("\n".join(texts) + "\n")

    def write_metrics(self, samples: Iterable[MetricSample]) -> None:
        """Replace the exposition file at once, so a reader never sees half a scrape."""
        if self.sources is not None:
            self.sources.metrics.publish(samples)  # type: ignore[union-attr]
            return
        target = self.directory / "metrics.prom"
        partial = target.with_suffix(".prom.tmp")
        partial.write_text("".join(_exposition_line(sample) for sample in samples))
        os.replace(partial, target)


def _exposition_line(sample: MetricSample) -> str:
    # Label names as dcgm-exporter spells them, Hostname and hpc_job included.
    labels = f'gpu="{sample.gpu}",Hostname="{sample.host}"'
    if sample.job_id:
        labels += f',hpc_job="{sample.job_id}"'
    return f"{sample.name}{{{labels}}} {sample.value:g}\n"
