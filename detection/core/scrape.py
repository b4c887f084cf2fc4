"""A metrics scrape read once, by host: each GPU's latest value of each metric and its labels.

A scrape of a large cluster holds millions of samples (200,000 GPUs, several gauges each). The
detectors want them by node (an attempt's GPUs, the utilisation of its nodes, the state of each
GPU between scrapes), so one pass groups them and every detector looks up its own nodes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from itertools import groupby
from operator import attrgetter
from typing import Any

from detection.core.telemetry import Dcgm, MetricSample

GpuKey = tuple[str, int]
# Each GPU's latest value of each metric, keyed (host, GPU index).
GpuReadings = dict[GpuKey, dict[str, float]]
# What the metric fault detector keeps of each GPU between scrapes, keyed ``host/gpu``.
GpuState = dict[str, dict[str, Any]]
# The same by node: host -> GPU index (as text, as stored) -> what is kept of it.
NodeGpuStates = dict[str, dict[str, dict[str, Any]]]


@dataclass
class ScrapeByHost:
    readings: dict[str, GpuReadings] = field(default_factory=dict)
    # host -> GPU -> (the job its first sample named, its first PCI bus id)
    labels: dict[str, dict[int, list[Any]]] = field(default_factory=dict)

    def gpus_of(self, nodes: Iterable[str]) -> GpuReadings:
        """The readings of the GPUs on ``nodes``."""
        out: GpuReadings = {}
        for host in nodes:
            out.update(self.readings.get(host, {}))
        return out

    def utilisation_of(self, nodes: Iterable[str]) -> list[float]:
        return [
            gauges[Dcgm.GPU_UTIL]
            for host in nodes
            for gauges in self.readings.get(host, {}).values()
            if Dcgm.GPU_UTIL in gauges
        ]

    def gpu_states(self, owned: Callable[[str], bool] | None = None) -> NodeGpuStates:
        """By node, each GPU's job, PCI address, last Xid code and double-bit ECC count (of the
        hosts ``owned`` says yes to, or of every host)."""
        states: NodeGpuStates = {}
        for host, gpus in self.labels.items():
            if owned is not None and not owned(host):
                continue
            readings = self.readings[host]
            of_host = states[host] = {}
            for gpu, (job, pci) in gpus.items():
                entry: dict[str, Any] = {"job": job}
                if pci:
                    entry["pci"] = pci
                gauges = readings[(host, gpu)]
                if Dcgm.XID_ERRORS in gauges:
                    entry["xid"] = int(gauges[Dcgm.XID_ERRORS])
                if Dcgm.ECC_DBE_VOL_TOTAL in gauges:
                    entry["dbe"] = gauges[Dcgm.ECC_DBE_VOL_TOTAL]
                of_host[str(gpu)] = entry
        return states


def by_gpu(states: NodeGpuStates) -> GpuState:
    """The nodes' GPU states keyed ``host/gpu``, as the metric fault detector compares them."""
    return {f"{host}/{gpu}": entry for host, gpus in states.items() for gpu, entry in gpus.items()}


def read_by_host(
    samples: Iterable[MetricSample], keep: Callable[[str], bool] | None = None
) -> ScrapeByHost:
    """One pass over a scrape; a later sample of the same gauge wins, labels come from the
    GPU's first sample (its PCI id from the first that has one). With ``keep``, only the hosts
    it says yes to (asked once per host) are kept: a scan shard's own."""
    readings: dict[str, GpuReadings] = {}
    labels: dict[str, dict[int, list[Any]]] = {}
    left_out: set[str] = set()
    # Exporters and Prometheus give a node's series together: a run of one host's samples is
    # kept or passed over as a whole (the same host later in the scrape is simply met again).
    for host, run in groupby(samples, key=_HOST):
        if host in left_out:
            continue
        of_host = readings.get(host)
        if of_host is None:
            if keep is not None and not keep(host):
                left_out.add(host)
                continue
            of_host = readings[host] = {}
            labels[host] = {}
        of_labels = labels[host]
        for sample in run:
            gpu = sample.gpu
            gauges = of_host.get((host, gpu))
            if gauges is None:
                gauges = of_host[(host, gpu)] = {}
                of_labels[gpu] = [sample.job_id, sample.pci]
            elif sample.pci and not of_labels[gpu][1]:
                of_labels[gpu][1] = sample.pci
            gauges[sample.name] = sample.value
    return ScrapeByHost(readings, labels)


_HOST = attrgetter("host")
