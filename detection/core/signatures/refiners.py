"""Refiners: a second look at a matched line that grades it more finely than its signature's
default (an Xid's code, an exception's type and where it was raised, an InfiniBand status, a
loss scale) and says how repeats of it group."""

from __future__ import annotations

from collections.abc import Mapping

from detection.core.constants import Role, Severity
from detection.core.signatures.model import Classification, Refinement, classify, compile_re
from detection.core.signatures.xid import xid_classification
from fleet.core.taxonomy import Attribution, Category, Kind

K, C, A, R, S = Kind, Category, Attribution, Role, Severity


def refine_xid(default: Classification, message: str, values: Mapping[str, str]) -> Refinement:
    code = int(values["xid"])
    classification, name = xid_classification(code, message)
    details = [("xid", str(code)), ("xid_name", name)]
    if values.get("pci"):
        details.append(("pci", values["pci"]))
    variant = "application" if classification.category is C.APPLICATION_ERROR else ""
    return Refinement(
        classification, group_key=f"xid:{code}", details=tuple(details), variant=variant
    )


def flood(default: Classification, message: str, values: Mapping[str, str]) -> Refinement:
    """The same line on many ranks is one event, whatever numbers it carries."""
    return Refinement(default, group_key="all")


_SEQ = compile_re(r"SeqNum=(?P<seq>\d+)")
_OPTYPE = compile_re(r"OpType=(?P<op>\w+)")


def refine_watchdog(default: Classification, message: str, values: Mapping[str, str]) -> Refinement:
    seq = _SEQ.search(message)
    op = _OPTYPE.search(message)
    details = []
    if op is not None:
        details.append(("op_type", op["op"]))
    return Refinement(
        default,
        group_key="all",
        details=tuple(details),
        rank_value=seq["seq"] if seq is not None else None,
    )


# IBV_WC_* statuses that say the local side went wrong (a protection or length error on its own
# memory registration, usually GPUDirect RDMA set-up) or that the queue pair was already in error
# (flushed): no node's hardware is shown to be at fault.
_IB_NOT_NODE_LOCAL = {"1", "2", "4", "5", "10"}


def refine_ib(default: Classification, message: str, values: Mapping[str, str]) -> Refinement:
    status = values.get("ibstatus") or values.get("ibstatus2") or "?"
    details = (("peer", values.get("peer", "")), ("ib_status", status))
    if status == "5":
        # IBV_WC_WR_FLUSH_ERR: the queue pair was already in error; something else went first.
        flushed = classify(
            K.CRASH, C.INTERCONNECT_NETWORK, A.INTERCONNECT, R.CASCADE, False, S.WARNING
        )
        return Refinement(flushed, group_key="ib:5", details=details)
    if status in _IB_NOT_NODE_LOCAL:
        local = classify(
            K.CRASH, C.INTERCONNECT_NETWORK, A.INTERCONNECT, R.INITIATING, False, S.ERROR
        )
        return Refinement(local, group_key=f"ib:{status}", details=details)
    return Refinement(default, group_key=f"ib:{status}", details=details)


# Dynamic loss scaling halves the scale on every overflow and starts in the thousands (2**16 in
# DeepSpeed, 2**32 in Megatron); skips there are normal. A scale this low means the gradients
# overflow step after step.
OVERFLOW_FLOOR = 16.0


def refine_overflow(
    default: Classification, message: str, values: Mapping[str, str]
) -> Refinement | None:
    try:
        scale = float(values.get("scale", "inf"))
    except ValueError:
        return None
    if scale > OVERFLOW_FLOOR:
        return None
    return Refinement(default, group_key="min-scale")


_RANK_LIST = compile_re(r"\d{1,6}")


def refine_ranks(default: Classification, message: str, values: Mapping[str, str]) -> Refinement:
    """A line that names several ranks (``Affected ranks: [76, 13, 45]``) implicates each."""
    listed = values.get("ranks") or values.get("rank") or ""
    ranks = tuple(int(token) for token in listed.replace(",", " ").split() if token.isdigit())
    return Refinement(default, group_key="all", ranks=ranks[:1000])


