"""The head-node entry point: ``python -m remediation.controller controller|watchdog --url URL
--token-file FILE``. Needs Python 3.11 and this source tree only (the standard library; no
Django, no database): it reaches the console over HTTPS with a token scoped to one cluster, and
Slurm through local commands or SSH. ``manage.py run_controller`` / ``run_watchdog`` run the same.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from signal import SIGINT, SIGTERM
from typing import Any

from .advisor_http import HttpAdvisor
from .factory import slurm_from
from .reconciler import Controller
from .watchdog import DEFAULT_STANDBY_AFTER_S, Watchdog

log = logging.getLogger("remediation.controller")


class UsageError(Exception):
    """A bad option or an unreadable token file: said in one line, exit status 2."""


def add_connection_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--url", required=True, help="the console's base URL (https://...)")
    parser.add_argument(
        "--token-file", required=True, help="a file holding this process's controller token"
    )
    parser.add_argument(
        "--cluster", help="the cluster's name (default: the one the token belongs to)"
    )
    parser.add_argument("--ssh", help="run Slurm commands over SSH on user@host")
    parser.add_argument("--ssh-port", type=int, default=22)
    parser.add_argument("--identity", help="the SSH private key (default ~/.ssh/id_ed25519)")
    parser.add_argument("--known-hosts", help="known_hosts to check the host key against")
    parser.add_argument("--slurm-conf", help="SLURM_CONF for the Slurm commands")
    parser.add_argument("--interval", type=float, default=5.0, help="seconds between cycles")
    parser.add_argument("--once", action="store_true", help="one cycle, then exit")


def add_controller_arguments(parser: argparse.ArgumentParser) -> None:
    add_connection_arguments(parser)
    parser.add_argument(
        "--partition", action="append", default=[], help="act only in these partitions"
    )


def add_watchdog_arguments(parser: argparse.ArgumentParser) -> None:
    add_connection_arguments(parser)
    parser.add_argument(
        "--hold-timeout", type=float, help="seconds (default: the console's policy)"
    )
    parser.add_argument(
        "--state-file",
        help="where to remember holds across restarts (default watchdog-CLUSTER.json)",
    )
    parser.add_argument(
        "--standby-after",
        type=float,
        default=DEFAULT_STANDBY_AFTER_S,
        help="report Slurm's state once the console has had no other snapshot this long",
    )


def run_controller(options: dict[str, Any]) -> None:
    advisor = _advisor(options, "controller")
    slurm = slurm_from(options)
    controller = Controller(
        advisor,
        slurm,
        lambda: datetime.now(UTC),
        options.get("partition") or [],
        transport_name=_transport_name(options),
    )
    log.info("controller for %s on %s", options["url"], slurm.transport.target)
    # The cycle in hand stops after the advice in hand (``stopping``).
    with _stop_on_signals(lambda: setattr(controller, "stopping", True)) as stop:
        _loop(lambda: _controller_cycle(controller), options, stop)


def _controller_cycle(controller: Controller) -> None:
    report = controller.cycle()
    log.info(
        "%s advice, carried out %s, abandoned %s%s",
        report.advice_seen,
        report.carried_out,
        report.abandoned,
        f", error: {report.error}" if report.error else "",
    )


def run_watchdog(options: dict[str, Any]) -> None:
    advisor = _advisor(options, "watchdog")
    slurm = slurm_from(options)
    cluster = options.get("cluster")
    state = Path(options.get("state_file") or f"watchdog-{cluster or 'cluster'}.json")
    watchdog = Watchdog(
        slurm,
        lambda: datetime.now(UTC),
        options.get("hold_timeout"),
        advisor,
        state,
        standby_after_s=options.get("standby_after") or DEFAULT_STANDBY_AFTER_S,
        transport_name=_transport_name(options),
    )
    log.info("watchdog for %s on %s, state in %s", options["url"], slurm.transport.target, state)
    with _stop_on_signals() as stop:
        _loop(lambda: _watchdog_cycle(watchdog), options, stop)


def _watchdog_cycle(watchdog: Watchdog) -> None:
    released = watchdog.cycle()
    if released:
        log.warning("released %s", ", ".join(released))


def _loop(cycle: Callable[[], None], options: dict[str, Any], stop: threading.Event) -> None:
    while True:
        cycle()
        if options.get("once") or stop.is_set() or stop.wait(options["interval"]):
            return


def _advisor(options: dict[str, Any], role: str) -> HttpAdvisor:
    token = _read_token(options["token_file"])
    extra = {"role": role, "interval_s": options["interval"]}
    return HttpAdvisor(options["url"], options.get("cluster"), token, heartbeat_extra=extra)


def _read_token(path: str) -> str:
    try:
        token = Path(path).read_text().strip()
    except OSError as exc:
        raise UsageError(f"cannot read the token file {path}: {exc.strerror or exc}") from exc
    if not token:
        raise UsageError(f"the token file {path} is empty")
    return token


def _transport_name(options: dict[str, Any]) -> str:
    return "ssh" if options.get("ssh") else "local"


@contextmanager
def _stop_on_signals(also: Callable[[], None] = lambda: None) -> Iterator[threading.Event]:
    """Set on SIGTERM or SIGINT: the step in hand finishes, the next cycle does not start (a
    Slurm step cut in half would be worse than exiting a little later). The previous handlers
    come back afterwards (a management command runs inside another program)."""
    stop = threading.Event()

    def handler(*_: object) -> None:
        stop.set()
        also()

    previous = {signum: signal.signal(signum, handler) for signum in (SIGTERM, SIGINT)}
    try:
        yield stop
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m remediation.controller",
        description="The Slurm Advisor Controller and the watchdog, for a Slurm head node.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    add_controller_arguments(commands.add_parser("controller", help="carry out enforced advice"))
    add_watchdog_arguments(commands.add_parser("watchdog", help="release holds past the timeout"))
    options = vars(parser.parse_args(argv))
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr
    )
    try:
        (run_controller if options["command"] == "controller" else run_watchdog)(options)
    except UsageError as exc:
        parser.exit(2, f"{parser.prog}: {exc}\n")
    return 0
