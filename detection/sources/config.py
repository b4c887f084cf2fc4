"""Builds a cluster's telemetry sources from its ``telemetry`` settings document.

``logs.type``: ``simulated`` (the files the simulated cluster writes), ``files`` (a directory of
Slurm output files, optionally a directory of nodes' system logs), ``loki`` or ``victorialogs``.
``metrics.type``: ``simulated`` (the simulator's exposition file), ``prometheus`` or ``none``.
Remote sources take ``url``, ``timeout`` (seconds, default 10), and ``username``,
``password``, ``token`` and ``ca`` (the PEM of a site's own certificate authority): those by
reference only (``{"env": NAME}`` or ``{"file": NAME}``, see ``fleet.core.outbound``).
Plain Python: the caller passes the document, where the simulated cluster writes, and the
site's secret store and outbound hosts.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from detection.sources import (
    FilesConfig,
    HttpAuth,
    JobOutputFiles,
    LabelNames,
    LogBatch,
    LogSource,
    LokiConfig,
    LokiSource,
    MetricScrape,
    PrometheusConfig,
    PrometheusSource,
    SourceUnavailable,
    VictoriaLogsConfig,
    VictoriaLogsSource,
)
from fleet.core.outbound import (
    SECRET_KEYS,
    SecretStore,
    SecretUnavailable,
    secret_key_problems,
    url_problem,
)

from .textfile import TextfileConfig, TextfileMetrics

# Node logs are named after their host (gpu-node-02.log): the "job" group carries the host.
NODE_LOG_NAMES = r"^(?P<job>[A-Za-z0-9._-]+)\.log$"
LOG_SOURCE_TYPES = ("simulated", "files", "loki", "victorialogs")
# The cursor key of each type's (first) log source.
LOG_SOURCE_NAMES = {"loki": "loki", "victorialogs": "victorialogs"}
METRICS_SOURCE_TYPES = ("simulated", "prometheus", "none")


class MetricsSource(Protocol):
    def scrape(self, now: Any = None) -> MetricScrape: ...


@dataclass
class ClusterSources:
    """The log sources (by a stable name, which keys their cursors) and the metrics source."""

    logs: dict[str, LogSource] = field(default_factory=dict)
    metrics: MetricsSource | None = None


# What each source type reads from its section, besides ``type``: a checker per key, each
# returning a problem or None. ``REQUIRED`` keys must be present.
Check = Callable[[Any], "str | None"]


def _string(value: Any) -> str | None:
    return None if isinstance(value, str) else "must be a string"


def _path(value: Any) -> str | None:
    return None if isinstance(value, str) and value.strip() else "must be a non-empty string"


def _name_regex(value: Any) -> str | None:
    """A file-name regex with a ``job`` group, as ``job_id_from_filename`` needs (empty: the
    default)."""
    if not isinstance(value, str):
        return "must be a string"
    try:
        pattern = re.compile(value)
    except re.error as exc:
        return f"is not a valid regular expression ({exc})"
    return None if not value or "job" in pattern.groupindex else "needs a (?P<job>...) group"


def _names(value: Any) -> str | None:
    ok = isinstance(value, str) or (
        isinstance(value, list) and value and all(isinstance(v, str) for v in value)
    )
    return None if ok else "must be a string or a list of strings"


def _labels(value: Any) -> str | None:
    if not isinstance(value, dict):
        return "must be a JSON object of job_id, host, filename, filename_regex"
    unknown = set(value) - {"job_id", "host", "filename", "filename_regex"}
    if unknown:
        return f"has unknown keys {', '.join(sorted(unknown))}"
    problems = [
        f"{key} {problem}"
        for key in ("job_id", "host", "filename")
        if key in value and (problem := _names(value[key]))
    ]
    if "filename_regex" in value and (problem := _name_regex(value["filename_regex"])):
        problems.append(f"filename_regex {problem}")
    return "; ".join(problems) or None


# Secrets and URLs are checked apart, with the site's secret store and outbound hosts.
def _any(value: Any) -> str | None:
    return None


MAX_TIMEOUT_SECONDS = 120


def _timeout(value: Any) -> str | None:
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if ok and 0 < value <= MAX_TIMEOUT_SECONDS:
        return None
    return f"must be a number of seconds above 0 and at most {MAX_TIMEOUT_SECONDS}"


# ``ca`` is a reference too (checked with the secrets): a free path would read any file.
AUTH: dict[str, Check] = {
    "username": _string,
    "password": _any,
    "token": _any,
    "ca": _any,
    "timeout": _timeout,
}
REMOTE: dict[str, Check] = {"url": _any, "query": _string, "labels": _labels, **AUTH}
FIELDS: dict[tuple[str, str], dict[str, Check]] = {
    ("logs", "simulated"): {},
    ("logs", "files"): {
        "path": _path,
        "pattern": _path,
        "name_regex": _name_regex,
        "node_logs_path": _string,
    },
    ("logs", "loki"): {**REMOTE, "tenant": _string},
    ("logs", "victorialogs"): REMOTE,
    ("metrics", "simulated"): {},
    ("metrics", "none"): {},
    ("metrics", "prometheus"): {
        "url": _any,
        "selector": _string,
        "job_label": _path,
        **AUTH,
    },
}
REQUIRED = {("logs", "files"): ("path",), ("logs", "loki"): ("url",)}
REQUIRED |= {("logs", "victorialogs"): ("url",), ("metrics", "prometheus"): ("url",)}
SECTION_TYPES = {"logs": LOG_SOURCE_TYPES, "metrics": METRICS_SOURCE_TYPES}


def check_telemetry(
    telemetry: dict[str, Any],
    secrets: SecretStore | None = None,
    allowed_hosts: Sequence[str] = (),
    backend: str = "simulated",
) -> list[str]:
    """What is wrong with a telemetry document, one entry per problem, each naming its key
    (empty: nothing). Every section is read as the sources will read it, so a document accepted
    here builds; secrets must be references ``secrets`` can read, URLs on ``allowed_hosts``.
    Only a simulated cluster (``backend``) may read the simulator's files."""
    secrets = secrets or SecretStore()
    problems = [
        f"{name} is not a telemetry section (logs, metrics)"
        for name in telemetry
        if name not in SECTION_TYPES
    ]
    for section, types in SECTION_TYPES.items():
        spec = telemetry.get(section)
        if spec is None:
            continue
        if not isinstance(spec, dict):
            problems.append(f"{section} must be a JSON object")
            continue
        if "type" not in spec and backend != "simulated":
            problems.append(f"{section}.type is required ({', '.join(types[1:])})")
            continue
        kind = spec.get("type", "simulated")
        if kind not in types:
            problems.append(f"{section}.type {kind!r} is not one of {', '.join(types)}")
            continue
        if kind == "simulated" and backend != "simulated":
            others = ", ".join(t for t in types if t != "simulated")
            problems.append(
                f"{section}.type simulated reads the simulated cluster's files; "
                f"a {backend} cluster names its own source ({others})"
            )
            continue
        problems.extend(_section_problems(section, kind, spec, secrets, allowed_hosts))
    return problems


