"""GPU metrics from a file in Prometheus' text exposition format, as dcgm-exporter serves it and
node_exporter's textfile collector reads it. The simulated cluster writes one; a site without
Prometheus can point this at a file its own exporter scrape writes."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from detection.core.telemetry import PCI_LABEL, MetricSample
from detection.sources.base import SourceUnavailable
from detection.sources.prometheus import MetricScrape

# A timestamp after the value is ignored: every sample counts as read at the scrape.
_SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>.*)\})?\s+(?P<value>\S+)")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class TextfileConfig:
    path: str
    job_label: str = "hpc_job"
    host_labels: tuple[str, ...] = ("Hostname", "hostname")
    gpu_label: str = "gpu"
    max_bytes: int = 64 * 1024 * 1024


class TextfileMetrics:
    """Reads the whole file each scrape: it holds the current value of every series."""

    def __init__(self, config: TextfileConfig) -> None:
        self.config = config
        self.name = f"metrics file {config.path}"

    def scrape(self, now: datetime | None = None) -> MetricScrape:
        at = now or datetime.now(UTC)
        try:
            with Path(self.config.path).open("rb") as handle:
                # One byte past the cap tells an oversized file from one exactly at it.
                data = handle.read(self.config.max_bytes + 1)
        except OSError as exc:
            raise SourceUnavailable(self.name, f"cannot read it: {exc.strerror}") from exc
        if len(data) > self.config.max_bytes:
            raise SourceUnavailable(self.name, f"larger than {self.config.max_bytes} bytes")
        samples, dropped = [], 0
        for line in data.decode("utf-8", errors="replace").splitlines():
            if not line or line.startswith("#"):
                continue
            sample = self._sample(line, at)
            if sample is None:
                dropped += 1
            else:
                samples.append(sample)
        return MetricScrape(at=at, samples=tuple(samples), dropped=dropped)

    def _sample(self, line: str, at: datetime) -> MetricSample | None:
        found = _SAMPLE.match(line)
        if found is None:
            return None
        labels = dict(_LABEL.findall(found["labels"] or ""))
        host = next((labels[k] for k in self.config.host_labels if labels.get(k)), None)
        gpu = labels.get(self.config.gpu_label, "")
        try:
            value = float(found["value"])
        except ValueError:
            return None
        # Per-GPU series only; node-level ones are counted as dropped.
        if host is None or not gpu.isdigit():
            return None
        # An empty job label (an idle GPU) means no job, not a job named "".
        job = labels.get(self.config.job_label) or None
        pci = labels.get(PCI_LABEL, "")[:64]
        return MetricSample(at, host, int(gpu), found["name"], value, job, pci)
