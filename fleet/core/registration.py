"""What a cluster's registration may say, checked the same way wherever it comes from.

``manage.py add_cluster``/``configure_cluster``, ``POST``/``PUT /api/v1/clusters/`` and the
console's cluster form all end in ``Cluster.full_clean()``, which calls these checks (and the
checks the floors above register for the telemetry and the policy), so a document refused in
one place is refused in all, with the same words.

The **scheduler** document (README, "The scheduler document"):

``{"backend": "slurm", "transport": "ssh", "ssh": {"host": "slurm-head", "user": "ops",
"port": 22, "key": {"file": "head-key"}, "known_hosts": {"file": "head-known-hosts"}},
"slurm_conf": "/etc/slurm/slurm.conf"}``; ``"transport": "local"`` (the default) runs the
Slurm commands on the console's host. ``backend: simulated`` is the simulated cluster
(``simulation`` holds its settings). The key and known_hosts are secrets by reference: files
under SECRETS_DIR, since ssh reads them as files.

Plain Python: the caller passes the site's secret store.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from .outbound import SecretStore, host_allowed, is_reference

SCHEDULER_BACKENDS = ("simulated", "slurm")
TRANSPORTS = ("local", "ssh")
NAME = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,62})$")
# What ssh and the remote shell accept without quoting tricks: no options, no spaces.
HOST = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9.-]{0,252})$|^\[?[0-9A-Fa-f:.]+\]?$")
USER = re.compile(r"^[a-z_][a-z0-9_.-]{0,31}$")
PARTITION = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
SCHEDULER_KEYS = {
    "simulated": {"backend", "simulation"},
    "slurm": {"backend", "transport", "ssh", "slurm_conf"},
}
SSH_KEYS = {"host", "user", "port", "key", "known_hosts"}


# Console pages under /clusters/ that a cluster's name would hide.
RESERVED_NAMES = frozenset({"new"})


def name_problem(name: object) -> str | None:
    """A cluster's name is part of its URLs and of the controller's command line."""
    if not isinstance(name, str) or not NAME.match(name):
        return "must be 1-63 lower-case letters, digits and -, starting with a letter or digit"
    if name in RESERVED_NAMES:
        return f"{name!r} is reserved for a console page"
    return None


def partitions_problems(value: object) -> list[str]:
    if not isinstance(value, list):
        return ["must be a list of partition names"]
    return [
        f"[{index}] {item!r} is not a partition name (letters, digits, _ . -)"
        for index, item in enumerate(value)
        if not isinstance(item, str) or not PARTITION.match(item)
    ]


def scheduler_problems(
    document: object, secrets: SecretStore, allowed_hosts: Sequence[str] = ()
) -> list[str]:
    """Every problem of a scheduler document, each naming its key (empty: none). An SSH host
    must be one of ``allowed_hosts`` (the site's OUTBOUND_ALLOWED_HOSTS; empty: any), as a
    telemetry URL must: the console connects to it."""
    if not isinstance(document, dict):
        return ["must be a JSON object"]
    backend = document.get("backend", "simulated")
    if backend not in SCHEDULER_BACKENDS:
        return [f"backend {backend!r} is not one of {', '.join(SCHEDULER_BACKENDS)}"]
    problems = _unknown(document, SCHEDULER_KEYS[backend], f"a {backend} scheduler")
    if backend == "simulated":
        if not isinstance(document.get("simulation", {}), dict):
            problems.append("simulation must be a JSON object")
        return problems
    transport = document.get("transport", "local")
    if transport not in TRANSPORTS:
        problems.append(f"transport {transport!r} is not one of {', '.join(TRANSPORTS)}")
    conf = document.get("slurm_conf")
    if conf is not None and (not isinstance(conf, str) or not conf.startswith("/")):
        problems.append("slurm_conf must be an absolute path on the scheduler's host")
    if transport == "ssh":
        problems += _ssh_problems(document.get("ssh"), secrets, allowed_hosts)
    elif "ssh" in document:
        problems.append('ssh is read only with "transport": "ssh"')
    return problems


def _ssh_problems(ssh: object, secrets: SecretStore, allowed_hosts: Sequence[str]) -> list[str]:
    if not isinstance(ssh, dict):
        return ['ssh must be a JSON object with host, user, key and known_hosts for "ssh"']
    problems = [f"ssh.{p}" for p in _unknown(ssh, SSH_KEYS, "ssh")]
    problems += [
        f"ssh.{key} is required" for key in ("host", "user", "key", "known_hosts") if key not in ssh
    ]
    if "host" in ssh and not (isinstance(ssh["host"], str) and HOST.match(ssh["host"])):
        problems.append("ssh.host must be a host name or address")
    elif "host" in ssh and (problem := ssh_host_problem(ssh["host"], allowed_hosts)):
        problems.append(f"ssh.host: {problem}")
    if "user" in ssh and not (isinstance(ssh["user"], str) and USER.match(ssh["user"])):
        problems.append("ssh.user must be a user name (lower case, digits, _ . -)")
    port = ssh.get("port", 22)
    if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
        problems.append("ssh.port must be a TCP port (1-65535)")
    for key in ("key", "known_hosts"):
        if key in ssh and (problem := _file_reference_problem(ssh[key], secrets)):
            problems.append(f"ssh.{key}: {problem}")
    return problems


def ssh_host_problem(host: str, allowed_hosts: Sequence[str]) -> str | None:
    """Checked when saved and again before each connection (the allowed hosts may change)."""
    if host_allowed(host.strip("[]"), allowed_hosts):
        return None
    return f"host {host} is not in OUTBOUND_ALLOWED_HOSTS"


def _file_reference_problem(ref: object, secrets: SecretStore) -> str | None:
    # ssh reads both as files: an environment variable would not do.
    if not is_reference(ref) or not isinstance(ref, dict) or "file" not in ref:
        return 'name a file under SECRETS_DIR by reference: {"file": NAME} (no free path)'
    return secrets.problem(ref)


def _unknown(document: Mapping[str, Any], known: set[str], what: str) -> list[str]:
    return [
        f"{key} is not a setting of {what} ({', '.join(sorted(known))})"
        for key in document
        if key not in known
    ]


class DocumentError(ValueError):
    """A registration file that cannot be read as a document."""


REGISTRATION_KEYS = ("name", "scheduler", "telemetry", "partitions_allowlist", "policy")


def registration_from_text(text: str, yaml_load: Any = None) -> dict[str, Any]:
    """A registration document (JSON, or YAML when ``yaml_load`` is given and it is not JSON):
    an object with ``name`` and any of the settings documents, nothing else."""
    try:
        document = json.loads(text)
    except ValueError as exc:
        if yaml_load is None:
            raise DocumentError(f"not valid JSON: {exc}") from exc
        try:
            document = yaml_load(text)
        except Exception as yaml_exc:  # the YAML library's own error names line and column
            raise DocumentError(f"neither JSON nor YAML: {yaml_exc}") from yaml_exc
    if not isinstance(document, dict):
        raise DocumentError("the document must be an object (a mapping) of settings")
    unknown = sorted(set(document) - set(REGISTRATION_KEYS))
    if unknown:
        raise DocumentError(
            f"not a registration setting: {', '.join(map(str, unknown))} "
            f"(use {', '.join(REGISTRATION_KEYS)})"
        )
    return document
