"""Run a command, given as an argument list, on the Slurm controller host: here or over SSH.

Nothing here ever builds a shell string from text it was given. ``LocalTransport`` runs the list
with ``shell=False``; ``SshTransport`` must hand ssh one string (ssh always passes the command to
the remote user's shell), so it quotes every argument with ``shlex.quote`` and each one reaches
the remote program as one literal argument. The remote login shell must be POSIX (sh, bash, dash,
zsh, ksh), as it is for any account that runs Slurm commands.
"""

from __future__ import annotations

import logging
import os
import re
import shlex
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NamedTuple, Protocol

logger = logging.getLogger(__name__)

DEFAULT_TIMEOUT = 30.0
SSH_FAILURE = 255  # ssh's own exit status when it fails (cannot connect, host key, auth ...)

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*", re.ASCII)
# user@host, host, or user@[v6]; never a leading "-", which ssh would read as an option
_DESTINATION = re.compile(
    r"(?:[A-Za-z_][A-Za-z0-9_.-]{0,31}@)?(?:[A-Za-z0-9][A-Za-z0-9.-]{0,252}|\[[0-9A-Fa-f:.]+\])",
    re.ASCII,
)


class TransportError(RuntimeError):
    """The command could not be run at all (not: it ran and failed), e.g. ssh could not connect,
    the host key did not match, the program is missing or the timeout passed."""

    def __init__(self, target: str, reason: str) -> None:
        super().__init__(f"{target}: {reason}")
        self.target = target
        self.reason = reason


class CommandResult(NamedTuple):
    """What a command returned; unpacks as ``(exit_code, stdout, stderr)``."""

    exit_code: int
    stdout: str
    stderr: str


class Transport(Protocol):
    """Runs an argument list somewhere and returns its result."""

    @property
    def target(self) -> str:
        """Where commands run, for messages: ``local`` or ``ssh user@host:port``."""
        ...

    def run(self, argv: Sequence[str], *, timeout: float = DEFAULT_TIMEOUT) -> CommandResult: ...


class LocalTransport:
    """Runs commands on this host with ``shell=False``; ``env`` is added to our environment
    (``{"SLURM_CONF": ...}`` selects the cluster)."""

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        self._env = _checked_env(env or {})

    @property
    def target(self) -> str:
        return "local"

    def run(self, argv: Sequence[str], *, timeout: float = DEFAULT_TIMEOUT) -> CommandResult:
        args = _checked_argv(argv)
        return _execute(args, timeout, self.target, {**os.environ, **self._env})


