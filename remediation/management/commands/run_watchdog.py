"""``manage.py run_watchdog --url URL --token-file FILE [--hold-timeout S]``: fail open, exactly
as ``python -m remediation.controller watchdog`` runs it on a head node (over HTTP with its
token, never through this process's database). Releases jobs requeue-held for a recovery
decision longer than the hold timeout, after applying the exclusions their advice carried."""

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from remediation.controller import cli


class Command(BaseCommand):
    help = "Release jobs held for a recovery decision longer than the hold timeout."

    def add_arguments(self, parser: CommandParser) -> None:
        cli.add_watchdog_arguments(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            cli.run_watchdog(options)
        except cli.UsageError as exc:
            raise CommandError(str(exc)) from exc
