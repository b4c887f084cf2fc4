"""Slurm commands the controller issues, and the state it reads, over any ``Transport``.

Every command is an argument list built from validated parts: job ids and node names must match
strict patterns before anything runs, and a drain reason travels as one argument. A non-zero exit
is Slurm refusing (``SlurmCommandError`` with its message); not reaching Slurm at all is a
``TransportError``.
"""

from __future__ import annotations

import logging
import re
import shlex
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime

from fleet.core.scheduler import ClusterSnapshot, JobRecord

from .slurm_json import SlurmOutputError, jobs_from_document, load_document, nodes_from_document
from .transport import DEFAULT_TIMEOUT, CommandResult, Transport

logger = logging.getLogger(__name__)

JOB_ID_PATTERN = re.compile(r"[1-9][0-9]{0,9}(?:_[0-9]{1,10})?", re.ASCII)  # 1234, 1234_7
NODE_NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}", re.ASCII)
MAX_REASON_LENGTH = 200
SCONTROL_JSON_SINCE = (23, 2)  # "scontrol show ... --json" first shipped in 23.02
_VERSION = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")
_UNKNOWN_JOB = "Invalid job id specified"
_SLURMD_TIMEOUT = re.compile(r"^SlurmdTimeout\s*=\s*(\d+)", re.MULTILINE)


class SlurmCommandError(RuntimeError):
    """Slurm refused a command: it ran and exited non-zero. ``stderr`` holds Slurm's message
    ("Invalid job id specified", "Job is no longer pending execution", ...)."""

    def __init__(self, command: Sequence[str], exit_code: int, stderr: str) -> None:
        self.command = tuple(command)
        self.exit_code = exit_code
        self.stderr = stderr.strip()
        super().__init__(f"{shlex.join(self.command)} exited {exit_code}: {self.stderr}")


def validate_job_id(job_id: str) -> str:
    """``job_id`` if it is a Slurm job id (``1234``) or array task (``1234_7``)."""
    if not isinstance(job_id, str) or not JOB_ID_PATTERN.fullmatch(job_id):
        raise ValueError(f"not a Slurm job id: {job_id!r}")
    return job_id


def validate_node_name(node: str) -> str:
    """``node`` if it is a plain node name (no hostlist brackets, spaces or punctuation)."""
    if not isinstance(node, str) or not NODE_NAME_PATTERN.fullmatch(node):
        raise ValueError(f"not a node name: {node!r}")
    return node


def sanitise_reason(reason: str) -> str:
    """One line of printable text, at most ``MAX_REASON_LENGTH`` characters, exactly as sinfo
    will show it (scontrol drops a leading and a trailing double quote, so we do too)."""
    text = "".join(ch if ch.isprintable() else " " for ch in str(reason))
    text = " ".join(text.split())[:MAX_REASON_LENGTH].strip(' "')
    if not text:
        raise ValueError(f"a drain needs a reason with some text, got {reason!r}")
    return text


