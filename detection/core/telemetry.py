"""Plain records of what telemetry sources produce: log lines and GPU metric samples.

Every source (job output files, Loki, VictoriaLogs, Prometheus, the simulated cluster) yields
these and every detector consumes them. Pure Python: no Django, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum


@dataclass(frozen=True)
class LogLine:
    """One line of output, exactly as written, with where it came from.

    ``job_id`` is set for a job's own output (``slurm-%j.out``); ``host`` is set for a node's
    system log (kernel messages such as NVRM Xid lines), which belongs to no job.
    """

    at: datetime
    text: str
    job_id: str | None = None
    host: str | None = None


@dataclass(frozen=True)
class MetricSample:
    """One DCGM-exporter gauge for one GPU, as a scrape would return it.

    ``name`` is the exporter's metric name (``DCGM_FI_DEV_SM_CLOCK`` ...); ``job_id`` is the
    ``hpc_job`` label when the GPU is allocated to a job; ``pci`` the exporter's ``pci_bus_id``
    label (``00000000:3B:00.0``), which ties the GPU to the address a kernel Xid line prints.
    """

    at: datetime
    host: str
    gpu: int
    name: str
    value: float
    job_id: str | None = None
    pci: str = ""


# dcgm-exporter's label for the GPU's PCI address.
PCI_LABEL = "pci_bus_id"


class Dcgm(StrEnum):
    """The dcgm-exporter fields detection reads (the names of its default counters file), which
    the Prometheus source queries and the simulated cluster publishes."""

    GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
    SM_ACTIVE = "DCGM_FI_PROF_SM_ACTIVE"
    SM_CLOCK = "DCGM_FI_DEV_SM_CLOCK"
    POWER_USAGE = "DCGM_FI_DEV_POWER_USAGE"
    GPU_TEMP = "DCGM_FI_DEV_GPU_TEMP"
    FB_USED = "DCGM_FI_DEV_FB_USED"
    CLOCK_THROTTLE_REASONS = "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"
    # The code of the GPU's *last* Xid, not a count.
    XID_ERRORS = "DCGM_FI_DEV_XID_ERRORS"
    ECC_DBE_VOL_TOTAL = "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"


DCGM_METRICS: tuple[str, ...] = tuple(field.value for field in Dcgm)
