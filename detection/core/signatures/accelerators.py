"""Built-in signatures of accelerators other than NVIDIA's and of vendors' fault reports: AMD's
ROCm runtime and amdgpu driver, Intel Gaudi's habanalabs driver, Huawei Ascend's CANN error
codes (EIxxxx), its device plugin's graded device faults and its fault-diagnosis report; and a
GPU driver that is not running on one host (NVIDIA or AMD); a TPU core halted by its compiled
program's own check.

The grading follows the vendor's own: the Ascend device plugin names a fault level (isolate the
chip, or re-run the job), and its fault-diagnosis tool names the root-cause nodes.
"""

from __future__ import annotations

from detection.core.signatures.entries import (
    APP_ERROR,
    HANG_CASCADE,
    HW_NODE,
    IB_CONFIG,
    NET_ERROR,
    NET_NODE,
    SW_NODE,
    A,
    C,
    K,
    R,
    S,
    sig,
)
from detection.core.signatures.model import classify
from detection.core.signatures.refiners import flood

# A host name as fault reports print it.
_HOST = r"[A-Za-z0-9][\w.-]*"

ACCELERATORS = (
    sig(
        "accelerator_hw_exception",
        # ROCm's runtime on a device fault (a hang, an ECC error); amdgpu's ring timeout and
        # GPU reset; Gaudi's driver on a critical device error.
        r"HW Exception by GPU node-\d+|(?i:amdgpu[^\n]*(?:ring \S+ timeout|GPU reset begin"
        r"|GPU hang|uncorrectable (?:ECC|RAS)))|(?i:habanalabs[^\n]*(?:critical error"
        r"|device is (?:going to|being) reset|unrecoverable))",
        HW_NODE,
        "The accelerator's runtime or driver reports a hardware fault of one device (a hang, "
        "an uncorrectable error, a reset).",
        refine=flood,
    ),
    sig(
        "npu_fault_isolate",
        # Ascend's device plugin grades each fault: these levels take the chip out.
        r"device fault, nodeName:(?P<host>" + _HOST + r")[^\n]*faultLevelName:"
        r"(?:SeparateNPU|PreSeparateNPU|ManuallySeparateNPU)",
        HW_NODE,
        "The device plugin graded an NPU fault as one that takes the chip out of service.",
        refine=flood,
    ),
    sig(
        "npu_fault_restart",
        # ... and these re-run the job on the same chip (its fault is cleared by the re-run).
        r"device fault, nodeName:" + _HOST + r"[^\n]*faultLevelName:"
        r"(?:RestartBusiness|RestartRequest|RestartNPU|FreeRestartNPU|ResetNPU)",
        classify(K.CRASH, C.GPU_HARDWARE, A.HARDWARE, R.INITIATING, False, S.ERROR),
        "The device plugin graded an NPU fault as one a re-run of the job clears.",
        refine=flood,
    ),
    sig(
        "accelerator_core_halted",
        # A TPU core stopped on a check the compiled program makes on the device (the
        # accelerator's device-side assert): the same program halts at the same step again.
        r"Core halted unexpectedly|RuntimeUnexpectedCoreHalt"
        r"|(?i:device halted prematurely[^\n]*on-device check-failure)",
        classify(
            K.CRASH, C.APPLICATION_ERROR, A.SYSTEM_SOFTWARE, R.INITIATING, False, S.ERROR, True
        ),
        "An accelerator core halted on an on-device check of the compiled program.",
        refine=flood,
    ),
    sig(
        "gpu_driver_missing",
        # The GPU driver is not loaded on the host the process ran on: that host's set-up.
        r"kernel driver does not appear to be running on this host \((?P<host>[^)\s]+)\)"
        r"|NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver"
        r"|Failed to initialize NVML: Driver/library version mismatch"
        r"|(?i:amdgpu (?:kernel )?driver (?:is )?not loaded)",
        SW_NODE,
        "The GPU driver is not running on the host (absent, or its kernel module and library "
        "disagree): that host cannot run GPU work until it is repaired.",
        refine=flood,
    ),
)

VENDOR_NETWORK = (
    sig(
        "hccl_peer_data_timeout",
        # HCCL inside a collective: a peer rank did not send its part in time (EI0006 names
        # a socket, but the wait is a running collective's, not the links' set-up).
        r"(?i:remote rank did not send the data in time)"
        r"|(?i:check the reason for the rank being stuck)",
        HANG_CASCADE,
        "An HCCL collective waited for a peer rank's data that never came (a hung or slow "
        "peer, the cause elsewhere).",
        refine=flood,
    ),
    sig(
        "fault_diag_root_nodes",
        # A fault-diagnosis report that names the suspected root-cause nodes (Ascend's
        # fault-diag, in Chinese or English): the others only waited behind them.
        r"(?:根因节点|(?i:root[ -]cause nodes?)) *\| *\['(?P<host>" + _HOST + r")",
        NET_NODE,
        "A fault-diagnosis report names the nodes it suspects as the root cause.",
        refine=flood,
    ),
    sig(
        "npu_error_cqe",
        # Ascend's RoCE completion error between two devices during execution (EI0013).
        r"\bEI0013\b|(?i:an error CQE occurred)|ROCE CQE",
        NET_ERROR,
        "RoCE retransmissions between two devices ran out during execution (an error CQE): a "
        "link that flapped, or a peer that exited first.",
        refine=flood,
    ),
    sig(
        "npu_link_setup_timeout",
        # HCCL building its links between ranks: the peer never answered.
        r"(?i:wait socket establish timeout)|LinksEstablishCompleted\] is failed",
        IB_CONFIG,
        "HCCL could not establish its links between ranks in time (address, interface, TLS "
        "or timeout settings differ between them, or a peer never started).",
        refine=flood,
    ),
)

VENDOR_CONFIG = (
    sig(
        "cluster_config_invalid",
        # Ascend's cluster description (the ranktable) refused at start-up (EI0004).
        r"\bEI0004\b|The ranktable or rank is invalid|(?i:ranktable[^\n]*(?:is invalid"
        r"|not a valid|parse failed))",
        APP_ERROR,
        "The job's cluster description (ranktable, rank list) is invalid.",
        refine=flood,
    ),
)
