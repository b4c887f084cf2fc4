"""A real local Slurm 22.05 cluster (``scripts/slurm-up.sh``) and a real sshd, for tests.

``SlurmLab`` drives the cluster directly (sbatch, raw squeue/sinfo JSON) so tests can check what
the code under test did by another path. ``SshServer`` is an OpenSSH server on a free loopback
port with its own host key, user key, authorized_keys and known_hosts, all in a temp dir.
Everything is stopped by the PIDs we started, never by name.
"""

from __future__ import annotations

import json
import os
import pwd
import random
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from remediation.controller import SshTransport

ROOT = Path(__file__).resolve().parents[3]
SLURM_UP = ROOT / "scripts" / "slurm-up.sh"
SLURM_DOWN = ROOT / "scripts" / "slurm-down.sh"
NNODES = 4
CRED_EXPIRE = 5  # the minimum: a requeued job may start again ~6 s later
# A job exiting with this code is requeued by Slurm itself (RequeueExit), as sites configure
# for the code their training wrappers use to ask for a retry.
REQUEUE_EXIT = 75
SSHD = "/usr/sbin/sshd"  # sshd re-executes itself and insists on an absolute path

# binary -> the Debian package that ships it (the fixtures fail naming it, never skip)
SLURM_BINARIES = {
    "munged": "munge",
    "munge": "munge",
    "slurmctld": "slurmctld",
    "slurmd": "slurmd",
    "scontrol": "slurm-client",
    "squeue": "slurm-client",
    "sinfo": "slurm-client",
    "sbatch": "slurm-client",
    "scancel": "slurm-client",
}
SSH_BINARIES = {SSHD: "openssh-server", "ssh": "openssh-client", "ssh-keygen": "openssh-client"}

T = TypeVar("T")


class LabError(RuntimeError):
    """The cluster or sshd could not be started, or a wait timed out."""


def missing_binaries(binaries: dict[str, str]) -> str | None:
    """A message naming the Debian packages to install, or None when all are there."""
    missing = {pkg: name for name, pkg in binaries.items() if shutil.which(name) is None}
    if not missing:
        return None
    names = ", ".join(sorted(missing.values()))
    packages = " ".join(sorted(missing))
    return (
        f"missing {names}: install the Debian packages with "
        f"`apt-get install --no-install-recommends {packages}` (scripts/system-packages.sh test)"
    )


