"""SlurmClient builds exact argument lists from validated parts, and reads Slurm's answers.

The transport here is a recorder at the process boundary; the same paths run against a real
cluster in test_slurm_cluster.py."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from remediation.controller import (
    CommandResult,
    SlurmClient,
    SlurmCommandError,
    sanitise_reason,
)
from remediation.controller.slurm import MAX_REASON_LENGTH

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "slurm"
# as "scontrol show config" prints it (abridged)
CONFIG = (
    "SlurmctldTimeout        = 120 sec\nSlurmdTimeout           = 300 sec\nSwitchType = (null)\n"
)
SQUEUE = (FIXTURES / "squeue-running-failed-array-held.json").read_text()
SINFO = (FIXTURES / "sinfo-draining-down.json").read_text()


class RecordingTransport:
    """Answers each program from a table and records every argument list."""

    def __init__(self, answers: dict[str, CommandResult] | None = None) -> None:
        self.calls: list[list[str]] = []
        self.answers = {"scontrol --version": CommandResult(0, "slurm-wlm 22.05.8\n", "")}
        self.answers.update(answers or {})

    @property
    def target(self) -> str:
        return "recorder"

    def run(self, argv: Sequence[str], *, timeout: float = 30.0) -> CommandResult:
        self.calls.append(list(argv))
        key = " ".join(argv)
        for prefix, answer in self.answers.items():
            if key.startswith(prefix):
                return answer
        return CommandResult(0, "", "")


@pytest.fixture
def transport() -> RecordingTransport:
    return RecordingTransport()


@pytest.fixture
def client(transport: RecordingTransport) -> SlurmClient:
    return SlurmClient(transport)


def test_each_action_is_the_operators_command(
    client: SlurmClient, transport: RecordingTransport
) -> None:
    client.requeue_hold("1234")
    client.hold("1234")
    client.update_exclusions("1234", ["gpu-07", "gpu-12", "gpu-07"])
    client.release("1234")
    client.cancel("1234_7")
    client.drain("gpu-07", "Xid 79 on GPU 3")
    client.resume("gpu-07")

    assert transport.calls == [
        ["scontrol", "requeuehold", "1234"],
        ["scontrol", "hold", "1234"],
        ["scontrol", "update", "jobid=1234", "ExcNodeList=gpu-07,gpu-12"],
        ["scontrol", "release", "1234"],
        ["scancel", "1234_7"],
        ["scontrol", "update", "nodename=gpu-07", "state=drain", "reason=Xid 79 on GPU 3"],
        ["scontrol", "update", "nodename=gpu-07", "state=resume"],
    ]


def test_no_exclusions_clear_them(client: SlurmClient, transport: RecordingTransport) -> None:
    client.update_exclusions("55", [])

    assert transport.calls == [["scontrol", "update", "jobid=55", "ExcNodeList="]]


@pytest.mark.parametrize(
    "job_id",
    ["", "0", "01", "12a", "12_", "_3", "1234_7_8", "1; reboot", "-1", "１２", "1 2", "1" * 11],
)
def test_a_bad_job_id_is_refused_before_anything_runs(
    client: SlurmClient, transport: RecordingTransport, job_id: str
) -> None:
    for action in (client.requeue_hold, client.release, client.cancel, client.job):
        with pytest.raises(ValueError, match="not a Slurm job id"):
            action(job_id)
    with pytest.raises(ValueError):
        client.update_exclusions(job_id, ["node1"])
    assert transport.calls == []


@pytest.mark.parametrize(
    "node",
    ["node1; touch /tmp/pwned", "$(reboot)", "`id`", "node1\nnode2", "node[1-2]", "a,b", "-x", ""],
)
def test_a_bad_node_name_is_refused_before_anything_runs(
    client: SlurmClient, transport: RecordingTransport, node: str
) -> None:
    with pytest.raises(ValueError, match="not a node name"):
        client.drain(node, "bad")
    with pytest.raises(ValueError, match="not a node name"):
        client.resume(node)
    with pytest.raises(ValueError, match="not a node name"):
        client.update_exclusions("12", ["node1", node])
    assert transport.calls == []


@pytest.mark.parametrize("reason", ["", "   ", "\n\t\r", '""', "\x00\x1b"])
def test_a_drain_without_reason_text_is_refused(
    client: SlurmClient, transport: RecordingTransport, reason: str
) -> None:
    with pytest.raises(ValueError, match="needs a reason"):
        client.drain("node1", reason)
    assert transport.calls == []


@pytest.mark.parametrize(
    ("reason", "sent"),
    [
        ("Xid 79\non GPU 3", "Xid 79 on GPU 3"),
        ("tab\there\x1b[31m red", "tab here [31m red"),
        ('"quoted"', "quoted"),
        ("a; $(b) `c` 'd' \"e\" f=g", "a; $(b) `c` 'd' \"e\" f=g"),
        ("x" * 500, "x" * MAX_REASON_LENGTH),
    ],
)
def test_a_reason_is_one_printable_line_sent_as_one_argument(reason: str, sent: str) -> None:
    transport = RecordingTransport()

    SlurmClient(transport).drain("node1", reason)

    assert sanitise_reason(reason) == sent
    assert transport.calls[-1][-1] == f"reason={sent}"


def test_a_refusal_raises_with_slurms_message_and_the_command() -> None:
    refusal = CommandResult(1, "", "Invalid job id specified for job 99\n")
    client = SlurmClient(RecordingTransport({"scontrol requeuehold": refusal}))

    with pytest.raises(SlurmCommandError) as caught:
        client.requeue_hold("99")

    assert caught.value.command == ("scontrol", "requeuehold", "99")
    message = "Invalid job id specified for job 99"
    assert (caught.value.exit_code, caught.value.stderr) == (1, message)
    assert str(caught.value) == f"scontrol requeuehold 99 exited 1: {message}"


def test_a_snapshot_reads_all_jobs_and_nodes(transport: RecordingTransport) -> None:
    transport.answers["squeue"] = CommandResult(0, SQUEUE, "")
    transport.answers["sinfo"] = CommandResult(0, SINFO, "")

    transport.answers["scontrol show config"] = CommandResult(0, CONFIG, "")
    client = SlurmClient(transport)

    snapshot = client.snapshot()
    client.snapshot()

    # SlurmdTimeout is read once: it dates a lost node (see test_slurm_json.py).
    config = ["scontrol", "show", "config"]
    reads = [["squeue", "--all", "--json"], ["sinfo", "--all", "--json"]]
    assert transport.calls == [*reads, config, *reads]
    assert client.slurmd_timeout_s == 300
    assert len(snapshot.jobs) == 9 and len(snapshot.nodes) == 4
    assert snapshot.taken_at.utcoffset() is not None


def test_on_22_05_one_job_is_read_from_squeue(transport: RecordingTransport) -> None:
    transport.answers["squeue"] = CommandResult(0, SQUEUE, "")
    client = SlurmClient(transport)

    job = client.job("4_1")

    assert client.version == (22, 5, 8)
    assert job is not None and job.nodes == ("node4",)
    assert client.job("77") is None
    assert transport.calls[0] == ["scontrol", "--version"]
    assert transport.calls[1:] == [["squeue", "--all", "--json"]] * 2


def test_on_23_02_one_job_is_read_with_scontrol_json() -> None:
    transport = RecordingTransport(
        {
            "scontrol --version": CommandResult(0, "slurm 23.02.6\n", ""),
            "scontrol show job 5 --json": CommandResult(0, '{"jobs": [{"job_id": 5}]}', ""),
            "scontrol show job 6 --json": CommandResult(
                1, "", "slurm_load_jobs error: Invalid job id specified\n"
            ),
        }
    )
    client = SlurmClient(transport)

    assert client.job("5") is not None
    assert client.job("6") is None
    assert transport.calls[1:] == [
        ["scontrol", "show", "job", "5", "--json"],
        ["scontrol", "show", "job", "6", "--json"],
    ]


def test_the_version_is_read_once(client: SlurmClient, transport: RecordingTransport) -> None:
    assert client.version == client.version == (22, 5, 8)

    assert transport.calls == [["scontrol", "--version"]]
