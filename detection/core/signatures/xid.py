"""NVRM Xid codes graded after NVIDIA's Xid catalogue.

Sources: "Analyzing Xid Errors with the Xid Catalog" (docs.nvidia.com/deploy/xid-errors/
analyzing-xid-catalog.html): every code from 1 to 172 with its immediate action for Ampere and
newer GPUs (RESTART_APP, RESET_GPU, RESTART_BM, IGNORE, the ECC and NVLink workflows ...), and
"Xid Errors" (docs.nvidia.com/deploy/xid-errors/index.html) for what older drivers print.

The immediate action says whose fault it is. A reset or a reboot (or a workflow that ends in one)
means the node must be taken out before the job runs there again; a restart of the application
means the node is fine and the application, or a contained fault, is to blame; IGNORE means the
event is informational. Codes 162-172 are newer than the catalogue's action columns; they are
graded from their descriptions.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from detection.core.constants import Role, Severity
from detection.core.signatures.model import Classification
from fleet.core.taxonomy import Attribution, Category, Kind

UNUSED = "Unused code in NVIDIA's catalogue"

# code -> (description, NVIDIA's immediate action)
CATALOGUE: dict[int, tuple[str, str]] = {
    1: (UNUSED, "CONTACT_SUPPORT"),
    2: (UNUSED, "CONTACT_SUPPORT"),
    3: (UNUSED, "CONTACT_SUPPORT"),
    4: (UNUSED, "CONTACT_SUPPORT"),
    5: (UNUSED, "CONTACT_SUPPORT"),
    6: (UNUSED, "CONTACT_SUPPORT"),
    7: (UNUSED, "CONTACT_SUPPORT"),
    8: ("GPU stopped processing", "RESTART_APP"),
    9: (UNUSED, "CONTACT_SUPPORT"),
    10: (UNUSED, "CONTACT_SUPPORT"),
    11: ("Invalid or corrupted push buffer stream", "RESTART_APP"),
    12: (UNUSED, "CONTACT_SUPPORT"),
    13: ("Graphics Engine Exception", "RESTART_APP"),
    14: (UNUSED, "IGNORE"),
    15: (UNUSED, "CONTACT_SUPPORT"),
    16: (UNUSED, "CONTACT_SUPPORT"),
    17: (UNUSED, "CONTACT_SUPPORT"),
    18: (UNUSED, "CONTACT_SUPPORT"),
    19: (UNUSED, "CONTACT_SUPPORT"),
    20: (UNUSED, "CONTACT_SUPPORT"),
    21: (UNUSED, "CONTACT_SUPPORT"),
    22: (UNUSED, "CONTACT_SUPPORT"),
    23: (UNUSED, "CONTACT_SUPPORT"),
    24: (UNUSED, "CONTACT_SUPPORT"),
    25: ("Invalid or illegal push buffer stream", "RESTART_APP"),
    26: (UNUSED, "CONTACT_SUPPORT"),
    27: (UNUSED, "CONTACT_SUPPORT"),
    28: (UNUSED, "CONTACT_SUPPORT"),
    29: (UNUSED, "CONTACT_SUPPORT"),
    30: (UNUSED, "CONTACT_SUPPORT"),
    31: ("GPU memory page fault", "RESTART_APP"),
    32: ("Invalid or corrupted push buffer stream", "RESTART_APP"),
    33: (UNUSED, "CONTACT_SUPPORT"),
    34: (UNUSED, "CONTACT_SUPPORT"),
    35: (UNUSED, "CONTACT_SUPPORT"),
    36: (UNUSED, "CONTACT_SUPPORT"),
    37: ("Driver firmware error", "IGNORE"),
    38: ("Driver firmware error", "IGNORE"),
    39: ("Copy Engine Exception", "RESTART_APP"),
    40: ("Copy Engine Exception", "RESTART_APP"),
    41: ("Copy Engine Exception", "RESTART_APP"),
    42: (UNUSED, "CONTACT_SUPPORT"),
    43: ("GPU stopped processing", "IGNORE"),
    44: ("Graphics Engine fault during context switch", "IGNORE"),
    45: ("Preemptive cleanup, due to previous errors", "WORKFLOW_XID_45"),
    46: ("GPU stopped processing", "RESET_GPU"),
    47: (UNUSED, "CONTACT_SUPPORT"),
    48: ("Double Bit ECC Error", "WORKFLOW_XID_48"),
    49: (UNUSED, "CONTACT_SUPPORT"),
    50: (UNUSED, "CONTACT_SUPPORT"),
    51: (UNUSED, "CONTACT_SUPPORT"),
    52: (UNUSED, "CONTACT_SUPPORT"),
    53: (UNUSED, "CONTACT_SUPPORT"),
    54: ("Auxiliary power is not connected to the GPU board", "CHECK_MECHANICALS"),
    55: (UNUSED, "CONTACT_SUPPORT"),
    56: (UNUSED, "CONTACT_SUPPORT"),
    57: (UNUSED, "CONTACT_SUPPORT"),
    58: (UNUSED, "CONTACT_SUPPORT"),
    59: (UNUSED, "CONTACT_SUPPORT"),
    60: ("Video processor exception", "RESTART_APP"),
    61: (UNUSED, "CONTACT_SUPPORT"),
    62: ("Internal micro-controller halt", "RESET_GPU"),
    63: ("GPU memory remapping event", "IGNORE"),
    64: ("GPU memory remapping failure", "RESET_GPU"),
    65: (UNUSED, "CONTACT_SUPPORT"),
    66: ("Illegal access by driver", "IGNORE"),
    67: ("Illegal access by driver", "IGNORE"),
    68: ("NVDEC0 Exception", "RESTART_APP"),
    69: ("Graphics Engine class error", "RESTART_APP"),
    70: ("CE3: Unknown Error", "RESTART_APP"),
    71: ("CE4: Unknown Error", "RESTART_APP"),
    72: ("CE5: Unknown Error", "RESTART_APP"),
    73: (UNUSED, "CONTACT_SUPPORT"),
    74: ("NVLINK Error", "WORKFLOW_NVLINK_ERR"),
    75: ("CE6: Unknown Error", "RESTART_APP"),
    76: ("CE7: Unknown Error", "RESTART_APP"),
    77: ("CE8: Unknown Error", "RESTART_APP"),
    78: ("vGPU Start Error", "UPDATE_SWFW"),
    79: ("GPU has fallen off the bus", "RESTART_BM"),
    80: ("Corrupted data sent to GPU", "RESTART_APP"),
    81: (UNUSED, "CONTACT_SUPPORT"),
    82: ("NVJPG0 Error", "RESTART_APP"),
    83: ("NVDEC1 Error", "RESTART_APP"),
    84: ("NVDEC2 Error", "RESTART_APP"),
    85: ("CE9: Unknown Error", "RESTART_APP"),
    86: ("OFA Exception", "RESTART_APP"),
    87: (UNUSED, "CONTACT_SUPPORT"),
    88: ("NVDEC3 Error", "RESTART_APP"),
    89: ("NVDEC4 Error", "RESTART_APP"),
    90: (UNUSED, "CONTACT_SUPPORT"),
    91: (UNUSED, "CONTACT_SUPPORT"),
    92: ("High single-bit ECC error rate", "IGNORE"),
    93: ("Non-fatal violation of provisioned InfoROM wear limit", "IGNORE"),
    94: ("Contained memory error", "RESTART_APP"),
    95: ("Uncontained memory error", "RESET_GPU"),
    96: ("NVDEC5 Error", "RESTART_APP"),
    97: ("NVDEC6 Error", "RESTART_APP"),
    98: ("NVDEC7 Error", "RESTART_APP"),
    99: ("NVJPG1 Error", "RESTART_APP"),
    100: ("NVJPG2 Error", "RESTART_APP"),
    101: ("NVJPG3 Error", "RESTART_APP"),
    102: ("NVJPG4 Error", "RESTART_APP"),
    103: ("NVJPG5 Error", "RESTART_APP"),
    104: ("NVJPG6 Error", "RESTART_APP"),
    105: ("NVJPG7 Error", "RESTART_APP"),
    106: ("SMBPBI Test Message", "IGNORE"),
    107: ("SMBPBI Test Message Silent", "IGNORE"),
    108: (UNUSED, "IGNORE"),
    109: ("Context Switch Timeout Error", "RESET_GPU"),
    110: ("Security Fault Error", "RESET_GPU"),
    111: (UNUSED, "CONTACT_SUPPORT"),
    112: (UNUSED, "CONTACT_SUPPORT"),
    113: (UNUSED, "CONTACT_SUPPORT"),
    114: (UNUSED, "CONTACT_SUPPORT"),
    115: (UNUSED, "CONTACT_SUPPORT"),
    116: (UNUSED, "CONTACT_SUPPORT"),
    117: (UNUSED, "CONTACT_SUPPORT"),
    118: (UNUSED, "CONTACT_SUPPORT"),
    119: ("GSP RPC Timeout", "RESET_GPU"),
    120: ("GSP Error", "RESET_GPU"),
    121: ("C2C Error", "IGNORE"),
    122: (UNUSED, "CONTACT_SUPPORT"),
    123: (UNUSED, "CONTACT_SUPPORT"),
    124: (UNUSED, "CONTACT_SUPPORT"),
    125: (UNUSED, "CONTACT_SUPPORT"),
    126: ("CE10: Unknown Error", "RESTART_APP"),
    127: ("CE11: Unknown Error", "RESTART_APP"),
    128: ("CE12: Unknown Error", "RESTART_APP"),
    129: ("CE13: Unknown Error", "RESTART_APP"),
    130: ("CE14: Unknown Error", "RESTART_APP"),
    131: ("CE15: Unknown Error", "RESTART_APP"),
    132: ("CE16: Unknown Error", "RESTART_APP"),
    133: ("CE17: Unknown Error", "RESTART_APP"),
    134: ("CE18: Unknown Error", "RESTART_APP"),
    135: ("CE19: Unknown Error", "RESTART_APP"),
    136: ("Link Training Failed", "RESET_GPU"),
    137: ("NVLink Privilege Error", "IGNORE"),
    138: (UNUSED, "CONTACT_SUPPORT"),
    139: ("OFA1 Error", "RESTART_APP"),
    140: ("ECC Unrecovered Error", "RESET_GPU"),
    141: ("CUDA Fast Path Error", "IGNORE"),
    142: ("NVENC3 Error", "CONTACT_SUPPORT"),
    143: ("GPU Initialization Error", "RESET_GPU"),
    144: ("NVLINK: SAW Error", "WORKFLOW_NVLINK5_ERR"),
    145: ("NVLINK: RLW Error", "WORKFLOW_NVLINK5_ERR"),
    146: ("NVLINK: TLW Error", "WORKFLOW_NVLINK5_ERR"),
    147: ("NVLINK: TREX Error", "WORKFLOW_NVLINK5_ERR"),
    148: ("NVLINK: NVLPW_CTRL Error", "WORKFLOW_NVLINK5_ERR"),
    149: ("NVLINK: NETIR Error", "WORKFLOW_NVLINK5_ERR"),
    150: ("NVLINK: MSE Error", "WORKFLOW_NVLINK5_ERR"),
    151: ("Key rotation Error", "RESTART_VM"),
    152: ("DLA SMMU Error", "IGNORE"),
    153: ("DLA timeout Error", "IGNORE"),
    154: ("GPU Recovery Action Changed", "XID_154"),
    155: ("NVLINK: SW Defined Error", "RESET_GPU"),
    156: ("Resource Retirement Event", "RESET_GPU"),
    157: ("Resource Retirement Failure", "IGNORE"),
    158: ("GPU Fatal Timeout", "RESET_GPU"),
    159: ("CHI Non-Data Error", "CHECK_UVM"),
    160: ("Channel Retirement Event", "IGNORE"),
    161: ("Channel Retirement Failure", "IGNORE"),
    162: ("Power Smoothing HW Circuitry capability reengaged", "OBSERVE"),
    163: ("Power Smoothing HW Circuitry capability disengaged", "OBSERVE"),
    164: ("Power Smoothing HW Circuitry low lifetime reached", "OBSERVE"),
    165: ("Power Smoothing HW Circuitry lifetime exhausted", "RESET_GPU"),
    166: ("NVLink traffic before encryption was configured", "RESTART_APP"),
    167: ("PCIe fatal timeout", "RESET_GPU"),
    168: ("Errors found in the write-protected region", "RESET_GPU"),
    169: ("Internal micro-controller halt", "RESET_GPU"),
    170: ("Interrupt seen in confidential-computing mode", "RESTART_APP"),
    171: ("Uncorrectable DRAM error (with Xid 48)", "RESET_GPU"),
    172: ("Uncorrectable SRAM error (with Xid 48)", "RESET_GPU"),
}

# The immediate actions that need the node taken out: a GPU reset, a reboot, a mechanical check,
# the ECC and NVLink workflows (which end in a reset), and "contact support" for codes that
# should never appear.
NODE_ACTIONS = frozenset(
    {
        "RESET_GPU",
        "RESTART_BM",
        "RESTART_VM",
        "CHECK_MECHANICALS",
        "WORKFLOW_XID_48",
        "WORKFLOW_NVLINK_ERR",
        "WORKFLOW_NVLINK5_ERR",
        "CONTACT_SUPPORT",
    }
)
QUIET_ACTIONS = frozenset({"IGNORE", "OBSERVE"})
# Restart the application, but the fault is the GPU's (contained memory errors, coherency errors,
# confidential-computing link errors), not the application's code.
CONTAINED_HARDWARE = frozenset({94, 159, 166, 170})
# These report that something else failed first.
CASCADES = frozenset({43, 45})
CRITICAL = frozenset({48, 64, 74, 79, 95, 140, 171, 172})


@dataclass(frozen=True)
class XidGrade:
    name: str
    role: Role
    category: Category
    attribution: Attribution
    implicates_node: bool
    severity: Severity
    action: str = ""  # NVIDIA's immediate action, for explanations


def _grade(code: int, name: str, action: str) -> XidGrade:
    if code in CASCADES:
        return XidGrade(
            name,
            Role.CASCADE,
            Category.APPLICATION_ERROR,
            Attribution.APPLICATION,
            False,
            Severity.WARNING,
            action,
        )
    if action in NODE_ACTIONS:
        severity = (
            Severity.CRITICAL
            if code in CRITICAL or action != "CONTACT_SUPPORT"
            else (Severity.ERROR)
        )
        return XidGrade(
            name,
            Role.INITIATING,
            Category.GPU_HARDWARE,
            Attribution.HARDWARE,
            True,
            severity,
            action,
        )
    if action in QUIET_ACTIONS:
        return XidGrade(
            name,
            Role.CONTEXT,
            Category.GPU_HARDWARE,
            Attribution.HARDWARE,
            False,
            Severity.INFO,
            action,
        )
    if code in CONTAINED_HARDWARE:
        return XidGrade(
            name,
            Role.INITIATING,
            Category.GPU_HARDWARE,
            Attribution.HARDWARE,
            False,
            Severity.ERROR,
            action,
        )
    if action == "UPDATE_SWFW":
        return XidGrade(
            name,
            Role.INITIATING,
            Category.GPU_HARDWARE,
            Attribution.SYSTEM_SOFTWARE,
            False,
            Severity.WARNING,
            action,
        )
    # RESTART_APP: the application (a bad address, an engine exception it caused) is to blame.
    return XidGrade(
        name,
        Role.INITIATING,
        Category.APPLICATION_ERROR,
        Attribution.APPLICATION,
        False,
        Severity.WARNING,
        action,
    )


XID_CATALOGUE: dict[int, XidGrade] = {
    code: _grade(code, name, action) for code, (name, action) in CATALOGUE.items()
}

# A code newer than any catalogue we know: the GPU's, but not enough to take a node out.
_UNKNOWN = XidGrade(
    "Xid not in the catalogue",
    Role.INITIATING,
    Category.GPU_HARDWARE,
    Attribution.HARDWARE,
    False,
    Severity.WARNING,
)
NVLINK5 = range(144, 151)


def grade_xid(code: int, message: str) -> XidGrade:
    """The grade of one Xid line; ``message`` refines codes whose text says more."""
    grade = XID_CATALOGUE.get(code, _UNKNOWN)
    if code in NVLINK5 and "Nonfatal" in message:
        # Blackwell NVLink Xids carry their own fatality: a non-fatal one is logged and corrected.
        return XidGrade(
            grade.name + " (non-fatal)",
            Role.CONTEXT,
            Category.GPU_HARDWARE,
            Attribution.HARDWARE,
            False,
            Severity.INFO,
            "IGNORE",
        )
    if code == 154:
        return _recovery_action(grade, message)
    if code == 45:
        return _cleanup_after(grade, message)
    if code in (63, 64) and "reset gpu" in message.lower():
        # A row marked for remapping takes effect only at the next GPU reset; until then the
        # failing row stays in use, so the node goes out for that reset.
        return XidGrade(
            grade.name + " (pending until the GPU is reset)",
            Role.INITIATING,
            Category.GPU_HARDWARE,
            Attribution.HARDWARE,
            True,
            Severity.ERROR,
            "RESET_GPU",
        )
    return grade


_PREVIOUS_XID = re.compile(r"caused by previous Xid (\d{1,4})")


def _cleanup_after(grade: XidGrade, message: str) -> XidGrade:
    """Xid 45 is the driver cleaning up a channel after an earlier error; when it names that
    error, the earlier code's grade is the one that counts."""
    found = _PREVIOUS_XID.search(message)
    if found is None:
        return grade
    previous = int(found.group(1))
    if previous == 45 or previous in CASCADES:
        return grade
    cause = grade_xid(previous, "")
    if cause.role is not Role.INITIATING:
        return grade
    return XidGrade(
        f"{grade.name} after Xid {previous} ({cause.name})",
        cause.role,
        cause.category,
        cause.attribution,
        cause.implicates_node,
        cause.severity,
        cause.action,
    )


def _recovery_action(grade: XidGrade, message: str) -> XidGrade:
    """Xid 154 reports the GPU's recovery action changing; the new action is what counts."""
    after = message.split(" to ", 1)[-1]
    if "Reset Required" in after or "Reboot Required" in after or "Drain" in after:
        return XidGrade(
            grade.name + " (reset or reboot now required)",
            Role.INITIATING,
            Category.GPU_HARDWARE,
            Attribution.HARDWARE,
            True,
            Severity.CRITICAL,
            "RESET_GPU",
        )
    # "... changed from 0x1 (GPU Reset Required) to 0x0 (None)": recovered, or no change yet.
    return XidGrade(
        grade.name,
        Role.CONTEXT,
        Category.GPU_HARDWARE,
        Attribution.HARDWARE,
        False,
        Severity.INFO,
        "IGNORE",
    )


def xid_classification(code: int, message: str) -> tuple[Classification, str]:
    grade = grade_xid(code, message)
    classification = Classification(
        kind=Kind.CRASH,
        category=grade.category,
        attribution=grade.attribution,
        role=grade.role,
        implicates_node=grade.implicates_node,
        severity=grade.severity,
    )
    return classification, grade.name
