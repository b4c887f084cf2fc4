"""The faults the simulator injects, how often, how they show, and whom they implicate.

Family shares follow published field data for large GPU training clusters (GPU 47%, NVLink 6%,
InfiniBand/RoCE 14%, host 10%, system software 8%, application 6%, maintenance 5%, unknown
4%). Within a family, entry weights set how a fault manifests; over the whole catalogue that
gives about 84% crashes, 12% hangs and 4% slowdowns. Messages are copied from real sources:
NVIDIA's Xid catalogue and driver output, PyTorch, NCCL, Slurm and kernel logs.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from enum import StrEnum

from .records import Attribution, Category, FaultKind


class Family(StrEnum):
    """Where a fault comes from, as field studies of GPU clusters group them."""

    GPU = "gpu"
    NVLINK = "nvlink"
    NETWORK = "network"
    HOST = "host"
    SYSTEM_SOFTWARE = "system_software"
    APPLICATION = "application"
    MAINTENANCE = "maintenance"
    UNKNOWN = "unknown"


# They add up to 1, so ``share_of`` can use them as probabilities as they are.
FAMILY_SHARES: dict[Family, float] = {
    Family.GPU: 0.47,
    Family.NVLINK: 0.06,
    Family.NETWORK: 0.14,
    Family.HOST: 0.10,
    Family.SYSTEM_SOFTWARE: 0.08,
    Family.APPLICATION: 0.06,
    Family.MAINTENANCE: 0.05,
    Family.UNKNOWN: 0.04,
}


@dataclass(frozen=True)
class FaultEntry:
    """One kind of fault: its taxonomy, its weight within its family and how to script it.

    ``script`` names the builder in ``faults.py``. ``sticky`` faults leave the node broken until
    an operator resumes it, so a restart on the same node fails again; ``persistent`` faults are
    in the workload itself and come back after every restart. ``detail`` is the entry's own
    message (an Xid text, an exception line).
    """

    key: str
    family: Family
    kind: FaultKind
    category: Category
    attribution: Attribution
    weight: float
    blames_host: bool
    script: str
    description: str
    xid: int = 0
    detail: str = ""
    error: str = ""
    sticky: bool = False
    persistent: bool = False


# The table is laid out by hand, one entry per paragraph, so it reads like a catalogue.
# fmt: off
_C, _H, _S = FaultKind.CRASH, FaultKind.HANG, FaultKind.STRAGGLER
_HW, _IC = Attribution.HARDWARE, Attribution.INTERCONNECT
_SW, _APP = Attribution.SYSTEM_SOFTWARE, Attribution.APPLICATION
_ECC = "RuntimeError: CUDA error: uncorrectable ECC error encountered"

_GPU = (
    FaultEntry("xid79_fallen_off_bus", Family.GPU, _C, Category.GPU_HARDWARE, _HW, 0.20, True,
               "gpu_crash", "GPU fell off the bus (Xid 79)", 79, "GPU has fallen off the bus.",
               "RuntimeError: CUDA error: unknown error", sticky=True),
    FaultEntry("xid48_dbe", Family.GPU, _C, Category.GPU_HARDWARE, _HW, 0.13, True, "gpu_crash",
               "uncorrectable double-bit ECC error (Xid 48)", 48,
               "An uncorrectable double bit error (DBE) has been detected on GPU in the "
               "framebuffer at physAddr 0x{addr:x} partition {part}, subpartition 1.", _ECC,
               sticky=True),
    # A contained error kills only the process; an uncontained one (Xid 95) needs a GPU reset.
    FaultEntry("xid94_contained_ecc", Family.GPU, _C, Category.GPU_HARDWARE, _HW, 0.10, True,
               "gpu_crash", "contained ECC error (Xid 94)", 94,
               "Contained: SM (0x1). RST: No, D-RST: No", _ECC),
    FaultEntry("xid95_uncontained_ecc", Family.GPU, _C, Category.GPU_HARDWARE, _HW, 0.06, True,
               "gpu_crash", "uncontained ECC error (Xid 95)", 95,
               "Uncontained: LTC TAG (0x2,0x0). RST: Yes, D-RST: No", _ECC, sticky=True),
    FaultEntry("xid64_row_remap_failure", Family.GPU, _C, Category.GPU_HARDWARE, _HW, 0.06, True,
               "gpu_crash", "row remapping failed after an ECC error (Xid 63, 64)", 64,
               "Row Remapper Error: Failed to remap row (0x{addr:x}), reset gpu to activate.",
               _ECC, sticky=True),
    FaultEntry("xid120_gsp_error", Family.GPU, _C, Category.GPU_HARDWARE, _HW, 0.06, True,
               "gpu_crash", "GSP firmware error (Xid 120)", 120,
               "GSP task exception: load access fault",
               "RuntimeError: CUDA error: unspecified launch failure"),
    FaultEntry("xid119_gsp_timeout", Family.GPU, _H, Category.GPU_HARDWARE, _HW, 0.05, True,
               "gpu_hang", "GSP RPC timeout left the GPU stuck (Xid 119)", 119,
               "Timeout after 6s of waiting for RPC response from GPU{gpu} GSP! Expected "
               "function 76 (GSP_RM_CONTROL) (0x20800a4c 0x4).", sticky=True),
    # No Xid to read: all a detector can see is the NCCL timeout, hence its category.
    FaultEntry("gpu_silent_hang", Family.GPU, _H, Category.NCCL_TIMEOUT_HANG, _HW, 0.03, True,
               "gpu_hang", "a GPU stopped making progress without any driver message"),
    # No Xid reaches the log: the node is known only from where the error was read.
    FaultEntry("cuda_unknown_error", Family.GPU, _C, Category.GPU_HARDWARE, _HW, 0.04, True,
               "gpu_crash", "the GPU failed under the job with no Xid logged", 0, "",
               "RuntimeError: CUDA error: unknown error", sticky=True),
    FaultEntry("pcie_aer_fatal", Family.GPU, _C, Category.GPU_HARDWARE, _HW, 0.03, True,
               "gpu_crash", "uncorrectable PCIe error on the GPU's link (AER)", 0,
               "pcieport 0000:{root}:00.0: AER: Uncorrected (Fatal) error received: "
               "0000:{bus}:00.0", "RuntimeError: CUDA error: unspecified launch failure",
               sticky=True),
    FaultEntry("gpu_thermal_throttle", Family.GPU, _S, Category.STRAGGLER, _HW, 0.03, True,
               "throttle", "thermal slowdown on every GPU of a node (failed fan)",
               detail="thermal", sticky=True),
    FaultEntry("gpu_power_brake", Family.GPU, _S, Category.STRAGGLER, _HW, 0.01, True,
               "throttle", "hardware power brake slowdown (PSU fault)", detail="power",
               sticky=True),
)

_NVLINK = (
    FaultEntry("xid74_nvlink_crash", Family.NVLINK, _C, Category.GPU_HARDWARE, _HW, 0.75, True,
               "gpu_crash", "fatal NVLink error (Xid 74)", 74,
               "NVLink: fatal error detected on link {link}(0x10000, 0x0, 0x0, 0x0, 0x0, 0x0, "
               "0x0)",
               "RuntimeError: CUDA error: uncorrectable NVLink error detected during the "
               "execution", sticky=True),
    FaultEntry("xid74_nvlink_hang", Family.NVLINK, _H, Category.GPU_HARDWARE, _HW, 0.2, True,
               "gpu_hang", "NVLink error stalled a collective (Xid 74)", 74,
               "NVLink: fatal error detected on link {link}(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, "
               "0x0)", sticky=True),
)

_NETWORK = (
    FaultEntry("ib_completion_error", Family.NETWORK, _C, Category.INTERCONNECT_NETWORK, _IC,
               0.42, True, "ib_crash", "InfiniBand send failed: retry count exceeded",
               sticky=True),
    # A flap: the link comes back, so a restart on the same node works.
    FaultEntry("roce_connection_reset", Family.NETWORK, _C, Category.INTERCONNECT_NETWORK, _IC,
               0.26, True, "ib_crash", "RoCE link flap reset NCCL connections",
               detail="reset"),
    FaultEntry("ib_link_down_hang", Family.NETWORK, _H, Category.INTERCONNECT_NETWORK, _IC,
               0.18, True, "ib_hang", "InfiniBand port went down and collectives stalled",
               sticky=True),
    FaultEntry("ib_link_degraded", Family.NETWORK, _S, Category.STRAGGLER, _IC, 0.10, True,
               "throttle", "InfiniBand link renegotiated at a lower speed", detail="network",
               sticky=True),
)

_HOST = (
    FaultEntry("node_crash", Family.HOST, _C, Category.NODE_OR_PROCESS_FAILURE, _HW, 0.45, True,
               "node_crash", "node crashed (machine check, kernel panic); Slurm NODE_FAIL"),
    # The job asked for more host memory than the node has: not the node's fault, and the
    # same job runs out again after a restart.
    FaultEntry("host_oom_killer", Family.HOST, _C, Category.NODE_OR_PROCESS_FAILURE, _APP, 0.33,
               False, "host_oom", "host memory exhausted; the kernel OOM killer killed a rank",
               persistent=True),
    FaultEntry("soft_lockup_hang", Family.HOST, _H, Category.NODE_OR_PROCESS_FAILURE, _SW, 0.18,
               True, "soft_lockup", "CPU soft lockup froze the ranks of one node"),
)

_SYSTEM = (
    # Shared storage fails for every node alike: the file-system faults blame no host.
    FaultEntry("checkpoint_no_space", Family.SYSTEM_SOFTWARE, _C, Category.FILESYSTEM_IO, _SW,
               0.20, False, "fs_crash", "checkpoint save failed: no space left on device",
               detail="nospace", persistent=True),
    FaultEntry("stale_file_handle", Family.SYSTEM_SOFTWARE, _C, Category.FILESYSTEM_IO, _SW, 0.12,
               False, "fs_crash", "NFS stale file handle while reading data", detail="stale",
               persistent=True),
    FaultEntry("lustre_io_error", Family.SYSTEM_SOFTWARE, _C, Category.FILESYSTEM_IO, _SW, 0.18,
               False, "fs_crash", "Lustre OST connection lost; reads fail with EIO",
               detail="lustre"),
    FaultEntry("nfs_server_hang", Family.SYSTEM_SOFTWARE, _H, Category.FILESYSTEM_IO, _SW, 0.10,
               False, "fs_hang", "NFS server stopped responding; ranks blocked on I/O"),
    FaultEntry("fabric_manager_down", Family.SYSTEM_SOFTWARE, _C, Category.GPU_HARDWARE, _SW,
               0.16, True, "fabric_manager", "nvidia-fabricmanager died; CUDA calls fail",
               sticky=True),
    FaultEntry("c10d_store_failure", Family.SYSTEM_SOFTWARE, _C, Category.INTERCONNECT_NETWORK,
               _SW, 0.22, False, "c10d_store", "c10d TCPStore connection lost"),
)

_APPLICATION = (
    # What a retry replays comes back after every restart (``persistent``): the same batch size
    # runs out of memory again, the same data and learning rate diverge again, the same code
    # raises again.
    FaultEntry("cuda_oom", Family.APPLICATION, _C, Category.CUDA_OOM, _APP, 0.30, False,
               "cuda_oom", "CUDA out of memory on one rank", persistent=True),
    FaultEntry("nan_loss", Family.APPLICATION, _C, Category.NUMERICAL_DIVERGENCE, _APP, 0.20,
               False, "nan_loss", "loss diverged to NaN", persistent=True),
    # No NaN anywhere: the loss jumps and stays up while the run goes on.
    FaultEntry("loss_divergence", Family.APPLICATION, _C, Category.NUMERICAL_DIVERGENCE, _APP,
               0.10, False, "diverge", "loss jumped and did not come back", persistent=True),
    FaultEntry("device_assert", Family.APPLICATION, _C, Category.APPLICATION_ERROR, _APP, 0.10,
               False, "app_error", "an index out of range in a CUDA kernel (device-side assert)",
               detail="../aten/src/ATen/native/cuda/Indexing.cu:1308: indexSelectLargeIndex: "
               "block: [61,0,0], thread: [{thread},0,0] Assertion `srcIndex < srcSelectDimSize` "
               "failed.",
               error="RuntimeError: CUDA error: device-side assert triggered", persistent=True),
    FaultEntry("shape_mismatch", Family.APPLICATION, _C, Category.APPLICATION_ERROR, _APP, 0.15,
               False, "app_error", "tensor shape mismatch in user code",
               error="RuntimeError: mat1 and mat2 shapes cannot be multiplied (8192x4096 and "
               "5120x4096)", persistent=True),
    FaultEntry("config_key_error", Family.APPLICATION, _C, Category.APPLICATION_ERROR, _APP, 0.15,
               False, "app_error", "bad training config: missing key",
               error="KeyError: 'rope_scaling'", persistent=True),
    FaultEntry("missing_module", Family.APPLICATION, _C, Category.APPLICATION_ERROR, _APP, 0.15,
               False, "app_error", "environment lacks a module the code imports",
               error="ModuleNotFoundError: No module named 'flash_attn'", persistent=True),
)

_MAINTENANCE = (
    FaultEntry("admin_node_down", Family.MAINTENANCE, _C, Category.NODE_OR_PROCESS_FAILURE,
               Attribution.SCHEDULER, 0.5, False, "admin_down",
               "an administrator took a node down for maintenance"),
    FaultEntry("time_limit", Family.MAINTENANCE, _C, Category.NODE_OR_PROCESS_FAILURE,
               Attribution.SCHEDULER, 0.5, False, "time_limit", "the job hit its time limit"),
    FaultEntry("preemption", Family.MAINTENANCE, _C, Category.NODE_OR_PROCESS_FAILURE,
               Attribution.SCHEDULER, 0.3, False, "preempted",
               "a higher-priority job preempted this one"),
)

_UNKNOWN = (
    FaultEntry("truncated_exit", Family.UNKNOWN, _C, Category.NODE_OR_PROCESS_FAILURE,
               Attribution.NONE, 0.5, False, "unknown_exit",
               "job exited with code 1 after a truncated log", detail="exit"),
    FaultEntry("unexplained_sigkill", Family.UNKNOWN, _C, Category.NODE_OR_PROCESS_FAILURE,
               Attribution.NONE, 0.5, False, "unknown_exit",
               "job killed by SIGKILL with no explanation", detail="sigkill"),
)
# fmt: on

ENTRIES: tuple[FaultEntry, ...] = (
    _GPU + _NVLINK + _NETWORK + _HOST + _SYSTEM + _APPLICATION + _MAINTENANCE + _UNKNOWN
)
BY_KEY: dict[str, FaultEntry] = {entry.key: entry for entry in ENTRIES}
# Not only drawn: the injector fires it itself when an attempt reaches its time limit.
TIME_LIMIT = BY_KEY["time_limit"]

_FAMILIES = tuple(FAMILY_SHARES)
_FAMILY_WEIGHTS = tuple(FAMILY_SHARES.values())
_BY_FAMILY = {family: tuple(e for e in ENTRIES if e.family is family) for family in _FAMILIES}


def draw_entry(rng: random.Random) -> FaultEntry:
    """A catalogue entry drawn with the family shares, then the entry weights."""
    family = rng.choices(_FAMILIES, _FAMILY_WEIGHTS)[0]
    entries = _BY_FAMILY[family]
    return rng.choices(entries, [e.weight for e in entries])[0]


def share_of(entry: FaultEntry) -> float:
    """The probability that ``draw_entry`` returns ``entry``."""
    siblings = _BY_FAMILY[entry.family]
    return FAMILY_SHARES[entry.family] * entry.weight / sum(e.weight for e in siblings)


def kind_shares() -> dict[FaultKind, float]:
    """How the catalogue's faults manifest, by kind, as probabilities."""
    shares = dict.fromkeys(FaultKind, 0.0)
    for entry in ENTRIES:
        shares[entry.kind] += share_of(entry)
    return shares


# Xid messages for lines that accompany a root cause (not faults of their own).
XID63_TEXT = "Row Remapper: New row (0x{addr:x}) Marked for Remapping, reset gpu to activate."
XID45_TEXT = "Ch {channel:08x}"
XID43_TEXT = "Ch {channel:08x}"

# Xid codes for which DCGM's double-bit ECC counter goes up.
DBE_XIDS = frozenset({48, 63, 64, 94, 95})