class SlurmClient:
    """The controller's view of one Slurm cluster: actions and state reads, through a transport
    (``LocalTransport`` on the controller host, ``SshTransport`` from elsewhere)."""

    def __init__(self, transport: Transport, *, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.transport = transport
        self.timeout = timeout
        self._version: tuple[int, int, int] | None = None
        self._slurmd_timeout: int | None = None

    # -- actions -------------------------------------------------------------------------------

    def requeue_hold(self, job_id: str) -> None:
        """Requeue the job and hold it (PENDING, priority 0, restart count + 1)."""
        self._check(["scontrol", "requeuehold", validate_job_id(job_id)])

    def hold(self, job_id: str) -> None:
        """Hold a pending job (priority 0): it stays pending until released."""
        self._check(["scontrol", "hold", validate_job_id(job_id)])

    def update_exclusions(self, job_id: str, nodes: Iterable[str]) -> None:
        """Set the pending job's excluded nodes (replacing earlier ones; none clears them)."""
        job = validate_job_id(job_id)
        names = ",".join(dict.fromkeys(validate_node_name(n) for n in nodes))
        self._check(["scontrol", "update", f"jobid={job}", f"ExcNodeList={names}"])

    def release(self, job_id: str) -> None:
        """Release a held job so it can be scheduled again."""
        self._check(["scontrol", "release", validate_job_id(job_id)])

    def cancel(self, job_id: str) -> None:
        """Cancel the job. scancel exits 0 for a job Slurm no longer knows."""
        self._check(["scancel", validate_job_id(job_id)])

    def drain(self, node: str, reason: str) -> None:
        """Drain the node: running jobs finish, nothing new starts there."""
        name, text = validate_node_name(node), sanitise_reason(reason)
        self._check(["scontrol", "update", f"nodename={name}", "state=drain", f"reason={text}"])

    def resume(self, node: str) -> None:
        """Return a drained or down node to service (Slurm refuses it for a node in service)."""
        self._check(["scontrol", "update", f"nodename={validate_node_name(node)}", "state=resume"])

    # -- state ---------------------------------------------------------------------------------

    def snapshot(self) -> ClusterSnapshot:
        """All jobs Slurm still holds (finished ones until MinJobAge) and all nodes."""
        taken_at = datetime.now(UTC)
        jobs = jobs_from_document(self._json(["squeue", "--all", "--json"]))
        doc = self._json(["sinfo", "--all", "--json"])
        nodes = nodes_from_document(doc, self.slurmd_timeout_s)
        return ClusterSnapshot(taken_at=taken_at, jobs=jobs, nodes=nodes)

    @property
    def slurmd_timeout_s(self) -> int:
        """``SlurmdTimeout`` from ``scontrol show config`` (read once; 0 if not shown)."""
        if self._slurmd_timeout is None:
            match = _SLURMD_TIMEOUT.search(self._check(["scontrol", "show", "config"]).stdout)
            self._slurmd_timeout = int(match[1]) if match else 0
        return self._slurmd_timeout

    def job(self, job_id: str) -> JobRecord | None:
        """A fresh read of one job (``1234`` or array task ``1234_7``); None if Slurm has
        forgotten it or never had it."""
        job_id = validate_job_id(job_id)
        if self.version >= SCONTROL_JSON_SINCE:
            jobs = self._scontrol_job(job_id)
        else:
            # 22.05 has no JSON for one job; squeue ignores -j with --json, so read all. Its
            # "scontrol -o show job" text is ambiguous: a name or comment may hold " Key=value".
            jobs = jobs_from_document(self._json(["squeue", "--all", "--json"]))
        return next((job for job in jobs if job.job_id == job_id), None)

    @property
    def version(self) -> tuple[int, int, int]:
        """Slurm's version, from ``scontrol --version`` (read once)."""
        if self._version is None:
            out = self._check(["scontrol", "--version"]).stdout
            match = _VERSION.search(out)
            if match is None:
                raise SlurmOutputError(f"cannot read a version in {out!r}")
            self._version = (int(match[1]), int(match[2]), int(match[3] or 0))
        return self._version

    def _scontrol_job(self, job_id: str) -> tuple[JobRecord, ...]:
        argv = ["scontrol", "show", "job", job_id, "--json"]
        result = self._run(argv)
        if result.exit_code != 0 and _UNKNOWN_JOB in result.stderr:
            return ()
        _raise_for(argv, result)
        return jobs_from_document(load_document(result.stdout, shlex.join(argv)))

    def _json(self, argv: list[str]) -> dict[str, object]:
        return load_document(self._check(argv).stdout, shlex.join(argv))

    def _check(self, argv: list[str]) -> CommandResult:
        result = self._run(argv)
        _raise_for(argv, result)
        return result

    def _run(self, argv: list[str]) -> CommandResult:
        logger.info("%s: %s", self.transport.target, shlex.join(argv))
        return self.transport.run(argv, timeout=self.timeout)


def _raise_for(argv: list[str], result: CommandResult) -> None:
    if result.exit_code != 0:
        raise SlurmCommandError(argv, result.exit_code, result.stderr or result.stdout)
