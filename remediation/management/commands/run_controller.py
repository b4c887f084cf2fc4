"""``manage.py run_controller --cluster NAME [--ssh user@host]``: the Slurm Advisor Controller.

Reports what Slurm sees, then carries out the advice the console enforces (action mode, allowed
partitions): requeue-hold, exclude, release; scancel; drain. SIGTERM finishes the step in hand.
"""

import signal
import time
from datetime import UTC, datetime
from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from django.db import close_old_connections

from remediation.controller.reconciler import Controller

from ._connection import add_connection_arguments, connect


class Command(BaseCommand):
    help = "Run the Slurm Advisor Controller for one cluster."

    def add_arguments(self, parser: CommandParser) -> None:
        add_connection_arguments(parser)
        parser.add_argument(
            "--partition", action="append", default=[], help="act only in these partitions"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        cluster, advisor, slurm = connect(options, "controller")
        controller = Controller(
            advisor,
            slurm,
            lambda: datetime.now(UTC),
            options["partition"],
            transport_name="ssh" if options["ssh"] else "local",
        )
        # Only a flag: a Slurm step cut in half would be worse than exiting a little later.
        signal.signal(signal.SIGTERM, lambda *_: setattr(controller, "stopping", True))
        self.stdout.write(f"controller of {cluster.name} on {slurm.transport.target}")
        while True:
            # A loop outside any request: drop database connections that went stale while it slept.
            close_old_connections()
            report = controller.cycle()
            self.stdout.write(
                f"{report.advice_seen} advice, carried out {report.carried_out}, "
                f"abandoned {report.abandoned}"
                + (f", error: {report.error}" if report.error else "")
            )
            if options["once"] or controller.stopping:
                return
            time.sleep(options["interval"])