_EXCEPTION_LINE = compile_re(
    r"^(?P<exc>(?:[A-Za-z_]\w*\.)*(?P<short>(?:[A-Z]\w*)?(?:Error|Exception|Exit|Interrupt)))"
    r"(?::\s?(?P<excmsg>.*))?$"
)
_SHAPE_MISMATCH = compile_re(
    r"must match the size of tensor|size mismatch|shape '\[[^\]]*\]' is invalid for input"
    r"|mat1 and mat2 shapes cannot be multiplied|Sizes of tensors must match"
    r"|Error\(s\) in loading state_dict|The expanded size of the tensor"
    r"|to have \d+ channels, but got \d+ channels"
)
_LIBRARY_PATH = compile_re(
    r"site-packages|dist-packages|/lib/python\d|<frozen|importlib|<string>|/usr/lib/python"
)

# A retry cannot fix these wherever they are raised.
_ALWAYS_FATAL = frozenset(
    {
        "ModuleNotFoundError",
        "ImportError",
        "SyntaxError",
        "IndentationError",
        "TabError",
        "NameError",
        "UnboundLocalError",
        # Assertions guard the code's own assumptions (shapes, divisibility, config values).
        "AssertionError",
        "NotImplementedError",
        # A missing file or script stays missing on the next attempt.
        "FileNotFoundError",
        "IsADirectoryError",
        "NotADirectoryError",
    }
)
# Bad configuration: fatal when raised by the user's own code.
_FATAL_IN_USER_CODE = frozenset({"KeyError", "ValueError", "TypeError", "AttributeError"})

_EXC_CASCADE = classify(K.CRASH, C.NODE_OR_PROCESS_FAILURE, A.NONE, R.CASCADE, False, S.WARNING)
_EXC_CONTEXT = classify(K.NONE, C.BENIGN, A.NONE, R.CONTEXT, False, S.INFO)
_EXC_SPECIAL: dict[str, Classification] = {
    "KeyboardInterrupt": _EXC_CONTEXT,
    "SystemExit": _EXC_CONTEXT,
    "SignalException": classify(
        K.CRASH, C.NODE_OR_PROCESS_FAILURE, A.SCHEDULER, R.CASCADE, False, S.WARNING
    ),
    "ProcessExitedException": _EXC_CASCADE,
    "ProcessRaisedException": _EXC_CASCADE,
    "DistBackendError": classify(
        K.CRASH, C.INTERCONNECT_NETWORK, A.INTERCONNECT, R.CASCADE, False, S.WARNING
    ),
    # The network, not the code: a peer or a service went away, or did not answer in time.
    **dict.fromkeys(
        (
            "ConnectionError",
            "ConnectionResetError",
            "ConnectionRefusedError",
            "ConnectionAbortedError",
            "BrokenPipeError",
            "TimeoutError",
        ),
        classify(K.CRASH, C.INTERCONNECT_NETWORK, A.INTERCONNECT, R.INITIATING, False, S.ERROR),
    ),
    "MemoryError": classify(
        K.CRASH, C.NODE_OR_PROCESS_FAILURE, A.APPLICATION, R.INITIATING, False, S.ERROR
    ),
}


def refine_exception(
    default: Classification, message: str, values: Mapping[str, str]
) -> Refinement | None:
    match = _EXCEPTION_LINE.search(message)
    if match is None:
        # Mentioned mid-sentence, not raised: not a finding.
        return None
    short = match["short"]
    text = match.get("excmsg", "")
    details = (("exception", short), ("exception_message", text[:300]))
    special = _EXC_SPECIAL.get(short)
    if special is not None:
        return Refinement(special, group_key=f"exc:{short}", details=details)
    tb_file = values.get("tb_file")
    in_user_code = bool(tb_file) and _LIBRARY_PATH.search(tb_file or "") is None
    fatal = (
        short in _ALWAYS_FATAL
        or (short in _FATAL_IN_USER_CODE and in_user_code)
        or _SHAPE_MISMATCH.search(text) is not None
    )
    classification = classify(
        K.CRASH, C.APPLICATION_ERROR, A.APPLICATION, R.INITIATING, False, S.ERROR, fatal
    )
    return Refinement(classification, details=details)
