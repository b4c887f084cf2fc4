"""The Slurm side of the Slurm Advisor Controller: command transports (local and SSH), the
Slurm commands the controller issues and the state reader. Plain Python, no Django."""

from .hostlist import expand_hostlist
from .slurm import (
    SlurmClient,
    SlurmCommandError,
    sanitise_reason,
    validate_job_id,
    validate_node_name,
)
from .slurm_json import SlurmOutputError
from .transport import CommandResult, LocalTransport, SshTransport, Transport, TransportError

__all__ = [
    "CommandResult",
    "LocalTransport",
    "SlurmClient",
    "SlurmCommandError",
    "SlurmOutputError",
    "SshTransport",
    "Transport",
    "TransportError",
    "expand_hostlist",
    "sanitise_reason",
    "validate_job_id",
    "validate_node_name",
]