def wait_for(check: Callable[[], T | None], timeout: float, what: str, step: float = 0.1) -> T:
    """Poll ``check`` until it returns something other than None/False; LabError on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value is not None and value is not False:
            return value
        if time.monotonic() > deadline:
            raise LabError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(step)


def free_port_block(count: int) -> int:
    """A base port such that base+1 .. base+count are free (below the ephemeral range)."""
    for _ in range(200):
        base = random.randrange(20000, 32000 - count)  # noqa: S311 - not security related
        if all(_port_is_free(base + i) for i in range(1, count + 1)):
            return base
    raise LabError("no free block of loopback ports")


def _port_is_free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@dataclass
class SlurmLab:
    """A running N-node cluster: ``slurm_conf`` selects it (pass it as ``SLURM_CONF``)."""

    root: Path
    ctld_port: int
    node_port_base: int
    nodes: tuple[str, ...] = tuple(f"node{i}" for i in range(1, NNODES + 1))
    started_in: float = 0.0

    @property
    def slurm_conf(self) -> Path:
        return self.root / "etc" / "slurm.conf"

    @property
    def jobs_dir(self) -> Path:
        return self.root / "jobs"

    @property
    def env(self) -> dict[str, str]:
        """Environment for the lab's scripts and client commands."""
        return {
            **os.environ,
            "LAB": str(self.root),
            "SLURM_CONF": str(self.slurm_conf),
            "NNODES": str(len(self.nodes)),
            "CTLD_PORT": str(self.ctld_port),
            "NODE_PORT_BASE": str(self.node_port_base),
            "CRED_EXPIRE": str(CRED_EXPIRE),
            "REQUEUE_EXIT": str(REQUEUE_EXIT),
            "READY_TIMEOUT": "30",
        }

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run a Slurm client command against this cluster (locally)."""
        done = subprocess.run(
            argv, env=self.env, capture_output=True, text=True, timeout=30, check=False
        )
        if check and done.returncode != 0:
            raise LabError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.strip()}")
        return done

    # -- jobs ----------------------------------------------------------------------------------

    def sbatch(self, script: str, *options: str) -> str:
        """Submit ``script`` (bash text) with sbatch ``options``; the job id."""
        path = self.jobs_dir / f"job-{time.monotonic_ns()}.sh"
        path.write_text("#!/bin/bash\n" + script)
        out = self.run(
            "sbatch", "--parsable", f"--chdir={self.jobs_dir}", *options, str(path)
        ).stdout
        return out.strip().split(";")[0]

    def submit_job(self, *, nodes: int = 2, sleep: int = 300, options: Sequence[str] = ()) -> str:
        """A batch job on ``nodes`` nodes: srun prints each node's name, then it sleeps."""
        script = (
            'echo "start restart=${SLURM_RESTART_COUNT:-0} nodes=$SLURM_JOB_NODELIST"\n'
            "srun bash -c 'echo \"task $SLURM_PROCID on $SLURMD_NODENAME\"'\n"
            f"sleep {sleep}\n"
        )
        return self.sbatch(script, "-N", str(nodes), "--open-mode=append", *options)

    def submit_failing_job(self, text: str, node: str, exit_code: int = 1) -> str:
        """A job on ``node`` that prints ``text`` (exactly) to its output and exits non-zero."""
        message = self.jobs_dir / f"message-{time.monotonic_ns()}.txt"
        message.write_text(text)
        script = f"cat {message}\nexit {exit_code}\n"
        return self.sbatch(script, "-N", "1", "-w", node, "--no-requeue")

    def output_path(self, job_id: str) -> Path:
        """Where a job submitted by this lab writes its output (``slurm-<id>.out``)."""
        return self.jobs_dir / f"slurm-{job_id}.out"

    def squeue(self) -> list[dict[str, Any]]:
        """Raw ``squeue --json`` jobs (read independently of the code under test)."""
        jobs: list[dict[str, Any]] = json.loads(self.run("squeue", "--json").stdout)["jobs"]
        return jobs

    def sinfo(self) -> dict[str, dict[str, Any]]:
        """Raw ``sinfo --json`` nodes by name."""
        nodes = json.loads(self.run("sinfo", "--json").stdout)["nodes"]
        return {node["name"]: node for node in nodes}

    def reset(self, timeout: float = 20.0) -> None:
        """Cancel every job and return every node to service; wait until all are idle."""
        self.run("scancel", f"--user={pwd.getpwuid(os.getuid()).pw_name}", check=False)
        for name, node in self.sinfo().items():
            if node["state"] == "down" or {"DRAIN", "FAIL"} & set(node["state_flags"]):
                self.run("scontrol", "update", f"nodename={name}", "state=resume", check=False)
        wait_for(self._all_idle, timeout, "every node idle and no job left")

    def _all_idle(self) -> bool:
        busy = [j for j in self.squeue() if j["job_state"] in ("RUNNING", "PENDING", "COMPLETING")]
        nodes = self.sinfo().values()
        return not busy and all(n["state"] == "idle" and not n["state_flags"] for n in nodes)

    # -- nodes ---------------------------------------------------------------------------------

    def kill_slurmd(self, node: str) -> None:
        """The node dies as far as Slurm can tell: its slurmd is killed (SIGKILL, by its PID).
        Slurm declares it down and fails or requeues its jobs ~25 s later."""
        pid = int((self.root / "run" / f"slurmd-{node}.pid").read_text())
        os.kill(pid, signal.SIGKILL)

    def start_slurmd(self, node: str) -> None:
        """Bring a killed node's slurmd back; it re-registers and cleans up its orphans."""
        self.run("slurmd", "-N", node)

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self) -> None:
        started = time.monotonic()
        done = subprocess.run(
            ["bash", str(SLURM_UP)],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=90,
            check=False,
        )
        self.started_in = time.monotonic() - started
        if done.returncode != 0:
            logs = self._log_tail()
            self.stop()
            raise LabError(f"slurm-up.sh failed ({done.returncode}): {done.stderr}\n{logs}")

    def stop(self) -> None:
        subprocess.run(
            ["bash", str(SLURM_DOWN)],
            env=self.env,
            capture_output=True,
            timeout=90,
            check=False,
        )

    def _log_tail(self) -> str:
        log = self.root / "log" / "slurmctld.log"
        return log.read_text()[-2000:] if log.exists() else ""


