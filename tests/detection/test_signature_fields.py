"""The signature library: where a line came from (host, rank, GPU, job, PCI id) and how
NVIDIA's Xid catalogue grades each code.

Plain library tests (no database). Lines here are written in the documented formats of the
tools that print them; the collected real logs are exercised in ``test_real_logs.py``.
"""

from __future__ import annotations

import pytest

from detection.core.constants import Role
from detection.core.signatures import (
    MatchGroup,
    ScanResult,
    extract_fields,
    grade_xid,
    scan_lines,
)
from fleet.core.taxonomy import Attribution, Category


def scan(*lines: str) -> ScanResult:
    return scan_lines(list(lines))


def only(result: ScanResult) -> MatchGroup:
    assert len(result.groups) == 1, result.groups
    return result.groups[0]


def names(result: ScanResult) -> list[str]:
    return [finding.signature for finding in result.groups]


# --- where a line came from -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "host", "rank", "local_rank"),
    [
        ("[rank12]:RuntimeError: boom", None, 12, None),
        ("[rank12]: RuntimeError: boom", None, 12, None),
        ("[default3]:RuntimeError: boom", None, None, 3),
        ("12: RuntimeError: boom", None, 12, None),
        ("12: [rank12]: RuntimeError: boom", None, 12, None),
        ("gpu-node-07: RuntimeError: boom", "gpu-node-07", None, None),
        ("node-07:RuntimeError: boom", "node-07", None, None),
        ("worker-5: [rank22]: RuntimeError: boom", "worker-5", 22, None),
        ("node-07:12345:12399 [3] NCCL WARN Net : boom", "node-07", None, 3),
        (
            "Nov 29 11:00:01 node-07 kernel: NVRM: Xid (PCI:0000:3b:00): 79, boom",
            "node-07",
            None,
            None,
        ),
        ("2024-11-29T11:00:01+00:00 gpu012 kernel: NVRM: boom", "gpu012", None, None),
        ("[E ProcessGroupNCCL.cpp:475] [Rank 3] Watchdog caught", None, 3, None),
        ("[rank3]:[E ProcessGroupNCCL.cpp:1664] [PG 1 Rank 3] Exception", None, 3, None),
        ("x NCCL INFO comm 0x7f rank 36 nranks 64 cudaDev 4 localRank 4", None, 36, 4),
        ("  rank      : 0 (local_rank: 0)", None, 0, 0),
    ],
)
def test_prefixes_give_host_rank_and_local_rank(
    line: str, host: str | None, rank: int | None, local_rank: int | None
) -> None:
    fields = extract_fields(line)
    assert (fields.host, fields.rank, fields.local_rank) == (host, rank, local_rank)


@pytest.mark.parametrize("line", ["RuntimeError: boom", "WARNING: boom", "cuda:0: boom"])
def test_words_before_a_colon_are_not_mistaken_for_hosts(line: str) -> None:
    assert extract_fields(line).host is None


def test_prefixes_are_peeled_off_the_message() -> None:
    fields = extract_fields("worker-5: [rank22]: [2024-01-01 10:00:00,123] [INFO] KeyError: 'lr'")
    assert fields.message == "KeyError: 'lr'"


def test_an_xid_line_gives_code_pci_and_host() -> None:
    finding = only(
        scan(
            "Nov 29 11:00:01 node-07 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1896, "
            "GPU has fallen off the bus."
        )
    )
    assert finding.xids == (79,)
    assert finding.pci_ids == ("0000:3b:00",)
    assert finding.hosts == ("node-07",)


def test_gpu_and_job_ids_are_read_from_the_message() -> None:
    oom = only(
        scan(
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU "
            "5; 79.3 GiB total capacity)"
        )
    )
    assert oom.gpus == (5,)
    limit = only(
        scan(
            "slurmstepd: error: *** JOB 494583 ON node-3 CANCELLED AT 2024-04-20T09:09:37 "
            "DUE TO TIME LIMIT ***"
        )
    )
    assert limit.job_ids == ("494583",)


# --- Xid grading ----------------------------------------------------------------------------


@pytest.mark.parametrize("code", [48, 64, 74, 79, 95, 110, 119, 120, 140, 171])
def test_xids_the_catalogue_fixes_with_a_reset_or_reboot_implicate_the_node(code: int) -> None:
    grade = grade_xid(code, "")
    assert grade.implicates_node
    assert grade.category is Category.GPU_HARDWARE
    assert grade.attribution is Attribution.HARDWARE


@pytest.mark.parametrize("code", [13, 31, 43, 45])
def test_xids_that_follow_application_faults_do_not_implicate_the_node(code: int) -> None:
    grade = grade_xid(code, "")
    assert not grade.implicates_node
    assert grade.attribution is Attribution.APPLICATION


def test_xid_13_does_not_implicate_the_node() -> None:
    finding = only(
        scan(
            "kernel: NVRM: Xid (PCI:0000:43:00): 13, pid='<unknown>', name=<unknown>, "
            "Graphics Exception: ESR 0x52e7b0=0x101000e"
        )
    )
    assert not finding.implicates_node
    assert finding.category is Category.APPLICATION_ERROR


@pytest.mark.parametrize("code", [63, 92, 93])
def test_xids_the_catalogue_says_to_ignore_are_context(code: int) -> None:
    grade = grade_xid(code, "")
    assert (grade.role, grade.implicates_node) == (Role.CONTEXT, False)


def test_a_contained_memory_error_is_the_gpus_but_leaves_the_node_in() -> None:
    grade = grade_xid(94, "")
    assert (grade.category, grade.role, grade.implicates_node) == (
        Category.GPU_HARDWARE,
        Role.INITIATING,
        False,
    )


def test_a_row_remap_waiting_for_a_reset_takes_the_node_out() -> None:
    grade = grade_xid(63, "Row Remapper: New row marked for remapping, reset gpu to activate")
    assert grade.implicates_node and grade.action == "RESET_GPU"


def test_xid_43_and_45_are_cascades_of_an_earlier_fault() -> None:
    assert grade_xid(43, "").role is Role.CASCADE
    assert grade_xid(45, "ch 3").role is Role.CASCADE
    # Unless Xid 45 names its cause: then the cause's grade is the one that counts.
    after = grade_xid(45, "Ch 00000001 caused by previous Xid 149")
    assert (after.role, after.implicates_node) == (Role.INITIATING, True)
    assert grade_xid(45, "caused by previous Xid 43").role is Role.CASCADE


def test_an_unknown_xid_is_hardware_but_does_not_exclude_the_node() -> None:
    grade = grade_xid(9999, "")
    assert grade.category is Category.GPU_HARDWARE
    assert not grade.implicates_node


def test_a_non_fatal_nvlink_xid_does_not_implicate_the_node() -> None:
    line = (
        "NVRM: Xid (PCI:0018:01:00): 145, RLW_RXPIPE Nonfatal XC0 i0 Link 13 (0x0409a0c2 "
        "0x00000008)"
    )
    assert not only(scan(line)).implicates_node
    fatal = (
        "NVRM: Xid (PCI:0000:00:00): 149, NETIR_LINK_EVT Fatal XC0 i0 Link 00 (0x025001c6 "
        "0x00000000)"
    )
    assert only(scan(fatal)).implicates_node
