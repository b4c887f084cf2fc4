"""``manage.py run_simulator [--cluster NAME] [--speed X]``: run simulated clusters alone."""

import signal
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from lab.demo.loop import SimulationLoop, simulated_clusters


class Command(BaseCommand):
    help = "Run simulated clusters: write their output and metrics, record snapshots, detect."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--cluster", action="append", help="a simulated cluster (repeatable)")
        parser.add_argument("--interval", type=float, default=2.0, help="wall seconds per step")
        parser.add_argument("--speed", type=float, default=1.0, help="simulated seconds per second")

    def handle(self, *args: Any, **options: Any) -> None:
        clusters = simulated_clusters(options["cluster"])
        if not clusters:
            raise CommandError("no simulated cluster found (manage.py seed_demo creates one)")
        loop = SimulationLoop(clusters, options["interval"], options["speed"])
        signal.signal(signal.SIGTERM, lambda *_: loop.stop())
        self.stdout.write(f"simulating {', '.join(c.name for c in clusters)}; Ctrl-C stops")
        try:
            loop.run()
        except KeyboardInterrupt:
            loop.stop()
