"""Telemetry source clients: job output files, Loki, VictoriaLogs and Prometheus (DCGM).

Log sources share one contract: ``fetch(cursor, now) -> LogBatch``; the caller stores the lines,
then the batch's cursor, and passes that cursor back next time. Every failure to read is a
``SourceUnavailable``. Plain Python and the standard library: no Django here.
"""

from detection.sources.base import LogBatch, LogSource, SourceHealth, SourceUnavailable
from detection.sources.files import FilesConfig, JobOutputFiles
from detection.sources.httpclient import HttpAuth
from detection.sources.loki import LokiConfig, LokiSource
from detection.sources.paging import LabelNames, PageLimits
from detection.sources.prometheus import (
    MetricScrape,
    PrometheusConfig,
    PrometheusSource,
    vanished_series,
)
from detection.sources.victorialogs import VictoriaLogsConfig, VictoriaLogsSource

__all__ = [
    "FilesConfig",
    "HttpAuth",
    "JobOutputFiles",
    "LabelNames",
    "LogBatch",
    "LogSource",
    "LokiConfig",
    "LokiSource",
    "MetricScrape",
    "PageLimits",
    "PrometheusConfig",
    "PrometheusSource",
    "SourceHealth",
    "SourceUnavailable",
    "VictoriaLogsConfig",
    "VictoriaLogsSource",
    "vanished_series",
]
