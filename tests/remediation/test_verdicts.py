"""Verdicts on log excerpts: the diagnosis's root cause over cascades, its hosts and confidence,
and the action the default policy takes on it (what ``manage.py diagnose`` prints).

Plain library tests (no database). The logs here are constructed from lines in the documented
formats (several mirror the collected real logs; see tests/fixtures/logs/SOURCES.md for the
cases no public thread showed).
"""

from __future__ import annotations

import json

import pytest

from detection.core.constants import MAX_EVIDENCE
from detection.core.context import DiagnosisContext
from fleet.core.taxonomy import (
    Action,
    Attribution,
    Category,
    ConfidenceLabel,
    Kind,
)
from tests.remediation.verdicts import EIGHT_NODES, diagnose, watchdog

# --- root cause over cascades ---------------------------------------------------------------


def test_the_earliest_initiating_error_wins_over_timeouts_on_every_other_rank() -> None:
    lines = [
        (
            "[rank5]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 "
            "GiB (GPU 5; 79.33 GiB total capacity)"
        ),
        *(watchdog(rank) for rank in range(64) if rank != 5),
        "[rank5]: torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
    ]
    result = diagnose(*lines, context=EIGHT_NODES)
    assert (result.kind, result.category, result.action) == (
        Kind.CRASH,
        Category.CUDA_OOM,
        Action.STOP,
    )
    assert result.implicated_hosts == ()
    assert result.evidence[0].signature == "cuda_oom"
    assert result.evidence[0].line == 1


def test_an_initiating_error_logged_after_the_timeouts_still_wins() -> None:
    lines = [
        *(watchdog(rank) for rank in range(8)),
        "[rank3]: RuntimeError: CUDA error: an illegal memory access was encountered",
    ]
    result = diagnose(*lines)
    assert result.category is Category.APPLICATION_ERROR
    assert result.evidence[0].signature == "cuda_illegal_memory_access"


def test_timeouts_alone_are_a_hang_restarted_without_naming_a_node() -> None:
    result = diagnose(*(watchdog(rank) for rank in range(16)), context=EIGHT_NODES)
    assert (result.kind, result.category, result.attribution, result.action) == (
        Kind.HANG,
        Category.NCCL_TIMEOUT_HANG,
        Attribution.INTERCONNECT,
        Action.RESTART,
    )
    assert result.implicated_hosts == ()


def test_the_one_rank_missing_from_the_timeouts_names_its_node() -> None:
    context = DiagnosisContext(nodes=("node-a", "node-b"), tasks_per_node=4)
    result = diagnose(*(watchdog(rank) for rank in range(8) if rank != 6), context=context)
    assert result.kind is Kind.HANG
    # Suspected, not established: the hang is restarted and the suspect named for a person.
    assert result.implicated_hosts == ("node-b",)
    assert result.action is Action.RESTART
    assert result.confidence.label is ConfidenceLabel.HYPOTHESIS
    assert "6" in result.explanation


def test_the_one_rank_stuck_on_an_earlier_collective_names_its_node() -> None:
    lines = [watchdog(rank, seq=1580) for rank in range(8) if rank != 2] + [watchdog(2, seq=1579)]
    result = diagnose(
        *lines, context=DiagnosisContext(nodes=("node-a", "node-b"), tasks_per_node=4)
    )
    assert result.implicated_hosts == ("node-a",)
    assert result.action is Action.RESTART


def test_a_heartbeat_monitor_timeout_is_a_hang() -> None:
    result = diagnose(
        (
            "[rank1]:[E ProcessGroupNCCL.cpp:1316] [PG 0 Rank 1] Heartbeat monitor timed "
            "out! Process will be terminated after dumping debug info. "
            "workMetaList_.size()=103"
        ),
        (
            "[rank1]:[E ProcessGroupNCCL.cpp:1153] [PG 0 Rank 1] ProcessGroupNCCL "
            "preparing to dump debug info."
        ),
    )
    assert (result.kind, result.category) == (Kind.HANG, Category.NCCL_TIMEOUT_HANG)


