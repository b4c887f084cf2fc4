"""``manage.py run_controller --url URL --token-file FILE [--ssh user@host]``: the Slurm
Advisor Controller, exactly as ``python -m remediation.controller controller`` runs it on a head
node: over HTTP with its token, never through this process's database.

Reports what Slurm sees, then carries out the advice the console enforces (action mode, allowed
partitions): requeue-hold, exclude, release; scancel; drain. SIGTERM finishes the step in hand.
"""

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from remediation.controller import cli


class Command(BaseCommand):
    help = "Run the Slurm Advisor Controller for one cluster (over the Advisor API)."

    def add_arguments(self, parser: CommandParser) -> None:
        cli.add_controller_arguments(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            cli.run_controller(options)
        except cli.UsageError as exc:
            raise CommandError(str(exc)) from exc
