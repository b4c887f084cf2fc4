"""``manage.py diagnose`` as an operator runs it: a file, standard input, or JSON lines."""

import io
import json
import resource
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from fleet import services

ROOT = Path(__file__).resolve().parents[2]
XID_79 = (
    "Nov 29 11:00:01 gpu-node-007 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, "
    "GPU has fallen off the bus.\n"
)
PROGRESS = (
    " iteration      100/  500000 | elapsed time per iteration (ms): 1234.5 | lm loss: 2.3 |\n"
)


def diagnose(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "manage.py", "diagnose", *args],
        cwd=ROOT,
        input=stdin,
        capture_output=True,
        timeout=120,
        check=False,
    )


def test_it_prints_the_design_json_for_a_file(tmp_path: Path) -> None:
    log = tmp_path / "slurm-1234.out"
    log.write_text(PROGRESS * 3 + XID_79)
    result = diagnose(str(log))
    assert result.returncode == 0, result.stderr
    answer = json.loads(result.stdout)
    assert set(answer) >= {
        "kind",
        "category",
        "attribution",
        "action",
        "implicated_hosts",
        "confidence",
        "evidence",
    }
    assert (answer["kind"], answer["category"], answer["action"]) == (
        "crash",
        "gpu_hardware",
        "restart_excluding_node",
    )
    assert answer["implicated_hosts"] == ["gpu-node-007"]
    assert answer["evidence"][0] == {"line": 4, "text": XID_79.strip(), "signature": "nvrm_xid"}


def test_hostile_bytes_on_stdin_are_diagnosed_and_what_was_skipped_is_said() -> None:
    hostile = b"\x00\xff\xfe" * 1000 + b"\n" + b"A" * (10 * 1024 * 1024) + b"\n" + PROGRESS.encode()
    result = diagnose("-", stdin=hostile)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["kind"] == "none"
    assert b"nul bytes stripped: 1000" in result.stderr
    assert b"lines truncated: 1" in result.stderr


def test_any_stream_is_diagnosed_in_bounded_memory() -> None:
    """600 MB of random bytes on standard input, within 768 MB of address space: only the end
    of the stream is held, and chance strings in binary junk are not failures."""
    limit = 768 * 1024 * 1024

    def cap_memory() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    junk = subprocess.Popen(["head", "-c", "600M", "/dev/urandom"], stdout=subprocess.PIPE)
    result = subprocess.run(
        [sys.executable, "manage.py", "diagnose", "-"],
        cwd=ROOT,
        stdin=junk.stdout,
        capture_output=True,
        timeout=300,
        check=False,
        preexec_fn=cap_memory,
    )
    junk.wait()
    assert result.returncode == 0, result.stderr[-2000:]
    assert json.loads(result.stdout)["kind"] == "none"
    assert b"input over 33554432 bytes" in result.stderr


def test_a_jsonl_record_nested_too_deep_or_too_long_is_reported_and_the_rest_go_on(
    tmp_path: Path,
) -> None:
    records = tmp_path / "cases.jsonl"
    with records.open("w") as handle:
        handle.write("[" * 100_000 + "]" * 100_000 + "\n")
        handle.write(json.dumps({"id": "long", "text": "x" * (33 * 1024 * 1024)}) + "\n")
        handle.write(json.dumps({"id": "b", "text": XID_79}) + "\n")
    result = diagnose("--jsonl", str(records))
    assert result.returncode == 0, result.stderr[-2000:]
    answers = [json.loads(line) for line in result.stdout.splitlines()]
    assert [a.get("error") for a in answers[:2]] == [
        "nested too deep",
        f"record longer than {32 * 1024 * 1024} bytes",
    ]
    assert answers[2]["id"] == "b" and answers[2]["category"] == "gpu_hardware"


def test_jsonl_gives_one_result_per_record_and_reports_bad_records(tmp_path: Path) -> None:
    records = tmp_path / "cases.jsonl"
    records.write_text(
        json.dumps({"id": "a", "text": XID_79})
        + "\n"
        + "not json\n"
        + json.dumps({"id": "b", "text": PROGRESS})
        + "\n"
    )
    result = diagnose("--jsonl", str(records))
    assert result.returncode == 0, result.stderr
    answers = [json.loads(line) for line in result.stdout.splitlines()]
    assert [a["id"] for a in answers] == ["a", None, "b"]
    assert answers[0]["category"] == "gpu_hardware"
    assert answers[1]["record"] == 2 and "error" in answers[1]
    assert answers[2]["kind"] == "none"
    assert b"record 2: skipped" in result.stderr


def test_a_missing_file_is_a_clear_error() -> None:
    with pytest.raises(CommandError, match="cannot read /nonexistent.log: No such file"):
        call_command("diagnose", "/nonexistent.log")


KERNEL_XID = "[ 1843.308145] NVRM: Xid (PCI:0000:44:00): 79, GPU has fallen off the bus\n"
RANK_ECC = "[rank9]: RuntimeError: CUDA error: uncorrectable ECC error encountered\n"


def answer(*args: str, stdin: str) -> dict:
    result = diagnose(*args, "-", stdin=stdin.encode())
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_node_local_evidence_without_a_host_still_excludes_and_says_which_line() -> None:
    got = answer(stdin=KERNEL_XID)
    assert (got["action"], got["implicated_hosts"]) == ("restart_excluding_node", [])
    assert "the node that logged line 1" in got["explanation"]


def test_host_names_the_node_whose_own_log_the_excerpt_is() -> None:
    got = answer("--host", "gpu-node-05", stdin=KERNEL_XID)
    assert got["implicated_hosts"] == ["gpu-node-05"]
    assert "gpu-node-05 (the excerpt is its log)" in got["explanation"]


def test_nodes_and_tasks_per_node_map_a_rank_to_its_host() -> None:
    got = answer("--nodes", "a1,a2,a3", "--tasks-per-node", "4", stdin=RANK_ECC)
    assert got["implicated_hosts"] == ["a3"]
    assert "a3 (the rank runs there)" in got["explanation"]


def test_a_stop_says_what_to_change() -> None:
    got = answer(stdin="torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
    assert got["action"] == "stop"
    assert "lower the micro-batch size" in got["explanation"]


@pytest.mark.django_db
def test_a_clusters_policy_decides_with_cluster(tmp_path: Path) -> None:
    services.create_cluster("test", "lab", policy={"rules": {"cuda_oom": "restart"}})
    log = tmp_path / "oom.log"
    log.write_text("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
    stdout = io.StringIO()
    call_command("diagnose", "--cluster", "lab", str(log), stdout=stdout)
    assert json.loads(stdout.getvalue())["action"] == "restart"
    with pytest.raises(CommandError, match="no cluster named 'nowhere'"):
        call_command("diagnose", "--cluster", "nowhere", str(log))
