"""Fixtures for the Slurm side of the controller: a real 4-node Slurm 22.05 cluster with munge
and a real sshd, each started once per test session (per xdist worker), on free loopback ports.

``slurm_lab``         SlurmLab: ``slurm_conf``, ``nodes``, ``sbatch``, ``submit_job``,
                      ``submit_failing_job``, ``output_path``, raw ``squeue``/``sinfo``, ``reset``
``sshd``              SshServer: ``destination``, ``port``, ``identity_file``,
                      ``known_hosts_file``, ``transport(**kwargs)``
``local_transport``   LocalTransport with ``SLURM_CONF`` set
``ssh_transport``     SshTransport to ``sshd`` running ``env SLURM_CONF=... <command>``
``slurm_client``      SlurmClient, parametrized over both transports (ids ``local``, ``ssh``),
                      on a reset cluster (no jobs, every node idle)
``local_slurm_client`` / ``ssh_slurm_client``   the same on one transport, also after a reset

A missing binary fails the fixture with the Debian package to install; nothing is skipped.
"""

from __future__ import annotations

import getpass
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from remediation.controller import LocalTransport, SlurmClient, SshTransport
from tests.remediation.controller.lab import (
    NNODES,
    SLURM_BINARIES,
    SSH_BINARIES,
    LabError,
    SlurmLab,
    SshServer,
    free_port_block,
    missing_binaries,
)


def _require_root() -> None:
    if os.geteuid() != 0:  # slurmd and the lab's SlurmUser=root need it
        pytest.fail("the Slurm lab runs slurmctld/slurmd as root: run these tests as root", False)


@pytest.fixture(scope="session")
def slurm_lab() -> Iterator[SlurmLab]:
    message = missing_binaries(SLURM_BINARIES)
    if message:
        pytest.fail(message, pytrace=False)
    _require_root()
    # not under pytest's 0700 tmp dirs: munged wants every directory above its socket o+x
    root = Path(tempfile.mkdtemp(prefix="rc-slurmlab-"))
    root.chmod(0o755)
    ports = free_port_block(1 + NNODES)
    lab = SlurmLab(root=root, ctld_port=ports + 1, node_port_base=ports + 1)
    try:
        failure = _start(lab)
        if failure:
            pytest.fail(failure, pytrace=False)
        yield lab
    finally:
        lab.stop()
        shutil.rmtree(root, ignore_errors=True)


def _start(service: SlurmLab | SshServer) -> str | None:
    """Start the service; why it failed, if it did."""
    try:
        service.start()
    except LabError as exc:
        return str(exc)
    return None


@pytest.fixture(scope="session")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshServer]:
    message = missing_binaries(SSH_BINARIES)
    if message:
        pytest.fail(message, pytrace=False)
    server = SshServer(tmp_path_factory.mktemp("sshd"), free_port_block(1) + 1, getpass.getuser())
    try:
        failure = _start(server)
        if failure:
            pytest.fail(failure, pytrace=False)
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def local_transport(slurm_lab: SlurmLab) -> LocalTransport:
    return LocalTransport(env={"SLURM_CONF": str(slurm_lab.slurm_conf)})


@pytest.fixture(scope="session")
def ssh_transport(slurm_lab: SlurmLab, sshd: SshServer) -> SshTransport:
    return sshd.transport(remote_env={"SLURM_CONF": str(slurm_lab.slurm_conf)})


@pytest.fixture
def local_slurm_client(slurm_lab: SlurmLab, local_transport: LocalTransport) -> SlurmClient:
    slurm_lab.reset()
    return SlurmClient(local_transport)


@pytest.fixture
def ssh_slurm_client(slurm_lab: SlurmLab, ssh_transport: SshTransport) -> SlurmClient:
    slurm_lab.reset()
    return SlurmClient(ssh_transport)


@pytest.fixture(params=["local", "ssh"])
def slurm_client(request: pytest.FixtureRequest) -> SlurmClient:
    client: SlurmClient = request.getfixturevalue(f"{request.param}_slurm_client")
    return client


@pytest.fixture
def own_partition(slurm_lab: SlurmLab) -> Iterator[str]:
    """A partition of its own, which alone the test's console may act in: jobs earlier tests
    left in Slurm's queue (failed ones among them) are reported, but never acted on."""
    slurm_lab.run(
        "scontrol",
        "create",
        "PartitionName=own",
        "Nodes=node[1-4]",
        "OverSubscribe=EXCLUSIVE",
        "MaxTime=INFINITE",
        "State=UP",
    )
    yield "own"
    slurm_lab.reset()
    slurm_lab.run("scontrol", "delete", "PartitionName=own", check=False)
