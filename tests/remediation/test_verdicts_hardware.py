"""Verdicts on hardware evidence and hosts: graded Xids, ECC, the node a line names (in the
line, by its log, through the rank layout) and excluding it.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from detection.core.context import DiagnosisContext
from detection.core.diagnosis import diagnose_log_lines
from detection.core.telemetry import LogLine
from fleet.core.taxonomy import (
    Action,
    Attribution,
    Category,
    ConfidenceLabel,
    Kind,
)
from tests.remediation.verdicts import EIGHT_NODES, diagnose, judged

# --- hardware and hosts ---------------------------------------------------------------------


def test_xid_79_on_a_named_host_excludes_that_host() -> None:
    result = diagnose(
        (
            "Nov 29 11:00:01 node-07 kernel: NVRM: GPU at PCI:0000:3b:00: "
            "GPU-0b11d014-1685-04bd-26ed-5fc0bc1c44ae"
        ),
        (
            "Nov 29 11:00:01 node-07 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1896, "
            "GPU has fallen off the bus."
        ),
        ("Nov 29 11:00:01 node-07 kernel: NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus."),
    )
    assert (result.category, result.attribution, result.action) == (
        Category.GPU_HARDWARE,
        Attribution.HARDWARE,
        Action.RESTART_EXCLUDING_NODE,
    )
    assert result.implicated_hosts == ("node-07",)
    assert result.confidence.label is ConfidenceLabel.ESTABLISHED


@pytest.mark.parametrize("code", [48, 64, 74, 79, 95, 110, 119, 120])
def test_xids_that_need_a_reset_exclude_the_node_they_appear_on(code: int) -> None:
    line = f"Nov 29 11:00:01 node-07 kernel: NVRM: Xid (PCI:0000:3b:00): {code}, pid=1, details"
    result = diagnose(line)
    assert result.action is Action.RESTART_EXCLUDING_NODE
    assert result.implicated_hosts == ("node-07",)


def test_a_row_remap_pending_until_a_reset_excludes_the_node_but_a_done_remap_does_not() -> None:
    pending = (
        "May 19 07:08:57 ip-26-0-146-100 kernel: NVRM: Xid (PCI:0000:10:1c): 63, pid=1850,"
        " Row Remapper: New row marked for remapping, reset gpu to activate"
    )
    assert diagnose(pending).action is Action.RESTART_EXCLUDING_NODE
    logged = "Nov 29 11:00:01 node-07 kernel: NVRM: Xid (PCI:0000:3b:00): 63, pid=1, details"
    assert (diagnose(logged).kind, diagnose(logged).action) == (Kind.NONE, Action.NONE)


def test_a_contained_memory_error_restarts_on_the_same_node() -> None:
    # Xid 94: the GPU contained the error to the one application; NVIDIA says restart it.
    line = "Nov 29 11:00:01 node-07 kernel: NVRM: Xid (PCI:0000:3b:00): 94, pid=1, Contained"
    result = diagnose(line)
    assert (result.category, result.action) == (Category.GPU_HARDWARE, Action.RESTART)


def test_xid_45_takes_the_grade_of_the_xid_it_names_as_its_cause() -> None:
    after_nvlink = (
        "kernel: NVRM: Xid (PCI:0000:dc:00): 45, pid=1818990, name=python3, Ch 00000001"
        " caused by previous Xid 149"
    )
    assert diagnose(after_nvlink).action is Action.RESTART_EXCLUDING_NODE
    plain = "kernel: NVRM: Xid (PCI:0000:dc:00): 45, pid=1818990, name=python3, Ch 00000001"
    assert diagnose(plain).action is not Action.RESTART_EXCLUDING_NODE


@pytest.mark.parametrize("code", [13, 31, 43, 45])
def test_xid_13_31_43_45_do_not_exclude_the_node_even_when_it_is_known(code: int) -> None:
    line = f"Nov 29 11:00:01 node-07 kernel: NVRM: Xid (PCI:0000:3b:00): {code}, pid=1, details"
    result = diagnose(line, context=DiagnosisContext(source_host="node-07"))
    assert result.action is not Action.RESTART_EXCLUDING_NODE
    assert result.implicated_hosts == ()


def test_gpu_hardware_evidence_outranks_an_earlier_cuda_error_it_caused() -> None:
    result = diagnose(
        "[rank9]: RuntimeError: CUDA error: unspecified launch failure",
        "[rank9]: RuntimeError: CUDA error: an illegal memory access was encountered",
        (
            "Nov 29 11:00:05 node-01 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU "
            "has fallen off the bus."
        ),
        context=EIGHT_NODES,
    )
    assert result.category is Category.GPU_HARDWARE
    assert result.implicated_hosts == ("node-01",)
    assert result.evidence[0].line == 3


def test_a_rank_maps_to_its_node_when_the_log_names_no_host() -> None:
    result = diagnose(
        "[rank12]: RuntimeError: CUDA error: uncorrectable ECC error encountered",
        context=EIGHT_NODES,
    )
    assert result.implicated_hosts == ("node-01",)
    assert result.action is Action.RESTART_EXCLUDING_NODE


def test_node_local_hardware_without_a_host_still_excludes_the_node_that_logged_it() -> None:
    result = diagnose("RuntimeError: CUDA error: uncorrectable ECC error encountered")
    assert (result.category, result.action, result.implicated_hosts) == (
        Category.GPU_HARDWARE,
        Action.RESTART_EXCLUDING_NODE,
        (),
    )
    assert "the node that logged line 1" in result.explanation


def test_a_fully_qualified_host_is_matched_to_the_node_list() -> None:
    result = diagnose(
        "Nov 29 11:00:01 node-03.cluster.local kernel: NVRM: Xid (PCI:0000:3b:00): 48, DBE",
        context=EIGHT_NODES,
    )
    assert result.implicated_hosts == ("node-03",)


def test_a_node_system_log_names_its_host_through_the_context() -> None:
    result = diagnose(
        "[ 1843.308145] NVRM: Xid (PCI:0000:44:00): 79, GPU has fallen off the bus",
        context=DiagnosisContext(source_host="node-05"),
    )
    assert result.implicated_hosts == ("node-05",)


def test_telemetry_records_carry_the_host_of_a_kernel_log() -> None:
    at = datetime(2024, 11, 29, 11, 0, tzinfo=UTC)
    records = [
        LogLine(at=at, text="iteration 10/100 | lm loss: 2.0 |", job_id="42"),
        LogLine(
            at=at, text="NVRM: Xid (PCI:0000:3b:00): 95, pid=1, Uncontained ECC", host="node-02"
        ),
    ]
    result = judged(diagnose_log_lines(records))
    assert result.implicated_hosts == ("node-02",)
    assert "the line was read from its log" in result.explanation


def test_ib_errors_from_one_host_exclude_it() -> None:
    result = diagnose(
        (
            "node-03:3468:3905 [4] NCCL WARN NET/IB : Got completion from peer "
            "10.0.0.9<54862> with status=12 opcode=0 len=0 vendor err 129 (Recv)"
        ),
    )
    assert result.implicated_hosts == ("node-03",)
    assert result.action is Action.RESTART_EXCLUDING_NODE


def test_ib_errors_from_several_hosts_do_not_name_a_culprit() -> None:
    result = diagnose(
        (
            "node-03:1:2 [4] NCCL WARN NET/IB : Got completion from peer 10.0.0.9<1> with "
            "status=12 opcode=0 len=0 vendor err 129 (Recv)"
        ),
        (
            "node-04:1:2 [4] NCCL WARN NET/IB : Got completion from peer 10.0.0.9<2> with "
            "status=12 opcode=0 len=0 vendor err 129 (Recv)"
        ),
    )
    assert result.action is Action.RESTART
    assert result.implicated_hosts == ()
    assert result.confidence.label is ConfidenceLabel.HYPOTHESIS