def _section_problems(
    section: str,
    kind: str,
    spec: dict[str, Any],
    secrets: SecretStore,
    allowed_hosts: Sequence[str],
) -> list[str]:
    fields = FIELDS[(section, kind)]
    problems = [
        f"{section}.{key} is required for a {kind} source"
        for key in REQUIRED.get((section, kind), ())
        if key not in spec
    ]
    # Secrets and free paths first, under whatever key they hide.
    problems.extend(secret_key_problems(spec, section, secrets))
    for key, value in spec.items():
        # Reported above: a free path, or a secret (a known key) that is not a good reference.
        if key == "type" or key.endswith("_file") or (key in SECRET_KEYS and key in fields):
            continue
        if key not in fields:
            known = ", ".join(sorted(fields)) or "nothing but type"
            problems.append(f"{section}.{key} is not a setting of a {kind} source ({known})")
        elif key == "url":
            if problem := url_problem(value, allowed_hosts):
                problems.append(f"{section}.url: {problem}")
        elif key == "ca":
            if problem := secrets.problem(value):
                problems.append(f"{section}.ca: {problem}")
        elif problem := fields[key](value):
            problems.append(f"{section}.{key} {problem}")
    return problems


def simulator_directory(simulator_root: Path | str, cluster_name: str) -> Path:
    """Where the simulated cluster of this name writes its jobs' and nodes' logs."""
    return Path(simulator_root) / cluster_name


def build_sources(
    cluster_name: str,
    telemetry: dict[str, Any],
    simulator_root: Path | str,
    secrets: SecretStore | None = None,
    allowed_hosts: Sequence[str] = (),
    backend: str = "simulated",
) -> ClusterSources:
    """The sources a telemetry document names, keyed by a stable name (their cursors' key).

    A section that does not pass ``check_telemetry`` now (a row saved before a rule, a host the
    site has since left off its list) or whose secret cannot be read becomes a source that
    reports why on every read: nothing is read or sent on its behalf."""
    directory = simulator_directory(simulator_root, cluster_name)
    site = _Site(secrets or SecretStore(), tuple(allowed_hosts), backend)
    # No section means the simulator's files on a simulated cluster, and no source at all on a
    # real one: never the simulator's directory under a real cluster's name.
    sources = ClusterSources()
    if logs := telemetry.get("logs") or _simulated(backend):
        sources.logs = site.guarded("logs", logs, lambda: _log_sources(directory, logs, site))
    if metrics := telemetry.get("metrics") or _simulated(backend):
        sources.metrics = site.guarded(
            "metrics", metrics, lambda: _metrics_source(directory, metrics, site)
        )
    return sources


