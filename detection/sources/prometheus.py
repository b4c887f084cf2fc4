"""DCGM-exporter GPU metrics from Prometheus (or VictoriaMetrics, which answers the same API).

Pulled each cycle, so no cursor. Pitfalls handled (see the telemetry note):
- the host label is ``Hostname`` in released dcgm-exporter and ``hostname`` on its main branch;
- the Slurm job is ``hpc_job``; Prometheus' own ``job`` label is the scrape-config name;
- ``DCGM_FI_DEV_XID_ERRORS`` is the code of the *last* Xid, not a count, and its ``err_code`` /
  ``err_msg`` labels change with the value (a new series), so it is read as
  ``max without (err_code, err_msg) (...)``;
- instant-query timestamps are floats in Prometheus and integers in VictoriaMetrics;
- metrics that are off by default (ECC, SM_ACTIVE) are simply absent, which is not an error.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from detection.core.telemetry import DCGM_METRICS, PCI_LABEL, Dcgm, MetricSample
from detection.sources.base import check_job_id
from detection.sources.httpclient import HttpAuth, HttpClient

XID_METRIC = Dcgm.XID_ERRORS.value
MAX_POINTS_PER_SERIES = 11_000  # Prometheus refuses range queries with more
_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")  # so the names can go in a regex matcher


@dataclass(frozen=True)
class PrometheusConfig:
    """How to reach Prometheus and how to read dcgm-exporter's labels.

    ``selector`` adds label matchers to every query (``cluster="a"``); ``host_labels`` are tried
    in order; a series with none of them, or without a numeric ``gpu_label``, is dropped and
    counted in ``MetricScrape.dropped``.
    """

    base_url: str
    metrics: tuple[str, ...] = DCGM_METRICS
    selector: str = ""
    job_label: str = "hpc_job"
    host_labels: tuple[str, ...] = ("Hostname", "hostname")
    gpu_label: str = "gpu"
    timeout: float = 10.0
    auth: HttpAuth | None = None
    max_response_bytes: int = 32 * 1024 * 1024
    allowed_hosts: tuple[str, ...] = ()  # the site's OUTBOUND_ALLOWED_HOSTS; empty: any
    ca_pem: str | None = None  # trust these CA certificates (PEM) instead of the system's


@dataclass(frozen=True)
class MetricScrape:
    """One instant read of the GPU metrics: the samples, and how many series had no host/GPU."""

    at: datetime
    samples: tuple[MetricSample, ...]
    dropped: int = 0


@dataclass
class _Parsed:
    samples: list[MetricSample] = field(default_factory=list)
    dropped: int = 0


class PrometheusSource:
    """Instant and range queries of DCGM-exporter metrics, turned into ``MetricSample``s."""

    def __init__(self, config: PrometheusConfig) -> None:
        bad = [m for m in config.metrics if not _METRIC_NAME.fullmatch(m)]
        if bad:
            raise ValueError(f"not Prometheus metric names: {bad}")
        self.config = config
        self.client = HttpClient.for_config("prometheus", config)

    @property
    def name(self) -> str:
        return self.client.name

    def scrape(self, now: datetime | None = None, job_id: str | None = None) -> MetricScrape:
        """The latest value of every configured metric (at ``now`` if given), optionally for one
        Slurm job. Raises ``SourceUnavailable``."""
        params = [("time", _epoch(now))] if now is not None else []
        out = _Parsed()
        for query in self.queries(job_id):
            self._read(out, "/api/v1/query", [("query", query), *params], ranged=False)
        return MetricScrape(now or datetime.now(UTC), tuple(out.samples), out.dropped)

    def range_samples(
        self, job_id: str, start: datetime, end: datetime, step: timedelta
    ) -> tuple[MetricSample, ...]:
        """One job's series over ``[start, end]`` every ``step``, ordered by metric, host, GPU
        and time. Raises ``ValueError`` for a window Prometheus would refuse."""
        seconds, window = step.total_seconds(), (end - start).total_seconds()
        if seconds <= 0 or window < 0 or window / seconds > MAX_POINTS_PER_SERIES:
            raise ValueError(
                f"{start}..{end} every {step}: need start <= end and at most "
                f"{MAX_POINTS_PER_SERIES} points"
            )
        params = [("start", _epoch(start)), ("end", _epoch(end)), ("step", f"{seconds:g}")]
        out = _Parsed()
        for query in self.queries(job_id):
            self._read(out, "/api/v1/query_range", [("query", query), *params], ranged=True)
        return tuple(sorted(out.samples, key=lambda s: (s.name, s.host, s.gpu, s.at)))

    def queries(self, job_id: str | None = None) -> list[str]:
        """The PromQL this source sends: one selector for the gauges, one aggregation for Xid."""
        matchers = [m for m in (self.config.selector, _job_matcher(self.config, job_id)) if m]
        extra = "".join(f", {m}" for m in matchers)
        gauges = [m for m in self.config.metrics if m != XID_METRIC]
        queries = []
        if gauges:
            queries.append(f'{{__name__=~"{"|".join(gauges)}"{extra}}}')
        if XID_METRIC in self.config.metrics:
            # Aggregation drops __name__; label_replace puts it back so one parser reads both.
            inner = f"max without (err_code, err_msg) ({XID_METRIC}{{{extra.lstrip(', ')}}})"
            queries.append(f'label_replace({inner}, "__name__", "{XID_METRIC}", "", "")')
        return queries

    def _read(self, out: _Parsed, path: str, params: list[tuple[str, str]], ranged: bool) -> None:
        doc = self.client.get_json(path, params)
        try:
            for series in _result(doc, "matrix" if ranged else "vector"):
                points = _list(series.get("values"), "values") if ranged else [series.get("value")]
                for point in points:
                    self._add_point(out, series, point)
        except ValueError as exc:
            raise self.client.unavailable(f"answered an unexpected response: {exc}") from exc

    def _add_point(self, out: _Parsed, series: dict[str, Any], point: Any) -> None:
        labels = series["metric"]
        host = next((labels[h] for h in self.config.host_labels if labels.get(h)), None)
        gpu = labels.get(self.config.gpu_label, "")
        if host is None or not str(gpu).isdigit():
            out.dropped += 1  # NVSwitch or CPU series, or an exporter run with --no-hostname
            return
        at, value = _point(point)
        job = labels.get(self.config.job_label) or None
        name = str(labels.get("__name__", ""))
        pci = str(labels.get(PCI_LABEL, ""))[:64]
        out.samples.append(MetricSample(at, host, int(gpu), name, value, job, pci))


def vanished_series(
    previous: Iterable[MetricSample], current: Iterable[MetricSample], metric: str | None = None
) -> frozenset[tuple[str, int]]:
    """The (host, gpu) pairs that had samples in ``previous`` and have none in ``current``.

    A GPU that falls off the bus stops being exported, so its series simply end; this is how a
    caller notices. ``metric`` restricts the comparison to one metric name.
    """

    def gpus(samples: Iterable[MetricSample]) -> set[tuple[str, int]]:
        return {(s.host, s.gpu) for s in samples if metric is None or s.name == metric}

    return frozenset(gpus(previous) - gpus(current))


def _result(doc: Any, kind: str) -> list[Any]:
    if not isinstance(doc, dict) or doc.get("status") != "success":
        raise ValueError(f"status is not 'success': {str(doc)[:200]}")
    data = doc.get("data")
    if not isinstance(data, dict) or data.get("resultType") != kind:
        raise ValueError(f"expected a {kind} result")
    result = _list(data.get("result"), "result")
    if not all(isinstance(s, dict) and isinstance(s.get("metric"), dict) for s in result):
        raise ValueError("a series has no 'metric' object")
    return result


def _point(point: Any) -> tuple[datetime, float]:
    if not isinstance(point, list) or len(point) != 2:
        raise _bad_point(point)
    ts, raw = point
    if not isinstance(ts, int | float) or isinstance(ts, bool) or not isinstance(raw, str):
        raise _bad_point(point)
    try:
        value = float(raw)  # "NaN" and "+Inf" are valid sample values
    except ValueError:
        raise _bad_point(point) from None
    if not math.isfinite(ts):
        raise _bad_point(point)
    return datetime.fromtimestamp(ts, UTC), value


def _bad_point(point: Any) -> ValueError:
    return ValueError(f'a sample is not [timestamp, "value"]: {point!r:.80}')


def _list(value: Any, what: str) -> list[Any]:
    if not isinstance(value, list):
        raise ValueError(f"'{what}' is not a list")
    return value


def _job_matcher(config: PrometheusConfig, job_id: str | None) -> str:
    if job_id is None:
        return ""
    return f'{config.job_label}="{check_job_id(job_id)}"'


def _epoch(value: datetime) -> str:
    if value.tzinfo is None:
        raise ValueError(f"naive datetime {value!r}: pass an aware time (UTC)")
    return f"{value.timestamp():.3f}"