def test_remote_errors_alone_are_an_interconnect_crash_without_a_host() -> None:
    result = diagnose(
        (
            "node-03:1:2 [0] misc/socket.cc:538 NCCL WARN Net : Connection closed by "
            "remote peer node-04<47861>"
        ),
        (
            "ncclRemoteError: A call failed possibly due to a network error or a remote "
            "process exiting prematurely."
        ),
    )
    assert (result.category, result.action, result.implicated_hosts) == (
        Category.INTERCONNECT_NETWORK,
        Action.RESTART,
        (),
    )
    assert result.confidence.label is ConfidenceLabel.HYPOTHESIS


def test_context_lines_never_cause_anything() -> None:
    result = diagnose(
        (
            "CUDA kernel errors might be asynchronously reported at some other API call, "
            "so the stacktrace below might be incorrect."
        ),
        "For debugging consider passing CUDA_LAUNCH_BLOCKING=1.",
        "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.",
    )
    assert (result.kind, result.category, result.action) == (
        Kind.NONE,
        Category.BENIGN,
        Action.NONE,
    )


def test_an_illegal_memory_access_with_its_hints_is_an_application_error() -> None:
    result = diagnose(
        "[rank2]: RuntimeError: CUDA error: an illegal memory access was encountered",
        (
            "[rank2]: CUDA kernel errors might be asynchronously reported at some other "
            "API call, so the stacktrace below might be incorrect."
        ),
        "[rank2]: For debugging consider passing CUDA_LAUNCH_BLOCKING=1.",
        context=EIGHT_NODES,
    )
    assert (result.category, result.attribution, result.action) == (
        Category.APPLICATION_ERROR,
        Attribution.APPLICATION,
        Action.RESTART,
    )
    assert result.implicated_hosts == ()


# --- nodes, processes and the scheduler -----------------------------------------------------


def test_srun_naming_a_failed_node_excludes_it() -> None:
    result = diagnose(
        "srun: error: Node failure on node-07",
        (
            "slurmstepd: error: *** JOB 1234 ON node-00 CANCELLED AT 2024-04-20T09:09:37 "
            "DUE TO NODE FAILURE ***"
        ),
    )
    assert result.category is Category.NODE_OR_PROCESS_FAILURE
    assert result.implicated_hosts == ("node-07",)


def test_a_node_failure_cancellation_alone_does_not_blame_the_host_that_printed_it() -> None:
    result = diagnose(
        "slurmstepd: error: *** JOB 1234 ON node-00 CANCELLED AT 2024-04-20T09:09:37 DUE "
        "TO NODE FAILURE ***"
    )
    assert (result.category, result.attribution, result.action) == (
        Category.NODE_OR_PROCESS_FAILURE,
        Attribution.HARDWARE,
        Action.RESTART,
    )
    assert result.implicated_hosts == ()


@pytest.mark.parametrize(
    ("line", "attribution"),
    [
        (
            (
                "slurmstepd: error: *** JOB 494583 ON node-3 CANCELLED AT "
                "2024-04-20T09:09:37 DUE TO TIME LIMIT ***"
            ),
            Attribution.SCHEDULER,
        ),
        (
            (
                "slurmstepd: error: *** JOB 494583 ON node-3 CANCELLED AT "
                "2024-04-20T09:09:37 DUE TO PREEMPTION ***"
            ),
            Attribution.SCHEDULER,
        ),
        ("  exitcode  : -9 (pid: 14750)", Attribution.SYSTEM_SOFTWARE),
        ("[2024-01-01 00:00:00] died with <Signals.SIGKILL: 9>.", Attribution.SYSTEM_SOFTWARE),
    ],
)
def test_killed_processes_and_scheduler_endings_are_restarted(
    line: str, attribution: Attribution
) -> None:
    result = diagnose(line)
    assert (result.category, result.attribution, result.action) == (
        Category.NODE_OR_PROCESS_FAILURE,
        attribution,
        Action.RESTART,
    )


