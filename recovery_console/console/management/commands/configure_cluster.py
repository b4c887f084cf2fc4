"""``manage.py configure_cluster NAME [flags] [--file F]``: register a cluster, or bring its
registration to these settings. Idempotent, for configuration management: only what differs
is changed and audited; nothing differing prints "unchanged"."""

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from ._cluster_options import add_registration_arguments, run


class Command(BaseCommand):
    help = "Create a cluster or change its registration to match (idempotent)."

    def add_arguments(self, parser: CommandParser) -> None:
        add_registration_arguments(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        run(self, options, may_change=True)