class SshTransport:
    """Runs commands on ``destination`` (``user@host``) through the ``ssh`` client, with the host
    key checked against ``known_hosts_file`` only and no prompts.

    ``remote_env`` (e.g. ``{"SLURM_CONF": ...}``) is set by prefixing ``env NAME=VALUE`` to the
    argument list: it needs only coreutils' ``env`` on the remote host, unlike ssh's ``SetEnv``,
    which works only where the server's ``AcceptEnv`` allows that name.

    ``control_dir`` (a private directory) makes commands share one authenticated connection
    (ssh's ControlMaster, kept ``control_persist`` seconds after the last command), which skips
    the handshake (measured on a 2-core box: ~0.15 s a command instead of ~0.4 s). ``close()``
    ends it.
    """

    def __init__(
        self,
        destination: str,
        *,
        identity_file: Path,
        known_hosts_file: Path,
        port: int = 22,
        remote_env: Mapping[str, str] | None = None,
        connect_timeout: float = 10.0,
        ssh_binary: str = "ssh",
        control_dir: Path | None = None,
        control_persist: int = 60,
    ) -> None:
        if not _DESTINATION.fullmatch(destination):
            raise ValueError(f"not an ssh destination (user@host): {destination!r}")
        if not 0 < port < 65536:
            raise ValueError(f"not a TCP port: {port!r}")
        self.destination = destination
        self.port = port
        self._identity = _option_path(identity_file)
        self._known_hosts = _option_path(known_hosts_file)
        self._remote_env = _checked_env(remote_env or {})
        self._connect_timeout = max(1, round(connect_timeout))
        self._ssh = ssh_binary
        self._control = _control_options(control_dir, control_persist)

    @property
    def target(self) -> str:
        return f"ssh {self.destination}:{self.port}"

    def run(self, argv: Sequence[str], *, timeout: float = DEFAULT_TIMEOUT) -> CommandResult:
        result = _execute(self.ssh_argv(argv), timeout, self.target, None)
        if result.exit_code == SSH_FAILURE:
            # 255 is ssh failing (a remote program exiting 255 is indistinguishable; Slurm's don't)
            raise TransportError(self.target, f"ssh failed: {result.stderr.strip() or 'exit 255'}")
        return result

    def close(self) -> None:
        """End the shared connection, if there is one (it would expire by itself)."""
        if self._control:
            exit_master = [self._ssh, *self._options(), "-O", "exit", "--", self.destination]
            _execute(exit_master, self._connect_timeout, self.target, None)

    def ssh_argv(self, argv: Sequence[str]) -> list[str]:
        """The local ``ssh`` argument list that runs ``argv`` remotely."""
        return [
            self._ssh,
            *self._options(),
            "--",  # whatever follows is the destination and the command, never an option
            self.destination,
            self.remote_command(argv),
        ]

    def remote_command(self, argv: Sequence[str]) -> str:
        """The one string the remote shell gets: every argument quoted for it."""
        args = _checked_argv(argv)
        if self._remote_env:
            # env would take a program name containing "=" for one more assignment
            if "=" in args[0]:
                raise ValueError(f"program name contains '=': {args[0]!r}")
            assignments = [f"{name}={value}" for name, value in self._remote_env.items()]
            args = ["env", *assignments, *args]
        return shlex.join(args)

    def _options(self) -> list[str]:
        settings = {
            "BatchMode": "yes",  # never prompt for a password or a passphrase
            "StrictHostKeyChecking": "yes",  # an unknown or changed host key is an error
            "UserKnownHostsFile": self._known_hosts,
            "GlobalKnownHostsFile": "/dev/null",  # trust only the file we were given
            "UpdateHostKeys": "no",
            "IdentitiesOnly": "yes",
            "ConnectTimeout": str(self._connect_timeout),
            "LogLevel": "ERROR",  # keep stderr for the remote program and real failures
        }
        options = ["-T", "-p", str(self.port), "-i", self._identity]
        for name, value in {**settings, **self._control}.items():
            options += ["-o", f"{name}={value}"]
        return options


def _execute(
    args: list[str], timeout: float, target: str, env: Mapping[str, str] | None
) -> CommandResult:
    logger.debug("%s: running %s", target, shlex.join(args))
    try:
        done = subprocess.run(  # noqa: S603 - an argument list, shell=False
            args,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            encoding="utf-8",
            errors="replace",
            timeout=timeout,
            env=env,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise TransportError(target, f"{args[0]} timed out after {timeout:g} s") from exc
    except OSError as exc:  # missing program, no permission
        raise TransportError(target, f"cannot run {args[0]!r}: {exc.strerror or exc}") from exc
    return CommandResult(done.returncode, done.stdout, done.stderr)


def _checked_argv(argv: Sequence[str]) -> list[str]:
    if isinstance(argv, str):  # a string is a sequence too: refuse it, never split it
        raise TypeError("argv must be a list of arguments, not a string")
    args = list(argv)
    if not args or not args[0]:
        raise ValueError("argv needs a program name")
    for arg in args:
        if not isinstance(arg, str):
            raise TypeError(f"argument {arg!r} is not a string")
        if "\0" in arg:
            raise ValueError(f"argument contains a NUL byte: {arg!r}")
    return args


def _checked_env(env: Mapping[str, str]) -> dict[str, str]:
    for name, value in env.items():
        if not _ENV_NAME.fullmatch(name):
            raise ValueError(f"not an environment variable name: {name!r}")
        if "\0" in value:
            raise ValueError(f"value of {name} contains a NUL byte")
    return dict(env)


def _control_options(directory: Path | None, persist: int) -> dict[str, str]:
    if directory is None:
        return {}
    # whoever can open the master's socket runs commands as our remote user
    if not directory.is_dir() or directory.stat().st_mode & 0o077:
        raise ValueError(f"control_dir must be a directory only we can access: {directory}")
    if len(str(directory)) > 60:  # %C adds 40 characters; unix sockets allow about 104
        raise ValueError(f"control_dir path too long for a unix socket: {directory}")
    return {
        "ControlMaster": "auto",
        "ControlPath": f"{_option_path(directory)}/%C",
        "ControlPersist": str(max(1, persist)),
    }


def _option_path(path: Path) -> str:
    text = str(path)
    # ssh splits -o values on whitespace (UserKnownHostsFile takes a list of files)
    if not text or any(ch.isspace() for ch in text) or "\0" in text:
        raise ValueError(f"path unusable in an ssh option: {text!r}")
    return text
