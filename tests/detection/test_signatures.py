"""The signature library: grouping of matched lines, their roles and categories.

Plain library tests (no database). Lines here are written in the documented formats of the
tools that print them; the collected real logs are exercised in ``test_real_logs.py``.
"""

from __future__ import annotations

import pytest

from detection.core.constants import Role
from detection.core.signatures import (
    MatchGroup,
    ScanResult,
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


# --- grouping -------------------------------------------------------------------------------


def test_a_flood_of_one_xid_is_one_finding_with_a_count_and_its_hosts() -> None:
    lines = [
        (
            f"Nov 29 11:00:{i % 60:02d} node-{i % 2:02d} kernel: NVRM: Xid "
            f"(PCI:0000:3b:00): 79, pid={1000 + i}, GPU has fallen off the bus."
        )
        for i in range(300)
    ]
    finding = only(scan(*lines))
    assert finding.count == 300
    assert finding.first_line == 1
    assert finding.hosts == ("node-00", "node-01")


def test_the_same_watchdog_line_on_512_ranks_is_one_finding_with_all_ranks() -> None:
    lines = [
        (
            f"[rank{r}]:[E321 02:07:08.408271257 ProcessGroupNCCL.cpp:607] [Rank {r}] "
            "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1580, "
            "OpType=ALLREDUCE, NumelIn=466119168, NumelOut=466119168, "
            f"Timeout(ms)=600000) ran for {600000 + r} milliseconds before timing out."
        )
        for r in range(512)
    ]
    finding = only(scan(*lines))
    assert finding.count == 512
    assert finding.ranks == tuple(range(512))
    assert finding.role is Role.CASCADE
    assert dict(finding.rank_values)[7] == "1580"


def test_different_messages_of_one_signature_stay_separate() -> None:
    result = scan(
        "RuntimeError: Expected all tensors to be on the same device",
        "ValueError: invalid literal for int() with base 10: 'abc'",
    )
    assert len(result.groups) == 2


def test_a_traceback_becomes_one_finding_with_the_exception_and_its_last_frame() -> None:
    result = scan(
        "[rank3]: Traceback (most recent call last):",
        '[rank3]:   File "/home/me/train.py", line 12, in <module>',
        "[rank3]:     main()",
        '[rank3]:   File "/home/me/train.py", line 8, in main',
        "[rank3]:     cfg['lr']",
        "[rank3]: KeyError: 'lr'",
    )
    finding = only(result)
    assert finding.detail("exception") == "KeyError"
    assert finding.detail("tb_file") == "/home/me/train.py"
    assert finding.detail("tb_line") == "8"
    assert finding.detail("tb_func") == "main"
    assert finding.classification.unrecoverable


def test_interleaved_tracebacks_are_assembled_per_rank() -> None:
    result = scan(
        "[rank0]: Traceback (most recent call last):",
        "[rank1]: Traceback (most recent call last):",
        '[rank0]:   File "/home/me/a.py", line 1, in f',
        '[rank1]:   File "/usr/lib/python3.10/site-packages/lib/b.py", line 2, in g',
        "[rank0]: ValueError: bad config value",
        "[rank1]: ValueError: bad config value",
    )
    finding = only(result)  # same message: grouped, ranks 0 and 1
    assert finding.ranks == (0, 1)
    assert finding.detail("tb_file") == "/home/me/a.py"


# --- roles ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "signature", "role"),
    [
        (
            "RuntimeError: CUDA error: an illegal memory access was encountered",
            "cuda_illegal_memory_access",
            Role.INITIATING,
        ),
        (
            (
                "CUDA kernel errors might be asynchronously reported at some other API "
                "call, so the stacktrace below might be incorrect."
            ),
            "hint_cuda_async",
            Role.CONTEXT,
        ),
        (
            "For debugging consider passing CUDA_LAUNCH_BLOCKING=1.",
            "hint_cuda_launch_blocking",
            Role.CONTEXT,
        ),
        (
            "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.",
            "hint_torch_dsa",
            Role.CONTEXT,
        ),
        (
            (
                "[E ProcessGroupNCCL.cpp:475] [Rank 2] Watchdog caught collective "
                "operation timeout: WorkNCCL(SeqNum=880, OpType=BROADCAST) ran for "
                "1800648 milliseconds before timing out."
            ),
            "nccl_watchdog_timeout",
            Role.CASCADE,
        ),
        (
            (
                "[rank144]:[E ProcessGroupNCCL.cpp:1316] [PG 0 Rank 144] Heartbeat "
                "monitor timed out! Process will be terminated after dumping debug info. "
                "workMetaList_.size()=1"
            ),
            "nccl_heartbeat_timeout",
            Role.CASCADE,
        ),
        (
            (
                "ncclRemoteError: A call failed possibly due to a network error or a "
                "remote process exiting prematurely."
            ),
            "nccl_remote_error",
            Role.CASCADE,
        ),
        (
            "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
            "torchelastic_child_failed",
            Role.CASCADE,
        ),
        ("srun: error: node-07: task 3: Killed", "srun_task_failed", Role.CASCADE),
        (
            (
                "RuntimeError: CUDA error: an illegal memory access was encountered (a "
                "previous CUDA error)"
            ),
            "cuda_illegal_memory_access",
            Role.INITIATING,
        ),
        (
            ("NCCL WARN Cuda failure 'unspecified launch failure' caused by a previous error"),
            "cuda_launch_failure",
            Role.INITIATING,
        ),
        (
            "RuntimeError: Error in the previous CUDA error handler",
            "cuda_previous_error",
            Role.CASCADE,
        ),
        (
            (
                "node-07:123:456 [0] NCCL WARN NET/IB : Got completion from peer "
                "10.0.0.2<1234> with error 12, opcode 0, len 0, vendor err 129"
            ),
            "nccl_ib_completion_error",
            Role.INITIATING,
        ),
        (
            (
                "node-07:123:456 [0] NCCL WARN NET/IB : Got completion from peer "
                "10.0.0.2<1234> with status=5 opcode=0"
            ),
            "nccl_ib_completion_error",
            Role.CASCADE,
        ),
    ],
)
def test_lines_are_initiating_cascade_or_context(line: str, signature: str, role: Role) -> None:
    finding = only(scan(line))
    assert finding.signature == signature
    assert finding.role is role


