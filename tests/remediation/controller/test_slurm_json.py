"""Slurm's JSON becomes telemetry records: on output recorded from a real Slurm 22.05 cluster
(tests/fixtures/slurm/, see SOURCES.md there), and on the shapes later versions print."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fleet.core.scheduler import JobRecord, JobState, NodeRecord, NodeState
from remediation.controller.slurm_json import (
    SlurmOutputError,
    decode_exit,
    expand_array_tasks,
    gpus_from_gres,
    jobs_from_document,
    load_document,
    nodes_from_document,
)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "slurm"


def load(name: str) -> dict[str, Any]:
    return load_document((FIXTURES / name).read_text(), name)


def jobs(name: str) -> dict[str, JobRecord]:
    return {job.job_id: job for job in jobs_from_document(load(name))}


def nodes(name: str) -> dict[str, NodeRecord]:
    return {node.name: node for node in nodes_from_document(load(name))}


def at(epoch: int) -> datetime:
    return datetime.fromtimestamp(epoch, UTC)


def test_a_running_two_node_job_has_its_nodes_comment_and_start_but_no_end_or_exit() -> None:
    job = jobs("squeue-running-failed-array-held.json")["1"]

    assert job == JobRecord(
        job_id="1",
        name="two",
        state=JobState.RUNNING,
        partition="debug",
        nodes=("node1", "node2"),
        comment="workload=w1 attempt=0",
        submit_time=at(1795956401),
        start_time=at(1795956401),
    )


def test_a_failed_job_has_its_exit_code_from_the_wait_status() -> None:
    failed = jobs("squeue-running-failed-array-held.json")["2"]  # exit_code 768 in the JSON

    assert (failed.state, failed.exit_code, failed.signal) == (JobState.FAILED, 3, None)
    assert (failed.reason, failed.nodes, failed.end_time) == (
        "NonZeroExitCode",
        ("node3",),
        at(1795956401),
    )


def test_a_signalled_job_has_the_signal_and_no_exit_code() -> None:
    killed = jobs("squeue-running-failed-array-held.json")["3"]  # exit_code 9: SIGKILL

    assert (killed.state, killed.exit_code, killed.signal) == (JobState.FAILED, None, 9)


def test_array_tasks_are_jobs_named_array_underscore_task() -> None:
    by_id = jobs("squeue-running-failed-array-held.json")

    # tasks 0 and 1 run (their own job ids are 7 and 8); "2-3" is one pending record for two
    assert {job_id for job_id in by_id if job_id.startswith("4_")} == {"4_0", "4_1", "4_2", "4_3"}
    assert (by_id["4_0"].state, by_id["4_0"].nodes) == (JobState.RUNNING, ("node3",))
    assert by_id["4_3"].state == JobState.PENDING and by_id["4_3"].reason == "Resources"
    assert "7" not in by_id and "4" not in by_id


def test_a_job_submitted_held_is_held_and_has_no_start_time() -> None:
    held = jobs("squeue-running-failed-array-held.json")["5"]

    assert (held.state, held.held, held.reason, held.start_time) == (
        JobState.PENDING,
        True,
        "JobHeldUser",
        None,
    )


def test_excluded_nodes_are_expanded_and_a_pending_estimate_is_not_a_start_time() -> None:
    pending = jobs("squeue-running-failed-array-held.json")["6"]

    assert pending.excluded_nodes == ("node1", "node2")
    assert (pending.start_time, pending.end_time, pending.held) == (None, None, False)


def test_a_requeued_job_counts_its_restart_and_keeps_its_exclusions() -> None:
    requeued = jobs("squeue-requeued-held-cancelled.json")

    assert requeued["1"].restart_count == 1
    assert requeued["1"].excluded_nodes == ("node1", "node3")
    assert requeued["1"].reason == "ReqNodeNotAvail"
    assert (requeued["4_3"].held, requeued["4_3"].restart_count) == (True, 1)
    assert (requeued["4_1"].reason, requeued["4_1"].held) == ("BeginTime", False)


def test_a_cancelled_job_is_not_held_though_its_priority_is_zero() -> None:
    cancelled = jobs("squeue-requeued-held-cancelled.json")["2"]

    assert (cancelled.state, cancelled.held) == (JobState.CANCELLED, False)


def test_node_states_follow_sinfo_drain_flags_and_keep_the_reason_literally() -> None:
    by_name = nodes("sinfo-draining-down.json")

    assert by_name["node1"] == NodeRecord("node1", NodeState.ALLOCATED, partitions=("debug",))
    assert by_name["node2"].state == NodeState.IDLE
    assert by_name["node3"].state == NodeState.DRAINING  # allocated + DRAIN
    assert by_name["node3"].reason == "a; touch /tmp/pwned $(id) `id` \"dq\" 'sq' | & > <x> %s \\n"
    assert (by_name["node4"].state, by_name["node4"].reason) == (
        NodeState.DOWN,
        "simulated failure",
    )


def test_an_idle_drained_node_is_drained_and_not_responding_stays_idle() -> None:
    by_name = nodes("sinfo-drained-not-responding.json")

    assert (by_name["node2"].state, by_name["node2"].reason) == (NodeState.DRAINED, "idle drain")
    assert by_name["node4"].state == NodeState.IDLE


def test_gpus_come_from_gres() -> None:
    assert [n.gpus for n in nodes_from_document(load("sinfo-gres.json"))] == [4, 4]
    assert all(n.gpus == 0 for n in nodes_from_document(load("sinfo-draining-down.json")))


@pytest.mark.parametrize(
    ("gres", "gpus"),
    [
        ("gpu:4", 4),
        ("gpu:a100:8(S:0-1)", 8),
        ("gpu:a100:4(S:0,1),gpu:v100:2", 6),
        ("gpu:tesla:2,mps:100", 2),
        ("mps:100", 0),
        ("gpu", 1),
        ("", 0),
        ("(null)", 0),
    ],
)
def test_gres_strings_count_gpus(gres: str, gpus: int) -> None:
    assert gpus_from_gres(gres) == gpus


@pytest.mark.parametrize(
    ("text", "tasks"),
    [("2-3", [2, 3]), ("1,4-8:2", [1, 4, 6, 8]), ("0-3%2", [0, 1, 2, 3]), ("7", [7])],
)
def test_array_task_strings_expand(text: str, tasks: list[int]) -> None:
    assert expand_array_tasks(text) == tasks


@given(st.integers(min_value=0, max_value=255), st.integers(min_value=0, max_value=0x7F))
def test_a_wait_status_decodes_to_an_exit_code_or_a_signal(code: int, sig: int) -> None:
    status = (code << 8) | sig

    assert decode_exit(status) == ((None, sig) if sig else (code, None))


# -- shapes of Slurm 23.02+ (numbers as {set, infinite, number}, states as flag lists) ----------


def number(value: int, *, is_set: bool = True) -> dict[str, object]:
    return {"set": is_set, "infinite": False, "number": value}


def test_wrapped_numbers_and_flag_lists_are_read() -> None:
    doc = {
        "jobs": [
            {
                "job_id": 12,
                "array_job_id": number(10),
                "array_task_id": number(2),
                "name": "train",
                "job_state": ["PENDING", "REQUEUE_HOLD"],
                "state_reason": "JobHeldAdmin",
                "nodes": "",
                "restart_cnt": 2,
                "priority": number(0),
                "exit_code": {"status": ["EXITED"], "return_code": number(1), "signal": {}},
                "submit_time": number(1700000000),
                "start_time": number(0, is_set=False),
                "end_time": number(0, is_set=False),
                "partition": "gpu",
            }
        ],
        "errors": [],
    }

    (job,) = jobs_from_document(doc)

    assert (job.job_id, job.state, job.held, job.restart_count) == ("10_2", "PENDING", True, 2)
    assert (job.submit_time, job.start_time) == (at(1700000000), None)


def test_a_node_state_list_is_read_as_base_and_flags() -> None:
    doc = {"nodes": [{"name": "gpu-01", "state": ["MIXED", "DRAIN"], "gres": "gpu:h100:8"}]}

    (node,) = nodes_from_document(doc)

    assert (node.state, node.gpus) == (NodeState.DRAINING, 8)


@pytest.mark.parametrize(
    ("state", "flags", "expected"),
    [
        ("idle", [], NodeState.IDLE),
        ("mixed", ["DRAIN"], NodeState.DRAINING),
        ("idle", ["COMPLETING"], NodeState.COMPLETING),
        ("IDLE+DRAIN", None, NodeState.DRAINED),
        ("ALLOCATED+DRAIN", None, NodeState.DRAINING),
        ("DOWN+DRAIN+NOT_RESPONDING", None, NodeState.DOWN),
        ("idle", ["FAIL"], NodeState.DRAINED),
        ("future", [], NodeState.UNKNOWN),
        ("unknown", ["DRAIN", "INVALID_REG"], NodeState.DRAINED),
    ],
)
def test_node_base_states_and_flags_combine_as_sinfo_shows_them(
    state: str, flags: list[str] | None, expected: NodeState
) -> None:
    (node,) = nodes_from_document({"nodes": [{"name": "n1", "state": state, "state_flags": flags}]})

    assert node.state == expected


def test_an_exit_code_object_with_a_signal_is_decoded() -> None:
    value = {"status": ["SIGNALED"], "return_code": number(0), "signal": {"id": number(9)}}

    assert decode_exit(value) == (0, 9)


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        ("COMPLETING", JobState.COMPLETING),
        ("BOOT_FAIL", JobState.NODE_FAIL),
        ("DEADLINE", JobState.TIMEOUT),
        ("SUSPENDED", JobState.RUNNING),
        ("REQUEUE_HOLD", JobState.PENDING),
        (["RUNNING", "COMPLETING"], JobState.COMPLETING),
        ("SOMETHING_NEW", JobState.PENDING),
    ],
)
def test_slurm_job_states_map_to_ours(state: object, expected: JobState) -> None:
    (job,) = jobs_from_document({"jobs": [{"job_id": 1, "job_state": state}]})

    assert job.state == expected


# -- malformed output ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    ["not json", "[]", json.dumps({"errors": [{"error": "Unable to contact slurm controller"}]})],
)
def test_output_that_is_not_a_clean_document_raises(text: str) -> None:
    with pytest.raises(SlurmOutputError):
        load_document(text, "squeue --json")


def test_a_document_without_jobs_raises() -> None:
    with pytest.raises(SlurmOutputError, match="'jobs'"):
        jobs_from_document({"meta": {}})


def test_a_node_slurm_lost_was_last_heard_from_slurmd_timeout_before_it_said_so() -> None:
    said_down = 1796151980
    raw = {"name": "node2", "state": "down", "state_flags": ["NOT_RESPONDING"]}
    lost = raw | {"reason": "Not responding", "reason_changed_at": said_down}
    drained = raw | {"reason": "swapping the HCA", "reason_changed_at": said_down}
    (node,) = nodes_from_document({"nodes": [lost]}, slurmd_timeout_s=10)
    assert node.lost_at == datetime.fromtimestamp(said_down - 10, UTC)
    # A person's "state=down" is no loss of the node under a job: no time is claimed for it.
    (other,) = nodes_from_document({"nodes": [drained]}, slurmd_timeout_s=10)
    assert other.lost_at is None
