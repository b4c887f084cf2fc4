"""Runs the simulated cluster for a Cluster row: advances it, writes its jobs' output files and
nodes' system logs where a real site keeps them, and records its scheduler snapshots."""

from __future__ import annotations

from pathlib import Path

from django.conf import settings

from .models import Cluster

TAIL_BYTES = 16 * 1024


def output_dir(cluster: Cluster) -> Path:
    return Path(settings.SIMULATOR_OUTPUT_DIR) / cluster.name


def job_output_path(cluster: Cluster, job_id: str) -> Path:
    """Slurm's default output name: ``slurm-%j.out``, and ``slurm-%A_%a.out`` for array tasks."""
    return output_dir(cluster) / f"slurm-{job_id}.out"


def tail_job_output(cluster: Cluster, job_id: str, lines: int = 40) -> list[str]:
    """The last lines of a job's output file, read from its end so a huge file costs nothing."""
    path = job_output_path(cluster, job_id)
    try:
        with path.open("rb") as handle:
            handle.seek(0, 2)
            size = handle.tell()
            handle.seek(max(0, size - TAIL_BYTES))
            data = handle.read()
    except OSError:
        return []
    text = data.decode("utf-8", errors="replace").splitlines()
    return text[-lines:] if size <= TAIL_BYTES else text[1:][-lines:]
