"""Options shared by ``add_cluster`` and ``configure_cluster``: a registration file (JSON or
YAML), flags, or both (flags override the file's sections). Secrets are given as references,
``env:NAME`` or ``file:NAME``, never as values."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from fleet.core.registration import DocumentError, registration_from_text
from fleet.models import Cluster
from recovery_console.console import registration
from recovery_console.console.reviews import ApprovalRefused
from recovery_console.jsonbodies import JsonTooDeep, loads_bounded

LOGS = ("files", "loki", "victorialogs")
METRICS = ("prometheus", "none")


def add_registration_arguments(parser: CommandParser) -> None:
    parser.add_argument("name", nargs="?", help="the cluster's name (or name: in the file)")
    parser.add_argument("--file", help="a registration document, JSON or YAML ('-': stdin)")
    scheduler = parser.add_argument_group("scheduler (replaces the scheduler document)")
    scheduler.add_argument("--backend", choices=("slurm", "simulated"))
    scheduler.add_argument("--transport", choices=("local", "ssh"))
    scheduler.add_argument("--ssh-host")
    scheduler.add_argument("--ssh-user")
    scheduler.add_argument("--ssh-port", type=int)
    scheduler.add_argument("--ssh-key", metavar="NAME", help="key file under SECRETS_DIR")
    scheduler.add_argument("--ssh-known-hosts", metavar="NAME", help="file under SECRETS_DIR")
    scheduler.add_argument("--slurm-conf", help="SLURM_CONF on the scheduler's host")
    logs = parser.add_argument_group("logs (replaces telemetry.logs)")
    logs.add_argument("--logs", choices=LOGS)
    logs.add_argument("--logs-path", help="files: the directory of the jobs' output files")
    logs.add_argument("--logs-pattern", help="files: their name pattern (slurm-*.out)")
    logs.add_argument("--node-logs-path", help="files: a directory of nodes' <host>.log")
    logs.add_argument("--logs-url")
    logs.add_argument("--logs-tenant", help="loki: X-Scope-OrgID")
    logs.add_argument("--logs-query", help="loki: the stream selector; victorialogs: LogsQL")
    logs.add_argument("--logs-username")
    logs.add_argument("--logs-password", metavar="REF", help="env:NAME or file:NAME")
    logs.add_argument("--logs-token", metavar="REF", help="env:NAME or file:NAME")
    metrics = parser.add_argument_group("metrics (replaces telemetry.metrics)")
    metrics.add_argument("--metrics", choices=METRICS)
    metrics.add_argument("--metrics-url")
    metrics.add_argument("--metrics-selector", help='label matchers, e.g. cluster="a"')
    metrics.add_argument("--metrics-username")
    metrics.add_argument("--metrics-password", metavar="REF", help="env:NAME or file:NAME")
    metrics.add_argument("--metrics-token", metavar="REF", help="env:NAME or file:NAME")
    metrics.add_argument("--metrics-timeout", type=float, help="seconds per request")
    metrics.add_argument("--metrics-ca", metavar="REF", help="PEM bundle: file:NAME")
    parser.add_argument(
        "--partition", action="append", help="action mode may touch only these (repeat)"
    )
    parser.add_argument("--policy", help="the policy document, JSON")


def registration_from(options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The cluster's name and the settings the file and flags give."""
    document = _read_file(options["file"]) if options.get("file") else {}
    in_file = document.pop("name", None)
    name = options.get("name") or in_file
    if not name:
        raise CommandError("name the cluster: NAME, or name: in the file")
    if in_file is not None and in_file != name:
        raise CommandError(f"the file registers {in_file!r}, the command names {name!r}")
    scheduler = _scheduler(options)
    if scheduler:
        document["scheduler"] = scheduler
    # A flag replaces its section only: the file's other sections, or else the cluster's, stay.
    sections = {"logs": _logs(options), "metrics": _metrics(options)}
    if any(sections.values()):
        telemetry = document.get("telemetry")
        if telemetry is None:
            stored = Cluster.objects.filter(name=name).values_list("telemetry", flat=True)
            telemetry = stored.first() or {}
        document["telemetry"] = {**telemetry, **{k: v for k, v in sections.items() if v}}
    if options.get("partition"):
        document["partitions_allowlist"] = options["partition"]
    if options.get("policy"):
        document["policy"] = _json(options["policy"], "--policy")
    return str(name), document


