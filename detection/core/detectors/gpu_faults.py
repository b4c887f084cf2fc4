"""Metric faults from DCGM-exporter scrapes: a new Xid code on a GPU, double-bit ECC errors
going up, and GPU series that disappear.

``DCGM_FI_DEV_XID_ERRORS`` holds the *last* Xid code a GPU raised, not a count, so a fault is a
change of that value to a code NVIDIA's catalogue says takes the GPU out. The state carried
between scrapes is a plain dict (JSON), keyed ``host/gpu``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from detection.core.interruption import Confidence, Evidence, HostOrigin, Interruption
from detection.core.scrape import GpuState, by_gpu, read_by_host
from detection.core.signatures import grade_xid
from detection.core.telemetry import Dcgm, MetricSample
from fleet.core.taxonomy import (
    Attribution,
    Category,
    ConfidenceLabel,
    Kind,
    default_attribution,
)

XID = Dcgm.XID_ERRORS
ECC_DBE = Dcgm.ECC_DBE_VOL_TOTAL


def read_scrape(samples: Iterable[MetricSample]) -> GpuState:
    """The part of a scrape the metric detector tracks, keyed ``host/gpu``."""
    return by_gpu(read_by_host(samples).gpu_states())


def detect_metric_faults(previous: GpuState, current: GpuState, at: datetime) -> list[Interruption]:
    """Interruptions from what changed between two scrapes (an empty previous state finds nothing
    but new Xid codes, so a restart of the console does not replay old ECC counts)."""
    findings: list[Interruption] = []
    for key, now in current.items():
        before = previous.get(key, {})
        findings += _xid_change(key, before, now, at) + _ecc_increase(key, before, now, at)
    findings += _vanished(previous, current, at)
    return findings


def _xid_change(
    key: str, before: dict[str, Any], now: dict[str, Any], at: datetime
) -> list[Interruption]:
    code = now.get("xid", 0)
    if not code or code == before.get("xid", 0):
        return []
    grade = grade_xid(code, "")
    if not grade.implicates_node:
        return []  # e.g. Xid 13/31/43/45: the application's fault, seen in its own log
    host, gpu = key.rsplit("/", 1)
    text = f"{XID}={code} on {host} GPU {gpu}: Xid {code} ({grade.name})"
    return [_fault(now, grade.category, f"xid:{code}:{host}", host, at, text, "dcgm_xid")]


def _ecc_increase(
    key: str, before: dict[str, Any], now: dict[str, Any], at: datetime
) -> list[Interruption]:
    if "dbe" not in before or now.get("dbe", 0) <= before["dbe"]:
        return []
    host, gpu = key.rsplit("/", 1)
    text = f"{ECC_DBE} rose from {before['dbe']:g} to {now['dbe']:g} on {host} GPU {gpu}"
    return [_fault(now, Category.GPU_HARDWARE, f"ecc-dbe:{host}", host, at, text, "dcgm_ecc_dbe")]


def _vanished(previous: GpuState, current: GpuState, at: datetime) -> list[Interruption]:
    """A GPU whose series vanished while its node still reports has likely fallen off the bus;
    a whole node vanishing is a node (or its exporter) going away."""
    hosts_now = {key.rsplit("/", 1)[0] for key in current}
    findings: list[Interruption] = []
    for host, gpus in _gone_by_host(previous, current).items():
        entry = previous[f"{host}/{gpus[0]}"]
        if host in hosts_now:
            text = f"DCGM series of {host} GPU {', '.join(gpus)} disappeared"
            findings.append(
                _fault(
                    entry,
                    Category.GPU_HARDWARE,
                    f"gpu-gone:{host}",
                    host,
                    at,
                    text,
                    "dcgm_gpu_vanished",
                )
            )
        else:
            text = f"every DCGM series of {host} disappeared (node or exporter down)"
            findings.append(
                _fault(
                    entry,
                    Category.NODE_OR_PROCESS_FAILURE,
                    f"node-gone:{host}",
                    host,
                    at,
                    text,
                    "dcgm_node_vanished",
                )
            )
    return findings


def _gone_by_host(previous: GpuState, current: GpuState) -> dict[str, list[str]]:
    gone: dict[str, list[str]] = defaultdict(list)
    for key in sorted(set(previous) - set(current)):
        if previous[key].get("job"):  # idle GPUs come and go with little meaning
            host, gpu = key.rsplit("/", 1)
            gone[host].append(gpu)
    return dict(gone)


def _fault(
    entry: dict[str, Any],
    category: Category,
    cause: str,
    host: str,
    at: datetime,
    text: str,
    signature: str,
) -> Interruption:
    # The metric names the node, so a node failure here is the node's hardware.
    attribution = (
        Attribution.HARDWARE
        if category is Category.NODE_OR_PROCESS_FAILURE
        else default_attribution(category)
    )
    return Interruption(
        kind=Kind.CRASH,
        category=category,
        attribution=attribution,
        confidence=Confidence(0.8, ConfidenceLabel.SUPPORTED),
        root_cause=cause,
        summary=text,
        explanation=text,
        hosts=(host,),
        evidence=(Evidence(at=at, source="metrics", text=text, signature=signature, host=host),),
        first_evidence_at=at,
        job_id=str(entry.get("job") or ""),
        signature=signature,
        # Every fault here is the node's own: a graded Xid, an ECC failure, its GPUs vanishing.
        node_local=True,
        host_origins=((host, HostOrigin.DETECTOR),),
    )