@pytest.mark.parametrize(
    ("line", "category", "attribution"),
    [
        (
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB",
            Category.CUDA_OOM,
            Attribution.APPLICATION,
        ),
        (
            "node-07:1:2 [0] NCCL WARN Cuda failure 'out of memory'",
            Category.CUDA_OOM,
            Attribution.APPLICATION,
        ),
        (
            "RuntimeError: CUDA error: uncorrectable ECC error encountered",
            Category.GPU_HARDWARE,
            Attribution.HARDWARE,
        ),
        (
            ("RuntimeError: CUDA error: uncorrectable NVLink error detected during the execution"),
            Category.GPU_HARDWARE,
            Attribution.HARDWARE,
        ),
        (
            "OSError: [Errno 28] No space left on device",
            Category.FILESYSTEM_IO,
            Attribution.SYSTEM_SOFTWARE,
        ),
        (
            "OSError: [Errno 116] Stale file handle",
            Category.FILESYSTEM_IO,
            Attribution.SYSTEM_SOFTWARE,
        ),
        (
            "OSError: [Errno 5] Input/output error",
            Category.FILESYSTEM_IO,
            Attribution.SYSTEM_SOFTWARE,
        ),
        (
            (
                "Nov 29 11:00:01 node-07 kernel: LustreError: 11-0: scratch-OST0003-osc: "
                "operation ost_write failed: rc = -107"
            ),
            Category.FILESYSTEM_IO,
            Attribution.SYSTEM_SOFTWARE,
        ),
        (
            "Nov 29 11:00:01 node-07 kernel: nfs: server fs01 not responding, still trying",
            Category.FILESYSTEM_IO,
            Attribution.SYSTEM_SOFTWARE,
        ),
        (
            (
                "Nov 29 11:00:01 node-07 kernel: Out of memory: Killed process 4242 "
                "(python) total-vm:123kB"
            ),
            Category.NODE_OR_PROCESS_FAILURE,
            Attribution.APPLICATION,
        ),
        (
            (
                "torch.distributed.elastic.multiprocessing.api.SignalException: Process "
                "293814 got signal: 15"
            ),
            Category.NODE_OR_PROCESS_FAILURE,
            Attribution.SCHEDULER,
        ),
        (
            "  traceback : Signal 9 (SIGKILL) received by PID 14750",
            Category.NODE_OR_PROCESS_FAILURE,
            Attribution.SYSTEM_SOFTWARE,
        ),
        (
            (
                "slurmstepd: error: *** JOB 1234 ON node-03 CANCELLED AT "
                "2024-04-20T09:09:37 DUE TO NODE FAILURE ***"
            ),
            Category.NODE_OR_PROCESS_FAILURE,
            Attribution.HARDWARE,
        ),
        (
            (
                "slurmstepd: error: *** JOB 1234 ON node-03 CANCELLED AT "
                "2024-04-20T09:09:37 DUE TO PREEMPTION ***"
            ),
            Category.NODE_OR_PROCESS_FAILURE,
            Attribution.SCHEDULER,
        ),
        (
            "srun: error: Node failure on node-07",
            Category.NODE_OR_PROCESS_FAILURE,
            Attribution.HARDWARE,
        ),
        (
            " iteration     3385/    8000 | lm loss: nan | loss scale: 1.0 |",
            Category.NUMERICAL_DIVERGENCE,
            Attribution.APPLICATION,
        ),
        (
            "{'loss': inf, 'learning_rate': 1e-05, 'epoch': 0.3}",
            Category.NUMERICAL_DIVERGENCE,
            Attribution.APPLICATION,
        ),
        (
            (
                "Exception: Current loss scale already at minimum - cannot decrease scale "
                "anymore. Exiting run."
            ),
            Category.NUMERICAL_DIVERGENCE,
            Attribution.APPLICATION,
        ),
        (
            "torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError: ",
            Category.INTERCONNECT_NETWORK,
            Attribution.INTERCONNECT,
        ),
        (
            (
                "torch.distributed.DistStoreError: Timed out after 901 seconds waiting "
                "for clients. 1/3 clients joined."
            ),
            Category.INTERCONNECT_NETWORK,
            Attribution.INTERCONNECT,
        ),
        (
            (
                "RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:911, unhandled system "
                "error, NCCL version 2.7.8"
            ),
            Category.INTERCONNECT_NETWORK,
            Attribution.INTERCONNECT,
        ),
    ],
)
def test_each_family_of_failure_gets_its_category(
    line: str, category: Category, attribution: Attribution
) -> None:
    finding = only(scan(line))
    assert (finding.category, finding.attribution) == (category, attribution)


