"""The signature library: extraction, grading, grouping, roles, custom signatures, safety.

Plain library tests (no database). Lines here are written in the documented formats of the
tools that print them; the collected real logs are exercised in ``test_real_logs.py``.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from detection.constants import MAX_LINE_CHARS, Attribution, Category, Kind, Role, Severity
from detection.signatures import (
    BUILTIN_SIGNATURES,
    Finding,
    InvalidSignature,
    ScanResult,
    Signature,
    build_library,
    compile_signature,
    default_library,
    extract_fields,
    grade_xid,
    scan_lines,
)


def scan(*lines: str) -> ScanResult:
    return scan_lines(list(lines))


def only(result: ScanResult) -> Finding:
    assert len(result.findings) == 1, result.findings
    return result.findings[0]


def names(result: ScanResult) -> list[str]:
    return [finding.signature for finding in result.findings]


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


@pytest.mark.parametrize("code", [48, 63, 64, 74, 79, 92, 94, 95, 119, 120])
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


def test_xid_43_and_45_are_cascades_of_an_earlier_fault() -> None:
    assert grade_xid(43, "").role is Role.CASCADE
    assert grade_xid(45, "caused by previous Xid 149").role is Role.CASCADE


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
    assert len(result.findings) == 2


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
        ("AssertionError", False),
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
    assert scan("INFO retrying after we caught a ValueError: transient").findings == ()


def test_loss_scale_overflows_are_normal_until_the_scale_reaches_one() -> None:
    healthy = (
        "[2023-04-28 06:51:30,648] [INFO] [loss_scaler.py:181:update_scale] [deepspeed] "
        "OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536, reducing to 32768"
    )
    assert scan(healthy).findings == ()
    diverged = "[deepscale] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 1, reducing to 1"
    assert only(scan(diverged)).category is Category.NUMERICAL_DIVERGENCE


# --- no false positives ---------------------------------------------------------------------

ORDINARY = [
    (
        " iteration      100/  500000 | consumed samples:        12800 | elapsed time per "
        "iteration (ms): 1234.5 | learning rate: 1.500E-04 | global batch size:   128 | "
        "lm loss: 2.345678E+00 | loss scale: 65536.0 | grad norm: 1.234 | number of "
        "skipped iterations:   0 | number of nan iterations:   0 |"
    ),
    (
        "[2024-05-01 10:00:00,000] [INFO] [logging.py:96:log_dist] [Rank 0] step=100, "
        "skipped=0, lr=[0.0001], mom=[(0.9, 0.95)]"
    ),
    "steps: 100 loss: 2.3051 iter time (s): 1.234 samples/sec: 103.7",
    "{'loss': 2.3051, 'grad_norm': 1.25, 'learning_rate': 4.9e-05, 'epoch': 0.12}",
    (
        "{'train_runtime': 1234.5, 'train_samples_per_second': 10.2, 'train_loss': 1.93, "
        "'epoch': 3.0}"
    ),
    (
        "Epoch 0:   6%|██  | 32040/500150 [6:28:43<94:39:17,  1.37it/s, loss=2.6, "
        "v_num=95nc, reduced_train_loss=2.590]"
    ),
    "node-07:12345:12399 [3] NCCL INFO Channel 00/0 : 3[3] -> 4[4] via P2P/CUMEM",
    (
        "node-07:12345:12399 [3] NCCL INFO comm 0x55f7096ee250 rank 3 nranks 8 cudaDev 3 "
        "nvmlDev 3 busId e3000 commId 0x5683b92c7c90bf77 - Init COMPLETE"
    ),
    "node-07:12345:12399 [3] NCCL INFO NCCL_SOCKET_IFNAME set by environment to ib0",
    (
        "/opt/conda/lib/python3.10/site-packages/torch/nn/modules/module.py:1879: "
        "UserWarning: Positional args are being deprecated, use kwargs instead."
    ),
    (
        "/opt/conda/lib/python3.10/site-packages/transformers/training_args.py:1525: "
        "FutureWarning: `evaluation_strategy` is deprecated"
    ),
    "  warnings.warn(",
    "node-07:12345:12345 [0] misc/ibvwrap.cc:63 NCCL WARN Failed to open libibverbs.so[.1]",
    "node-07:12345:12345 [0] NCCL WARN NCCL_IB_GID_INDEX is deprecated, ignoring",
    (
        "W1010 11:39:41.458000 140602427192448 torch/distributed/run.py:757] Setting "
        "OMP_NUM_THREADS environment variable for each process to be 1 in default"
    ),
    "saving checkpoint at iteration    1000 to /checkpoints/run1",
    "validation loss at iteration 1000 | lm loss value: 2.301 | lm loss PPL: 9.98 |",
]


@pytest.mark.parametrize("line", ORDINARY)
def test_ordinary_lines_are_never_flagged(line: str) -> None:
    assert scan(line).findings == ()


def test_known_benign_nccl_warnings_are_counted_but_not_flagged() -> None:
    result = scan("node-07:1:1 [0] misc/ibvwrap.cc:63 NCCL WARN Failed to open libibverbs.so[.1]")
    assert result.findings == ()
    assert result.benign_lines == 1


def test_other_nccl_warnings_are_flagged_as_cascades() -> None:
    finding = only(
        scan(
            "node-07:1:2 [0] proxy.cc:1119 NCCL WARN [Proxy Service 9] Failed to execute "
            "operation Connect from rank 9, retcode 6"
        )
    )
    assert finding.signature == "nccl_warn"
    assert finding.role is Role.CASCADE


integers = st.integers(min_value=0, max_value=10**7)
floats = st.floats(min_value=1e-6, max_value=1e6, allow_nan=False, allow_infinity=False)


@st.composite
def progress_lines(draw: st.DrawFn) -> str:
    """Progress lines of Megatron-LM, DeepSpeed and Hugging Face with random numbers."""
    style = draw(st.sampled_from(["megatron", "deepspeed", "hf", "lightning"]))
    a, b, c = draw(integers), draw(integers), draw(integers)
    x, y, z = draw(floats), draw(floats), draw(floats)
    if style == "megatron":
        return (
            f" iteration {a:8d}/{a + b:8d} | consumed samples: {c:12d} | elapsed time per "
            f"iteration (ms): {x:.1f} | learning rate: {y:.3E} | global batch size: "
            f"{b % 4096:5d} | lm loss: {z:.6E} | loss scale: {2.0 ** (a % 17):.1f} | grad "
            f"norm: {x:.3f} | number of skipped iterations: {b % 10:3d} | number of nan "
            "iterations:   0 |"
        )
    if style == "deepspeed":
        return f"steps: {a} loss: {z:.4f} iter time (s): {x:.3f} samples/sec: {y:.3f}"
    if style == "hf":
        return (
            f"{{'loss': {z:.4f}, 'grad_norm': {x:.4f}, 'learning_rate': {y:.3e},"
            f" 'epoch': {c % 100}.{b % 100}}}"
        )
    return (
        f"Epoch {a % 50}: {b % 100}%| {c}/{a + c + 1} [00:12<01:00, {x:.2f}it/s, "
        f"loss={z:.3f}, v_num={b % 1000}]"
    )


@settings(max_examples=300, deadline=None)
@given(progress_lines())
def test_progress_lines_from_the_grammar_are_never_flagged(line: str) -> None:
    assert scan(line).findings == ()


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(max_size=300), max_size=30))
def test_the_scanner_never_raises_on_arbitrary_text(lines: list[str]) -> None:
    result = scan_lines(lines)
    assert result.lines_scanned == len(lines)
    for finding in result.findings:
        assert 1 <= finding.first_line <= len(lines)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=2000))
def test_the_scanner_never_raises_on_decoded_arbitrary_bytes(data: bytes) -> None:
    lines = data.decode("utf-8", "surrogateescape").split("\n")
    scan_lines(lines)


def test_line_numbers_stay_right_when_a_line_contains_a_newline() -> None:
    result = scan("ok", "two\nparts", "OSError: [Errno 28] No space left on device")
    assert only(result).first_line == 3


# --- hostile input --------------------------------------------------------------------------


def test_a_10_mb_line_is_cut_at_the_cap_before_matching() -> None:
    huge = "A" * (10 * 1024 * 1024) + " OSError: [Errno 28] No space left on device"
    result = scan(
        "before", huge, "RuntimeError: CUDA error: an illegal memory access was encountered"
    )
    assert result.lines_truncated == 1
    # The error sat past the cap, so only the third line is found.
    assert names(result) == ["cuda_illegal_memory_access"]


def test_pathological_inputs_for_backtracking_engines_are_harmless() -> None:
    lines = ["a" * 50_000 + "!", "(" * 30_000, "loss" + " " * 60_000 + "x", 'File "' + "x" * 60_000]
    result = scan(*lines)
    assert result.lines_scanned == 4


def test_every_line_is_capped_at_the_documented_length() -> None:
    line = "x" * (MAX_LINE_CHARS - 30) + " No space left on device"
    assert only(scan(line)).signature == "fs_no_space"
    assert scan("x" * MAX_LINE_CHARS + " No space left on device").findings == ()


# --- custom signatures ----------------------------------------------------------------------


def spec(**overrides: object) -> dict[str, object]:
    base: dict[str, object] = {
        "name": "acme_fabric_down",
        "pattern": r"fabricd: link (?P<host>[\w.-]+) down",
        "kind": "crash",
        "category": "interconnect_network",
        "attribution": "interconnect",
        "role": "initiating",
        "implicates_node": True,
    }
    base.update(overrides)
    return base


def test_a_valid_custom_signature_compiles_and_is_used() -> None:
    signature = compile_signature(spec())
    assert (signature.kind, signature.category, signature.role) == (
        Kind.CRASH,
        Category.INTERCONNECT_NETWORK,
        Role.INITIATING,
    )
    assert signature.severity is Severity.ERROR
    assert not signature.builtin
    library = build_library([spec()])
    finding = only(library.scan(["fabricd: link node-12 down"]))
    assert finding.signature == "acme_fabric_down"
    assert finding.hosts == ("node-12",)


def test_custom_signatures_take_precedence_and_can_silence_a_builtin() -> None:
    silence = spec(
        name="acme_quiet_nccl_warn",
        pattern=r"NCCL WARN Acme plugin",
        kind="none",
        category="benign",
        attribution="none",
        role="context",
        implicates_node=False,
    )
    library = build_library([silence])
    result = library.scan(["node-1:1:1 [0] NCCL WARN Acme plugin v2 loaded"])
    assert result.findings == ()
    assert result.benign_lines == 1


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        ({"pattern": ""}, "non-empty"),
        ({"pattern": "   "}, "non-empty"),
        ({"pattern": 42}, "non-empty"),
        ({"pattern": "([a-z]+"}, "does not compile with RE2: missing )"),
        ({"pattern": r"(a)\1"}, "backreferences are not supported"),
        ({"pattern": r"(?P<x>a)(?P=x)"}, "backreferences are not supported"),
        ({"pattern": r"error(?=!)"}, "lookahead/lookbehind"),
        ({"pattern": r"(?<!no )error"}, "lookahead/lookbehind"),
        ({"pattern": r"x*"}, "matches the empty string"),
        ({"pattern": r"(?:foo)?"}, "matches the empty string"),
        ({"pattern": r"loss"}, "ordinary progress line"),
        ({"pattern": r"(?:\w{100}[^x]{100}){5}q"}, "too complex"),
        ({"category": "gpu"}, "unknown category 'gpu'"),
        ({"kind": "explode"}, "unknown kind 'explode'"),
        ({"attribution": "gremlins"}, "unknown attribution 'gremlins'"),
        ({"role": "root"}, "unknown role 'root'"),
        ({"severity": "meh"}, "unknown severity 'meh'"),
        ({"implicates_node": "yes"}, "'implicates_node' must be true or false"),
        ({"name": "Bad Name!"}, "'name' must be"),
        ({"name": ""}, "'name' must be"),
        ({"colour": "red"}, "unknown field(s): colour"),
        ({"category": "benign", "role": "initiating"}, "must have role 'context'"),
    ],
)
def test_invalid_custom_signatures_are_refused_with_a_reason(
    overrides: dict[str, object], reason: str
) -> None:
    with pytest.raises(InvalidSignature) as refused:
        compile_signature(spec(**overrides))
    assert reason in refused.value.reason


def test_a_spec_missing_fields_is_refused() -> None:
    incomplete = spec()
    del incomplete["role"]
    with pytest.raises(InvalidSignature, match="missing field"):
        compile_signature(incomplete)


def test_a_custom_signature_cannot_reuse_a_name() -> None:
    with pytest.raises(InvalidSignature, match="already exists"):
        build_library([spec(name="nvrm_xid")])
    with pytest.raises(InvalidSignature, match="already exists"):
        build_library([spec(), spec()])


# --- the library itself ---------------------------------------------------------------------


def test_every_builtin_signature_has_a_unique_name_and_a_description() -> None:
    seen = [signature.name for signature in BUILTIN_SIGNATURES]
    assert len(seen) == len(set(seen))
    assert all(signature.description for signature in BUILTIN_SIGNATURES)


@pytest.mark.parametrize("signature", BUILTIN_SIGNATURES, ids=lambda s: s.name)
def test_no_builtin_signature_matches_the_empty_line(signature: Signature) -> None:
    assert signature.regex.search("") is None


def test_the_default_library_is_compiled_once() -> None:
    assert default_library() is default_library()


def test_scanning_nothing_finds_nothing() -> None:
    result = scan_lines([])
    assert result.findings == () and result.lines_scanned == 0


def findings_of(lines: Sequence[str]) -> list[str]:
    return names(scan_lines(list(lines)))
