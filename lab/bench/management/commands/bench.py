"""``manage.py bench``: run the whole loop on the simulated cluster and measure it (JSON)."""

import json
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from lab.bench import report, runs
from lab.bench.progress_bar import ProgressBar


@contextmanager
def exit_on_sigterm() -> Iterator[None]:
    """Leave through the finally blocks on SIGTERM, so the throwaway database is dropped."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


class Command(BaseCommand):
    help = (
        "Measure detection and action latency, accuracy against the simulator's ground truth, "
        "signature throughput, the cost of a cycle at scale and the console's pages, in a "
        "throwaway database. Prints one JSON document; a progress bar goes to stderr."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--workloads",
            type=int,
            help="running workloads in the cycle measurement (default 2000; 200 with --quick)",
        )
        parser.add_argument(
            "--nodes",
            type=int,
            help="nodes of the cluster the loop runs on, one workload per 4 nodes (default 64)",
        )
        parser.add_argument("--hours", type=float, help="simulated hours of the loop (default 8)")
        parser.add_argument("--seed", type=int, help="the simulation's seed (default 1)")
        parser.add_argument(
            "--fault-rate", type=float, help="faults per node-hour in the loop (default 0.1)"
        )
        parser.add_argument("--quick", action="store_true", help="a small run (under 2 minutes)")
        parser.add_argument("--html", metavar="PATH", help="also write a report with charts")
        parser.add_argument(
            "--ingest-lines",
            type=int,
            metavar="N",
            help="also measure ingest of at least N log lines through the whole loop, by one "
            "worker process and by two side by side (off unless given; 1000000 for the scale "
            "figure; the two-worker figure needs MySQL or MariaDB)",
        )
        parser.add_argument(
            "--ingest-workloads",
            type=int,
            metavar="N",
            help="running workloads the ingest measurement's lines come from (default 1000)",
        )
        parser.add_argument(
            "--no-detection", action="store_true", help="run the loop without detection scans"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        bench = runs.BenchOptions.make(
            quick=options["quick"],
            seed=options["seed"],
            nodes=options["nodes"],
            hours=options["hours"],
            fault_rate=options["fault_rate"],
            workloads=options["workloads"],
            detection=False if options["no_detection"] else None,
            ingest_lines=options["ingest_lines"],
            ingest_workloads=options["ingest_workloads"],
        )
        progress = ProgressBar(
            lambda text: self.stderr.write(text, ending=""), self.stderr.isatty()
        )
        with exit_on_sigterm():
            result, details = runs.run(bench, progress)
        self.stdout.write(json.dumps(result, indent=2))
        if options["html"]:
            report.write(Path(options["html"]), result, details)
            self.stderr.write(f"report written to {options['html']}")