def test_the_node_named_by_srun_is_implicated_but_the_host_printing_node_failure_is_not() -> None:
    named = only(scan("srun: error: Node failure on node-07"))
    assert named.implicates_node and named.hosts == ("node-07",)
    cancelled = only(
        scan(
            "slurmstepd: error: *** JOB 1 ON node-03 CANCELLED AT 2024-04-20T09:09:37 DUE "
            "TO NODE FAILURE ***"
        )
    )
    assert not cancelled.implicates_node


@pytest.mark.parametrize(
    ("line", "unrecoverable"),
    [
        ("ModuleNotFoundError: No module named 'tensorboard'", True),
        ("ImportError: cannot import name 'foo' from 'bar'", True),
        ("SyntaxError: invalid syntax", True),
        ("RuntimeError: mat1 and mat2 shapes cannot be multiplied (4x3 and 4x5)", True),
        ("RuntimeError: shape '[2, 3]' is invalid for input of size 5", True),
        ("KeyError: 'lr'", False),  # no traceback: we cannot tell it came from user code
        ("RuntimeError: Expected all tensors to be on the same device", False),
        ("AssertionError", True),  # the code's own check of its assumptions
        ("FileNotFoundError: [Errno 2] No such file or directory: 'data/train.bin'", True),
        ("ConnectionResetError: [Errno 104] Connection reset by peer", False),
    ],
)
def test_only_errors_a_retry_cannot_fix_are_unrecoverable(line: str, unrecoverable: bool) -> None:
    assert only(scan(line)).classification.unrecoverable is unrecoverable


def test_a_config_error_in_library_code_is_not_treated_as_unrecoverable() -> None:
    result = scan(
        "Traceback (most recent call last):",
        (
            '  File "/opt/conda/lib/python3.10/site-packages/transformers/trainer.py", line 10, '
            "in train"
        ),
        "KeyError: 'input_ids'",
    )
    assert not only(result).classification.unrecoverable


def test_an_exception_name_mentioned_mid_sentence_is_not_a_finding() -> None:
    assert scan("INFO retrying after we caught a ValueError: transient").groups == ()


def test_loss_scale_overflows_are_normal_until_the_scale_nears_its_floor() -> None:
    healthy = (
        "[2023-04-28 06:51:30,648] [INFO] [loss_scaler.py:181:update_scale] [deepspeed] "
        "OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536, reducing to 32768"
    )
    assert scan(healthy).groups == ()
    diverged = "[deepscale] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 1, reducing to 1"
    assert only(scan(diverged)).category is Category.NUMERICAL_DIVERGENCE
    # Halved from 2**16 twelve times: the gradients overflow step after step.
    low = "[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 16, reducing to 8"
    assert only(scan(low)).category is Category.NUMERICAL_DIVERGENCE
    assert scan(low.replace("16, reducing to 8", "32, reducing to 16")).groups == ()
