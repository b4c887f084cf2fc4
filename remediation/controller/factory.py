"""Builds the controller's and the watchdog's Slurm connection from command-line options."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .slurm import SlurmClient
from .transport import LocalTransport, SshTransport, Transport


def transport_from(options: dict[str, Any]) -> Transport:
    """Local commands, or commands over SSH with the host key checked."""
    # Passed with every command, so it applies on the remote side too over SSH.
    env = {"SLURM_CONF": options["slurm_conf"]} if options.get("slurm_conf") else {}
    if not options.get("ssh"):
        return LocalTransport(env)
    home = Path.home() / ".ssh"
    return SshTransport(
        options["ssh"],
        identity_file=Path(options.get("identity") or home / "id_ed25519"),
        # Host keys are always checked: scontrol must never run on an impostor.
        known_hosts_file=Path(options.get("known_hosts") or home / "known_hosts"),
        port=int(options.get("ssh_port") or 22),
        remote_env=env,
    )


def slurm_from(options: dict[str, Any]) -> SlurmClient:
    return SlurmClient(transport_from(options))
