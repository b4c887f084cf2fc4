"""``manage.py run_demo``: the embedded console and its simulated clusters in one process."""

import threading
from typing import Any

from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandParser

from lab.demo.loop import SimulationLoop, simulated_clusters


class Command(BaseCommand):
    help = "Serve the console and run every simulated cluster in the background."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--addr", default="127.0.0.1")
        parser.add_argument("--port", default="8000")
        parser.add_argument("--speed", type=float, default=1.0)

    def handle(self, *args: Any, **options: Any) -> None:
        loop = SimulationLoop(simulated_clusters(), speed=options["speed"])
        thread = threading.Thread(target=loop.run, name="simulation", daemon=True)
        thread.start()
        try:
            # One process, no reloader: the simulation thread and the server share the
            # in-memory channel layer, so live updates reach open pages.
            call_command("runserver", f"{options['addr']}:{options['port']}", use_reloader=False)
        finally:
            loop.stop()
            thread.join(timeout=10)
