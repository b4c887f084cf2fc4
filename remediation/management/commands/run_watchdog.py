"""``manage.py run_watchdog --cluster NAME [--hold-timeout S]``: fail open. Releases jobs
requeue-held for a recovery decision longer than the hold timeout; each release is audited."""

import signal
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from django.db import close_old_connections

from remediation.controller.watchdog import Watchdog
from remediation.core.policy import parse_policy

from ._connection import add_connection_arguments, connect


class Command(BaseCommand):
    help = "Release jobs held for a recovery decision longer than the hold timeout."

    def add_arguments(self, parser: CommandParser) -> None:
        add_connection_arguments(parser)
        parser.add_argument("--hold-timeout", type=float, help="seconds (default: the policy's)")
        parser.add_argument("--state-file", help="where to remember holds across restarts")

    def handle(self, *args: Any, **options: Any) -> None:
        cluster, advisor, slurm = connect(options, "watchdog")
        # The policy's hold timeout by default, so the watchdog and the console agree on it.
        timeout = (
            options["hold_timeout"] or parse_policy(cluster.policy).limits.hold_timeout_seconds
        )
        state = Path(options["state_file"] or f"watchdog-{cluster.name}.json")
        watchdog = Watchdog(slurm, lambda: datetime.now(UTC), timeout, advisor, state)
        stopping = []
        signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
        self.stdout.write(f"watchdog of {cluster.name}: releasing holds older than {timeout:g} s")
        while True:
            # A loop outside any request: drop database connections that went stale while it slept.
            close_old_connections()
            released = watchdog.cycle()
            if released:
                self.stdout.write(f"released {', '.join(released)}")
            if options["once"] or stopping:
                return
            time.sleep(options["interval"])
