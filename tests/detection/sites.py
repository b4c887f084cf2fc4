"""Clusters whose logs are Slurm output files on disk (and, if asked, each node's system log),
as at a real site, for scan tests."""

from __future__ import annotations

from pathlib import Path

from fleet import services
from fleet.models import Cluster


def files_cluster(
    tmp_path: Path, name: str = "site", *, node_logs: bool = False
) -> tuple[Cluster, Path, Path]:
    """The cluster, its job output directory and its node log directory (made only when
    ``node_logs``)."""
    logs, nodes = tmp_path / "slurm-logs", tmp_path / "nodes"
    logs.mkdir()
    source = {"type": "files", "path": str(logs)}
    if node_logs:
        nodes.mkdir()
        source["node_logs_path"] = str(nodes)
    cluster = services.create_cluster(
        "user:alice",
        name,
        telemetry={"logs": source, "metrics": {"type": "none"}},
        scheduler={"backend": "slurm"},
    )
    return cluster, logs, nodes
