"""Builds a cluster's telemetry sources from its ``telemetry`` settings document.

``logs.type``: ``simulated`` (the files the simulated cluster writes), ``files`` (a directory of
Slurm output files, optionally a directory of nodes' system logs), ``loki`` or ``victorialogs``.
``metrics.type``: ``simulated`` (the simulator's exposition file), ``prometheus`` or ``none``.
Plain Python: the caller passes the document and where the simulated cluster writes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from detection.sources import (
    FilesConfig,
    HttpAuth,
    JobOutputFiles,
    LabelNames,
    LogSource,
    LokiConfig,
    LokiSource,
    MetricScrape,
    PrometheusConfig,
    PrometheusSource,
    VictoriaLogsConfig,
    VictoriaLogsSource,
)

from .textfile import TextfileConfig, TextfileMetrics

# Node logs are named after their host (gpu-node-02.log): the "job" group carries the host.
NODE_LOG_NAMES = r"^(?P<job>[A-Za-z0-9._-]+)\.log$"
LOG_SOURCE_TYPES = ("simulated", "files", "loki", "victorialogs")
METRICS_SOURCE_TYPES = ("simulated", "prometheus", "none")


class MetricsSource(Protocol):
    def scrape(self, now: Any = None) -> MetricScrape: ...


@dataclass
class ClusterSources:
    """The log sources (by a stable name, which keys their cursors) and the metrics source."""

    logs: dict[str, LogSource] = field(default_factory=dict)
    metrics: MetricsSource | None = None


def check_telemetry(telemetry: dict[str, Any]) -> list[str]:
    """What is wrong with a telemetry document, one entry per problem (empty: nothing)."""
    # Types only: the rest of each section is read when the sources are built.
    logs = telemetry.get("logs", {}).get("type", "simulated")
    metrics = telemetry.get("metrics", {}).get("type", "simulated")
    problems = []
    if logs not in LOG_SOURCE_TYPES:
        problems.append(f"logs.type {logs!r} is not one of {', '.join(LOG_SOURCE_TYPES)}")
    if metrics not in METRICS_SOURCE_TYPES:
        problems.append(f"metrics.type {metrics!r} is not one of {', '.join(METRICS_SOURCE_TYPES)}")
    return problems


def simulator_directory(simulator_root: Path | str, cluster_name: str) -> Path:
    """Where the simulated cluster of this name writes its jobs' and nodes' logs."""
    return Path(simulator_root) / cluster_name


def build_sources(
    cluster_name: str, telemetry: dict[str, Any], simulator_root: Path | str
) -> ClusterSources:
    """The sources a telemetry document names, keyed by a stable name (their cursors' key)."""
    directory = simulator_directory(simulator_root, cluster_name)
    return ClusterSources(
        # No section means the simulated cluster, so a new cluster works before it is configured.
        logs=_log_sources(directory, telemetry.get("logs") or {"type": "simulated"}),
        metrics=_metrics_source(directory, telemetry.get("metrics") or {"type": "simulated"}),
    )


def _log_sources(directory: Path, spec: dict[str, Any]) -> dict[str, LogSource]:
    kind = spec.get("type", "simulated")
    if kind == "simulated":
        return {
            # These names key the cursors: renaming one loses the place its source was read to.
            "job-files": JobOutputFiles(FilesConfig(directory=str(directory))),
            "node-logs": _node_logs(str(directory / "nodes")),
        }
    if kind == "files":
        sources: dict[str, LogSource] = {
            "job-files": JobOutputFiles(
                FilesConfig(
                    directory=spec["path"],
                    pattern=spec.get("pattern", "slurm-*.out"),
                    # Empty means the default: a regex without a job group would be refused.
                    name_regex=spec.get("name_regex") or FilesConfig.name_regex,
                )
            )
        }
        if spec.get("node_logs_path"):
            sources["node-logs"] = _node_logs(spec["node_logs_path"])
        return sources
    if kind == "loki":
        return {"loki": LokiSource(LokiConfig(base_url=spec["url"], **_remote(spec)))}
    if kind == "victorialogs":
        return {
            "victorialogs": VictoriaLogsSource(
                VictoriaLogsConfig(base_url=spec["url"], **_remote(spec))
            )
        }
    raise ValueError(f"unknown log source type {kind!r}")


def _node_logs(directory: str) -> JobOutputFiles:
    return JobOutputFiles(
        FilesConfig(
            directory=directory, pattern="*.log", name_regex=NODE_LOG_NAMES, names_hosts=True
        )
    )


def _remote(spec: dict[str, Any]) -> dict[str, Any]:
    options: dict[str, Any] = {}
    if spec.get("query"):
        options["query"] = spec["query"]
    if spec.get("labels"):
        options["labels"] = _label_names(spec["labels"])
    token = _secret(spec, "token")
    if token or spec.get("username"):
        options["auth"] = HttpAuth(
            username=spec.get("username"), password=_secret(spec, "password"), bearer_token=token
        )
    # Loki's X-Scope-OrgID; VictoriaLogs names its tenant by account and project ids instead.
    if spec.get("tenant") and spec["type"] == "loki":
        options["tenant"] = spec["tenant"]
    return options


def _label_names(spec: dict[str, Any]) -> LabelNames:
    """Label names as a site configures them: lists tried in order, or one name."""
    defaults = LabelNames()

    def names(key: str) -> tuple[str, ...]:
        value = spec.get(key, getattr(defaults, key))
        return (value,) if isinstance(value, str) else tuple(value)

    return LabelNames(
        job_id=names("job_id"),
        host=names("host"),
        filename=names("filename"),
        filename_regex=spec.get("filename_regex"),
    )


def _secret(spec: dict[str, Any], name: str) -> str | None:
    """A credential inline, or (better) from a file named by ``<name>_file``."""
    # A file keeps the secret out of the settings, which the audit trail records on each change.
    if spec.get(f"{name}_file"):
        # Stripped: the file's trailing newline is not part of the secret.
        return Path(spec[f"{name}_file"]).read_text().strip()
    value = spec.get(name)
    return str(value) if value else None


def _metrics_source(directory: Path, spec: dict[str, Any]) -> MetricsSource | None:
    kind = spec.get("type", "simulated")
    if kind == "simulated":
        return TextfileMetrics(TextfileConfig(path=str(directory / "metrics.prom")))
    if kind == "prometheus":
        return PrometheusSource(
            PrometheusConfig(
                base_url=spec["url"],
                selector=spec.get("selector", ""),
                job_label=spec.get("job_label", "hpc_job"),
            )
        )
    # "none": no metrics; detection works from the logs and the scheduler alone.
    return None