@dataclass
class SshServer:
    """A real OpenSSH server on 127.0.0.1:``port`` accepting ``identity_file`` for ``user``;
    ``known_hosts_file`` holds its host key for the client."""

    workdir: Path
    port: int
    user: str
    started_in: float = 0.0
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def identity_file(self) -> Path:
        return self.workdir / "id_ed25519"

    @property
    def known_hosts_file(self) -> Path:
        return self.workdir / "known_hosts"

    @property
    def host_key(self) -> Path:
        return self.workdir / "ssh_host_ed25519_key"

    @property
    def destination(self) -> str:
        return f"{self.user}@127.0.0.1"

    def transport(self, **kwargs: Any) -> SshTransport:
        """An SshTransport to this server (``remote_env=``, ``known_hosts_file=`` ...)."""
        options: dict[str, Any] = {
            "identity_file": self.identity_file,
            "known_hosts_file": self.known_hosts_file,
            "port": self.port,
            **kwargs,
        }
        return SshTransport(self.destination, **options)

    def start(self) -> None:
        started = time.monotonic()
        self._write_keys_and_config()
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege separation dir
        log = (self.workdir / "sshd.log").open("wb")
        self.process = subprocess.Popen(
            [SSHD, "-D", "-e", "-f", str(self.workdir / "sshd_config")],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
        transport = self.transport(connect_timeout=2)
        wait_for(lambda: self._answers(transport), 15, "sshd to accept our key")
        self.started_in = time.monotonic() - started

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=5)

    def _answers(self, transport: SshTransport) -> bool:
        if self.process is not None and self.process.poll() is not None:
            log = (self.workdir / "sshd.log").read_text(errors="replace")
            raise LabError(f"sshd exited {self.process.returncode}: {log[-2000:]}")
        try:
            return transport.run(["true"], timeout=5).exit_code == 0
        except Exception:  # noqa: BLE001 - not up yet
            return False

    def _write_keys_and_config(self) -> None:
        for key in (self.host_key, self.identity_file):
            keygen = ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)]
            subprocess.run(keygen, check=True, capture_output=True, timeout=30)
        public_user_key = self.identity_file.with_suffix(".pub").read_text()
        (self.workdir / "authorized_keys").write_text(public_user_key)
        host_public = self.host_key.with_suffix(".pub").read_text().split()
        self.known_hosts_file.write_text(f"[127.0.0.1]:{self.port} {' '.join(host_public[:2])}\n")
        (self.workdir / "sshd_config").write_text(self._config())

    def _config(self) -> str:
        return "\n".join(
            [
                f"Port {self.port}",
                "ListenAddress 127.0.0.1",
                f"HostKey {self.host_key}",
                f"PidFile {self.workdir / 'sshd.pid'}",
                f"AuthorizedKeysFile {self.workdir / 'authorized_keys'}",
                "PermitRootLogin prohibit-password",
                "PubkeyAuthentication yes",
                "PasswordAuthentication no",
                "KbdInteractiveAuthentication no",
                "UsePAM no",
                "StrictModes no",  # the temp dir's modes are pytest's, not sshd's idea of safe
                "X11Forwarding no",
                "AllowTcpForwarding no",
                "PrintMotd no",
                "LogLevel VERBOSE",
                "",
            ]
        )