def run(command: BaseCommand, options: dict[str, Any], *, may_change: bool) -> None:
    name, settings = registration_from(options)
    try:
        outcome = registration.configure_from_cli(
            name, settings, may_create=True, may_change=may_change
        )
    except ValidationError as exc:
        raise CommandError(_problems(exc)) from None
    except (registration.ClusterExists, ValueError) as exc:
        raise CommandError(str(exc)) from None
    except ApprovalRefused as exc:
        raise CommandError(exc.reason) from None
    if outcome.created:
        command.stdout.write(f"registered {name} (monitor mode)")
    elif outcome.changed:
        command.stdout.write(f"changed {name}: {', '.join(outcome.changed)}")
    else:
        command.stdout.write(f"{name} unchanged")


def _problems(exc: ValidationError) -> str:
    if not hasattr(exc, "error_dict"):
        return "; ".join(exc.messages)
    lines = [f"{field}: {p}" for field, problems in exc.message_dict.items() for p in problems]
    return "refused:\n  " + "\n  ".join(lines)


def _read_file(path: str) -> dict[str, Any]:
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text()
    except OSError as exc:
        raise CommandError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        return registration_from_text(text, yaml.safe_load)
    except DocumentError as exc:
        raise CommandError(f"{path}: {exc}") from None


def _json(text: str, flag: str) -> Any:
    try:
        return loads_bounded(text)
    except JsonTooDeep as exc:
        raise CommandError(f"{flag}: {exc}") from None
    except ValueError as exc:
        raise CommandError(f"{flag} is not valid JSON: {exc}") from None


def reference(value: str, flag: str) -> dict[str, str]:
    """``env:NAME`` or ``file:NAME`` as the documents write a reference."""
    kind, _, name = value.partition(":")
    if kind not in ("env", "file") or not name:
        raise CommandError(f"{flag} takes a reference, env:NAME or file:NAME, not a secret")
    return {kind: name}


def _given(options: dict[str, Any], keys: dict[str, str]) -> dict[str, Any]:
    return {key: options[flag] for key, flag in keys.items() if options.get(flag) is not None}


def _scheduler(options: dict[str, Any]) -> dict[str, Any]:
    document = _given(
        options, {"backend": "backend", "transport": "transport", "slurm_conf": "slurm_conf"}
    )
    ssh = _given(options, {"host": "ssh_host", "user": "ssh_user", "port": "ssh_port"})
    for key, flag in (("key", "ssh_key"), ("known_hosts", "ssh_known_hosts")):
        if options.get(flag):
            ssh[key] = {"file": options[flag]}
    if ssh:
        document["ssh"] = ssh
    if document:
        document.setdefault("backend", "slurm")
    return document


def _logs(options: dict[str, Any]) -> dict[str, Any]:
    section = _given(
        options,
        {
            "type": "logs",
            "path": "logs_path",
            "pattern": "logs_pattern",
            "node_logs_path": "node_logs_path",
            "url": "logs_url",
            "tenant": "logs_tenant",
            "query": "logs_query",
            "username": "logs_username",
        },
    )
    for key in ("password", "token"):
        if options.get(f"logs_{key}"):
            section[key] = reference(options[f"logs_{key}"], f"--logs-{key}")
    return section


def _metrics(options: dict[str, Any]) -> dict[str, Any]:
    section = _given(
        options,
        {
            "type": "metrics",
            "url": "metrics_url",
            "selector": "metrics_selector",
            "username": "metrics_username",
            "timeout": "metrics_timeout",
        },
    )
    for key in ("password", "token", "ca"):
        if options.get(f"metrics_{key}"):
            section[key] = reference(options[f"metrics_{key}"], f"--metrics-{key}")
    return section