def test_a_host_oom_kill_explains_the_sigkill_that_follows() -> None:
    result = diagnose(
        (
            "Nov 29 11:00:01 node-07 kernel: Out of memory: Killed process 4242 (python) "
            "total-vm:52428800kB"
        ),
        (
            "E0325 20:57:27.620000 2606 "
            "site-packages/torch/distributed/elastic/multiprocessing/api.py:869] failed "
            "(exitcode: -9) local_rank: 5 (pid: 2630) of binary: "
            "/root/miniconda3/bin/python"
        ),
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
        "srun: error: node-07: task 5: Killed",
    )
    assert result.evidence[0].signature == "host_oom_killer"
    assert result.implicated_hosts == ()


def test_a_hang_killed_at_the_time_limit_is_diagnosed_as_the_hang() -> None:
    result = diagnose(
        *(watchdog(rank) for rank in range(4)),
        "slurmstepd: error: *** JOB 494583 ON node-3 CANCELLED AT 2024-04-20T09:09:37"
        " DUE TO TIME LIMIT ***",
    )
    assert (result.kind, result.category) == (Kind.HANG, Category.NCCL_TIMEOUT_HANG)


def test_a_failure_before_preemption_is_the_root_cause() -> None:
    result = diagnose(
        "OSError: [Errno 28] No space left on device",
        "slurmstepd: error: *** JOB 494583 ON node-3 CANCELLED AT 2024-04-20T09:09:37"
        " DUE TO PREEMPTION ***",
    )
    assert result.category is Category.FILESYSTEM_IO
    assert "slurm_cancelled_preemption" in [e.signature for e in result.evidence]


def test_a_user_cancellation_is_not_a_failure() -> None:
    result = diagnose(
        "slurmstepd: error: *** JOB 168885 ON scn67-10g CANCELLED AT 2023-08-31T18:04:42 ***"
    )
    assert result.kind is Kind.NONE and result.action is Action.NONE


# --- stop only when a retry cannot help -----------------------------------------------------


@pytest.mark.parametrize(
    "exception",
    [
        "ModuleNotFoundError: No module named 'megatron'",
        "ImportError: cannot import name 'LlamaForCausalLM' from 'transformers'",
        "SyntaxError: invalid syntax",
        (
            "RuntimeError: The size of tensor a (3) must match the size of tensor b (288) "
            "at non-singleton dimension 1"
        ),
    ],
)
def test_errors_a_retry_cannot_fix_stop_the_workload(exception: str) -> None:
    result = diagnose(
        "Traceback (most recent call last):", '  File "/site/pkg/x.py", line 1, in f', exception
    )
    assert result.action is Action.STOP
    assert result.confidence.label is ConfidenceLabel.ESTABLISHED


def test_a_config_key_error_in_user_code_stops_the_workload() -> None:
    result = diagnose(
        "[rank0]: Traceback (most recent call last):",
        '[rank0]:   File "/home/me/pretrain.py", line 42, in build_model',
        "[rank0]:     hidden = cfg['hidden_size']",
        "[rank0]: KeyError: 'hidden_size'",
    )
    assert result.action is Action.STOP
    assert "pretrain.py:42" in result.explanation


def test_an_exception_raised_in_a_library_is_stopped_with_where_it_was_raised() -> None:
    result = diagnose(
        "Traceback (most recent call last):",
        (
            '  File "/usr/local/lib/python3.10/dist-packages/torch/utils/data/_utils/fetch.py", '
            "line 51, in fetch"
        ),
        "KeyError: 1234",
    )
    assert result.action is Action.STOP
    # Not established (it may be the data, not the code), but a retry replays the same data.
    assert result.confidence.label is ConfidenceLabel.SUPPORTED
    assert "KeyError: 1234, raised in fetch" in result.verdict.decision.fix


