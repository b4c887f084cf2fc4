"""Transports run argument lists literally: locally with shell=False, over SSH with every
argument quoted for the remote shell and the host key checked."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from remediation.controller import LocalTransport, SshTransport, TransportError
from tests.remediation.controller.lab import SlurmLab, SshServer, free_port_block


def hostile_texts(canary: Path) -> list[str]:
    return [
        f"node1; touch {canary}",
        f"$(touch {canary})",
        f"`touch {canary}`",
        f"line one\nline two; touch {canary}",
        f"'; touch {canary}; '",
        f'"; touch {canary}; "',
        f"&& touch {canary} || touch {canary} | tee {canary} > {canary}",
        "${HOME} $HOME ~ * ? [a-z] \\ \\n %s {a,b} !! #comment",
        "-n",
        "",
        "nœud-1 ノード \t tab",
    ]


@pytest.fixture
def canary() -> Path:
    return Path(f"/tmp/rc-transport-pwned-{os.getpid()}")  # noqa: S108 - must not appear


def test_a_local_command_gets_each_argument_literally(canary: Path) -> None:
    texts = hostile_texts(canary)

    result = LocalTransport().run(["printf", "%s\\0", *texts])

    assert result.exit_code == 0
    assert result.stdout.split("\0")[:-1] == texts
    assert not canary.exists()


def test_a_local_command_sees_the_given_environment() -> None:
    transport = LocalTransport(env={"SLURM_CONF": "/lab/etc/slurm.conf"})

    exit_code, stdout, stderr = transport.run(["sh", "-c", 'printf %s "$SLURM_CONF"'])

    assert (exit_code, stdout, stderr) == (0, "/lab/etc/slurm.conf", "")


def test_a_failing_command_returns_its_exit_code_and_stderr() -> None:
    result = LocalTransport().run(["sh", "-c", "echo oops >&2; exit 3"])

    assert result == (3, "", "oops\n")


def test_a_missing_program_raises_a_transport_error_naming_it() -> None:
    with pytest.raises(TransportError, match="local: cannot run 'no-such-program-rc'"):
        LocalTransport().run(["no-such-program-rc", "x"])


def test_a_command_past_its_timeout_raises_a_transport_error() -> None:
    with pytest.raises(TransportError, match="sleep timed out after 0.2 s"):
        LocalTransport().run(["sleep", "5"], timeout=0.2)


@pytest.mark.parametrize("argv", [[], [""], ["echo", "a\0b"]])
def test_an_empty_or_nul_argument_list_is_refused(argv: list[str]) -> None:
    with pytest.raises(ValueError):
        LocalTransport().run(argv)


def test_a_string_command_is_refused_rather_than_split() -> None:
    with pytest.raises(TypeError, match="not a string"):
        LocalTransport().run("scontrol requeuehold 1")


@pytest.mark.parametrize("name", ["SLURM CONF", "A=B", "1X", ""])
def test_a_bad_environment_name_is_refused(name: str) -> None:
    with pytest.raises(ValueError, match="environment variable"):
        LocalTransport(env={name: "x"})


def make_ssh(**kwargs: object) -> SshTransport:
    options: dict[str, object] = {
        "identity_file": Path("/keys/id"),
        "known_hosts_file": Path("/keys/known_hosts"),
        **kwargs,
    }
    return SshTransport("slurm@login1", **options)  # type: ignore[arg-type]


def test_ssh_checks_host_keys_against_the_given_file_and_never_prompts() -> None:
    argv = make_ssh(port=2222).ssh_argv(["scontrol", "release", "12"])

    options = {argv[i + 1] for i, arg in enumerate(argv) if arg == "-o"}
    assert {
        "BatchMode=yes",
        "StrictHostKeyChecking=yes",
        "UserKnownHostsFile=/keys/known_hosts",
        "GlobalKnownHostsFile=/dev/null",
    } <= options
    assert argv[:5] == ["ssh", "-T", "-p", "2222", "-i"]
    assert argv[-3:] == ["--", "slurm@login1", "scontrol release 12"]


def test_ssh_quotes_every_argument_and_prefixes_the_remote_environment() -> None:
    transport = make_ssh(remote_env={"SLURM_CONF": "/etc/slurm lab/slurm.conf"})

    command = transport.remote_command(["scontrol", "update", "reason=a; b $(c)"])

    assert shlex.split(command) == [
        "env",
        "SLURM_CONF=/etc/slurm lab/slurm.conf",
        "scontrol",
        "update",
        "reason=a; b $(c)",
    ]
    assert (
        command == "env 'SLURM_CONF=/etc/slurm lab/slurm.conf' scontrol update 'reason=a; b $(c)'"
    )


@pytest.mark.parametrize(
    "destination", ["-oProxyCommand=touch /tmp/x", "a b@host", "user@host;id", "", "@host"]
)
def test_an_ssh_destination_that_could_be_an_option_is_refused(destination: str) -> None:
    with pytest.raises(ValueError, match="ssh destination"):
        SshTransport(destination, identity_file=Path("/k"), known_hosts_file=Path("/h"))


def test_a_known_hosts_path_with_spaces_is_refused() -> None:
    with pytest.raises(ValueError, match="ssh option"):
        make_ssh(known_hosts_file=Path("/my keys/known_hosts"))


# -- against a real sshd ---------------------------------------------------------------------


@pytest.mark.slurm
def test_over_ssh_hostile_text_reaches_the_program_as_one_literal_argument(
    sshd: SshServer, canary: Path
) -> None:
    texts = hostile_texts(canary)

    result = sshd.transport().run(["printf", "%s\\0", *texts])

    assert result.exit_code == 0, result.stderr
    assert result.stdout.split("\0")[:-1] == texts
    assert not canary.exists()


@pytest.mark.slurm
def test_over_ssh_hostile_text_reaches_slurm_as_one_literal_argument(
    ssh_transport: SshTransport, slurm_lab: SlurmLab, canary: Path
) -> None:
    name = f"node1; touch {canary} $(touch {canary}) `touch {canary}`\nnode2"

    result = ssh_transport.run(["scontrol", "show", "node", name])

    # scontrol splits a node list at spaces itself; each word came through unexpanded
    assert result.exit_code == 1
    words = name.split(" ")
    assert result.stdout == "".join(f"Node {word} not found\n" for word in words)
    assert "$(touch" in words and "`touch" in words
    assert not canary.exists()


@pytest.mark.slurm
def test_over_ssh_the_remote_environment_selects_the_cluster(
    ssh_transport: SshTransport, slurm_lab: SlurmLab
) -> None:
    result = ssh_transport.run(["scontrol", "show", "config"])

    assert result.exit_code == 0, result.stderr
    assert f"SlurmctldPort           = {slurm_lab.ctld_port}" in result.stdout


@pytest.mark.slurm
def test_over_ssh_a_changed_host_key_is_refused(sshd: SshServer, tmp_path: Path) -> None:
    other_key = tmp_path / "other_host_key"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other_key)], check=True
    )
    key_type, key = other_key.with_suffix(".pub").read_text().split()[:2]
    impostor = tmp_path / "known_hosts"
    impostor.write_text(f"[127.0.0.1]:{sshd.port} {key_type} {key}\n")

    with pytest.raises(TransportError, match="Host key verification failed") as caught:
        sshd.transport(known_hosts_file=impostor).run(["true"])

    assert caught.value.target == f"ssh {sshd.destination}:{sshd.port}"


@pytest.mark.slurm
def test_over_ssh_an_unknown_host_key_is_refused(sshd: SshServer, tmp_path: Path) -> None:
    empty = tmp_path / "known_hosts"
    empty.write_text("")

    with pytest.raises(TransportError, match="Host key verification failed"):
        sshd.transport(known_hosts_file=empty).run(["true"])
    assert empty.read_text() == ""  # nothing was learned


@pytest.mark.slurm
def test_over_ssh_a_closed_port_raises_a_transport_error(sshd: SshServer) -> None:
    closed = free_port_block(1) + 1

    with pytest.raises(TransportError, match=f"ssh {sshd.destination}:{closed}: ssh failed: .*"):
        sshd.transport(port=closed).run(["true"])


@pytest.mark.slurm
def test_over_ssh_a_remote_command_past_its_timeout_raises(sshd: SshServer) -> None:
    with pytest.raises(TransportError, match="timed out after 1.5 s"):
        sshd.transport().run(["sleep", "10"], timeout=1.5)


@pytest.mark.slurm
def test_over_ssh_a_failing_remote_command_returns_its_exit_code(sshd: SshServer) -> None:
    result = sshd.transport().run(["sh", "-c", "echo out; echo err >&2; exit 7"])

    assert result == (7, "out\n", "err\n")


@pytest.mark.slurm
def test_over_ssh_a_shared_connection_runs_commands_literally_until_closed(
    sshd: SshServer, canary: Path
) -> None:
    control = Path(tempfile.mkdtemp(prefix="rc-cm-"))  # short: it holds a unix socket
    transport = sshd.transport(control_dir=control)
    try:
        first = transport.run(["printf", "%s\\0", *hostile_texts(canary)])
        assert [p.is_socket() for p in control.iterdir()] == [True]  # the master's socket
        second = transport.run(["echo", "again"])
    finally:
        transport.close()
        shutil.rmtree(control, ignore_errors=True)

    assert first.stdout.split("\0")[:-1] == hostile_texts(canary)
    assert second == (0, "again\n", "")
    assert not canary.exists()


def test_a_shared_connection_needs_a_private_directory(tmp_path: Path) -> None:
    tmp_path.chmod(0o755)

    with pytest.raises(ValueError, match="only we can access"):
        make_ssh(control_dir=tmp_path)
