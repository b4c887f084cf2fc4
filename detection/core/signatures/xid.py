"""NVRM Xid codes graded after NVIDIA's Xid catalogue.

Sources: "Xid Errors" (docs.nvidia.com/deploy/xid-errors/index.html, the per-code table of
possible causes: hardware, driver, user application, bus, thermal, FB corruption) and "Analyzing
Xid Errors with the Xid Catalog" (docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html,
the immediate-action buckets RESTART_APP / RESET_GPU / RESTART_BM for Ampere and newer).

Not every Xid is fatal and not every Xid says the node is bad. Codes NVIDIA lists as typically
caused by the application or by a previous error (13, 31, 43, 45, 68, 69, ...) must not get a node
excluded; codes whose immediate action is a GPU reset or a reboot (48, 63, 64, 74, 79, 92, 94,
95, 119, 120, ...) do.
"""

from __future__ import annotations

from dataclasses import dataclass

from detection.core.constants import Role, Severity
from detection.core.signatures.model import Classification
from recovery_console.fleet.core.taxonomy import Attribution, Category, Kind


@dataclass(frozen=True)
class XidGrade:
    name: str
    role: Role
    category: Category
    attribution: Attribution
    implicates_node: bool
    severity: Severity


def _node(name: str, severity: Severity = Severity.CRITICAL) -> XidGrade:
    """The catalogue's action is a GPU reset or a reboot: the node should be taken out."""
    return XidGrade(
        name, Role.INITIATING, Category.GPU_HARDWARE, Attribution.HARDWARE, True, severity
    )


def _app(name: str, role: Role = Role.INITIATING) -> XidGrade:
    """Usually follows an application fault (bad address, killed context): restart the app."""
    return XidGrade(
        name, role, Category.APPLICATION_ERROR, Attribution.APPLICATION, False, Severity.WARNING
    )


def _driver(name: str) -> XidGrade:
    return XidGrade(
        name,
        Role.INITIATING,
        Category.GPU_HARDWARE,
        Attribution.SYSTEM_SOFTWARE,
        False,
        Severity.WARNING,
    )


XID_CATALOGUE: dict[int, XidGrade] = {
    8: _app("GPU stopped processing (idle timeout)"),
    13: _app("Graphics Engine Exception"),
    31: _app("GPU memory page fault (MMU fault)"),
    32: _driver("Invalid or corrupted push buffer stream"),
    38: _driver("Driver firmware error"),
    43: _app("GPU stopped processing (channel reset after a fault)", Role.CASCADE),
    45: _app("Preemptive cleanup due to previous errors", Role.CASCADE),
    46: _node("GPU stopped processing", Severity.ERROR),
    48: _node("Double Bit ECC error"),
    54: _node("Auxiliary power is not connected", Severity.ERROR),
    57: _node("Error programming video memory interface"),
    58: _node("Unstable video memory interface detected"),
    61: _node("Internal micro-controller breakpoint/warning", Severity.ERROR),
    62: _node("Internal micro-controller halt"),
    63: _node("ECC page retirement or row remapping recording event", Severity.ERROR),
    64: _node("ECC page retirement or row remapper recording failure"),
    68: _app("NVDEC0 exception"),
    69: _app("Graphics engine class error"),
    74: _node("NVLink error"),
    79: _node("GPU has fallen off the bus"),
    92: _node("High single-bit ECC error rate", Severity.ERROR),
    94: _node("Contained ECC error", Severity.ERROR),
    95: _node("Uncontained ECC error"),
    109: _app("Context switch timeout"),
    119: _node("GSP RPC timeout"),
    120: _node("GSP error"),
    121: _driver("C2C link corrected error"),
    123: _node("SPI PMU RPC write failure", Severity.ERROR),
    140: _node("Unrecovered ECC error"),
    143: _node("GPU initialization failure"),
    144: _node("NVLink SAW error"),
    145: _node("NVLink RLW error"),
    146: _node("NVLink TLW error"),
    147: _node("NVLink TREX error"),
    148: _node("NVLink NVLPW_CTRL error"),
    149: _node("NVLink NETIR error"),
    150: _node("NVLink MSE error"),
    154: _node("GPU recovery action changed", Severity.ERROR),
}

_UNKNOWN = XidGrade(
    "Xid not in the catalogue",
    Role.INITIATING,
    Category.GPU_HARDWARE,
    Attribution.HARDWARE,
    False,
    Severity.WARNING,
)


def grade_xid(code: int, message: str) -> XidGrade:
    """The grade of one Xid line; ``message`` refines codes whose text says more."""
    grade = XID_CATALOGUE.get(code, _UNKNOWN)
    if 144 <= code <= 150 and "Nonfatal" in message:
        # Blackwell NVLink Xids carry their own fatality: a non-fatal one is logged and corrected.
        return XidGrade(
            grade.name + " (non-fatal)",
            Role.INITIATING,
            Category.GPU_HARDWARE,
            Attribution.HARDWARE,
            False,
            Severity.WARNING,
        )
    if code == 154 and "(None)" in message.split(" to ", 1)[-1]:
        # "GPU recovery action changed from 0x1 (GPU Reset Required) to 0x0 (None)": recovered.
        return XidGrade(
            grade.name + " (back to none)",
            Role.CONTEXT,
            Category.GPU_HARDWARE,
            Attribution.HARDWARE,
            False,
            Severity.INFO,
        )
    return grade


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