def _simulated(backend: str) -> dict[str, Any] | None:
    return {"type": "simulated"} if backend == "simulated" else None


@dataclass(frozen=True)
class _Site:
    secrets: SecretStore
    allowed_hosts: tuple[str, ...]
    backend: str = "simulated"

    def guarded(self, section: str, spec: Any, build: Callable[[], Any]) -> Any:
        kind = spec.get("type", "simulated") if isinstance(spec, dict) else "?"
        name = LOG_SOURCE_NAMES.get(kind, "job-files") if section == "logs" else "metrics"
        problems = check_telemetry({section: spec}, self.secrets, self.allowed_hosts, self.backend)
        try:
            if not problems:
                return build()
        # A secret that cannot be read, or a CA that is not a certificate.
        except (SecretUnavailable, ValueError) as exc:
            problems = [f"{section}: {exc}"]
        source = Unavailable(name, "; ".join(problems))
        return {name: source} if section == "logs" else source

    def secret(self, spec: dict[str, Any], name: str) -> str | None:
        # Only references reach here: check_telemetry refused anything else.
        return self.secrets.read(spec[name]) if spec.get(name) else None


class Unavailable:
    """A source that cannot be built as configured: every read says why."""

    def __init__(self, name: str, reason: str) -> None:
        self.name, self.reason = name, reason

    def fetch(self, cursor: dict[str, Any] | None, now: Any) -> LogBatch:
        raise SourceUnavailable(self.name, self.reason)

    def scrape(self, now: Any = None) -> MetricScrape:
        raise SourceUnavailable(self.name, self.reason)

    def output_tail(self, *args: Any) -> list[str]:
        raise SourceUnavailable(self.name, self.reason)


def _log_sources(directory: Path, spec: dict[str, Any], site: _Site) -> dict[str, LogSource]:
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
        return {"loki": LokiSource(LokiConfig(base_url=spec["url"], **_remote(spec, site)))}
    if kind == "victorialogs":
        return {
            "victorialogs": VictoriaLogsSource(
                VictoriaLogsConfig(base_url=spec["url"], **_remote(spec, site))
            )
        }
    raise ValueError(f"unknown log source type {kind!r}")


def _node_logs(directory: str) -> JobOutputFiles:
    return JobOutputFiles(
        FilesConfig(
            directory=directory, pattern="*.log", name_regex=NODE_LOG_NAMES, names_hosts=True
        )
    )


def _remote(spec: dict[str, Any], site: _Site) -> dict[str, Any]:
    options: dict[str, Any] = _auth(spec, site)
    if spec.get("query"):
        options["query"] = spec["query"]
    if spec.get("labels"):
        options["labels"] = _label_names(spec["labels"])
    # Loki's X-Scope-OrgID; VictoriaLogs names its tenant by account and project ids instead.
    if spec.get("tenant") and spec["type"] == "loki":
        options["tenant"] = spec["tenant"]
    return options


def _auth(spec: dict[str, Any], site: _Site) -> dict[str, Any]:
    options: dict[str, Any] = {"allowed_hosts": site.allowed_hosts}
    if "timeout" in spec:
        options["timeout"] = float(spec["timeout"])
    if spec.get("ca"):
        options["ca_pem"] = site.secret(spec, "ca")
    token = site.secret(spec, "token")
    if token or spec.get("username"):
        options["auth"] = HttpAuth(
            username=spec.get("username"),
            password=site.secret(spec, "password"),
            bearer_token=token,
        )
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


def _metrics_source(directory: Path, spec: dict[str, Any], site: _Site) -> MetricsSource | None:
    kind = spec.get("type", "simulated")
    if kind == "simulated":
        return TextfileMetrics(TextfileConfig(path=str(directory / "metrics.prom")))
    if kind == "prometheus":
        return PrometheusSource(
            PrometheusConfig(
                base_url=spec["url"],
                selector=spec.get("selector", ""),
                job_label=spec.get("job_label", "hpc_job"),
                **_auth(spec, site),
            )
        )
    # "none": no metrics; detection works from the logs and the scheduler alone.
    return None