@pytest.mark.parametrize(
    ("line", "rule", "fix"),
    [
        (
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB",
            "cuda_oom",
            "micro-batch",
        ),
        (
            "Nov 29 11:00:01 node-07 kernel: Out of memory: Killed process 4242 (python)",
            "host_oom_killer",
            "host memory",
        ),
        (
            "slurmstepd: error: Detected 1 oom_kill event in StepId=1234.0. Some of the step"
            " tasks have been OOM Killed.",
            "slurm_oom_kill",
            "--mem",
        ),
        ("OSError: [Errno 28] No space left on device", "fs_no_space", "full"),
        ("OSError: [Errno 116] Stale file handle", "fs_stale_handle", "stale"),
        ("AssertionError: 96 is not divisible by 64", "application_error", "fix the error"),
        (
            "../aten/src/ATen/native/cuda/Indexing.cu:1308: indexSelectLargeIndex: block: [61,0,0],"
            " thread: [117,0,0] Assertion `srcIndex < srcSelectDimSize` failed.",
            "application_error",
            "fix the error",
        ),
        ("[rank3]: grad_norm: nan", "numerical_divergence", "diverged"),
        (
            "Current loss scale already at minimum - cannot decrease scale anymore.",
            "numerical_divergence",
            "diverged",
        ),
        ("Key 'period' not in 'ModelCheckpointConf'", "application_error", "fix the error"),
    ],
)
def test_what_a_retry_repeats_is_stopped_saying_what_to_change(
    line: str, rule: str, fix: str
) -> None:
    result = diagnose(line)
    decision = result.verdict.decision
    assert (result.action, decision.rule) == (Action.STOP, rule)
    assert fix in decision.fix
    assert "repeats on a retry" in decision.reasons[0]


def test_an_oom_on_a_gpu_that_is_failing_excludes_the_node_rather_than_stop() -> None:
    result = diagnose(
        "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB",
        "Nov 29 11:00:01 node-07 kernel: NVRM: Xid (PCI:0000:3b:00): 48, pid=1, DBE",
    )
    assert (result.action, result.implicated_hosts) == (
        Action.RESTART_EXCLUDING_NODE,
        ("node-07",),
    )


# --- output ---------------------------------------------------------------------------------


def test_a_healthy_log_is_kind_none_with_action_none() -> None:
    result = diagnose(
        " iteration      100/  500000 | lm loss: 2.345678E+00 | loss scale: 65536.0 |"
    )
    assert (result.kind, result.category, result.attribution, result.action) == (
        Kind.NONE,
        Category.BENIGN,
        Attribution.NONE,
        Action.NONE,
    )
    assert result.evidence == ()


def test_to_dict_has_the_json_shape_of_the_design() -> None:
    result = diagnose("OSError: [Errno 28] No space left on device")
    payload = result.to_dict()
    assert list(payload) == [
        "kind",
        "category",
        "attribution",
        "action",
        "implicated_hosts",
        "confidence",
        "evidence",
        "explanation",
    ]
    assert payload["evidence"] == [
        {
            "line": 1,
            "text": "OSError: [Errno 28] No space left on device",
            "signature": "fs_no_space",
        }
    ]
    assert payload["confidence"] == {"value": 0.75, "label": "supported"}
    json.dumps(payload)


def test_evidence_is_deduplicated_and_capped() -> None:
    lines = [
        f"RuntimeError: distinct failure number {chr(65 + i % 26)}{chr(65 + i // 26)}"
        for i in range(100)
    ]
    result = diagnose(*lines, *lines)
    assert len(result.evidence) == MAX_EVIDENCE
    assert len({(e.signature, e.text) for e in result.evidence}) == MAX_EVIDENCE


def test_the_explanation_names_the_line_and_what_was_found() -> None:
    result = diagnose(
        "ok",
        (
            "Nov 29 11:00:01 node-07 kernel: NVRM: Xid (PCI:0000:3b:00): 79, GPU has "
            "fallen off the bus."
        ),
    )
    assert "line 2" in result.explanation
    assert "Xid 79" in result.explanation
    assert "node-07" in result.explanation
