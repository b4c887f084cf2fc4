"""``manage.py add_cluster NAME [flags] [--file F]``: register a cluster (monitor mode).

Idempotent: adding it again with the same settings changes nothing; with other settings it is
refused (``configure_cluster`` changes a registration). See README, "Add your cluster".
"""

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from ._cluster_options import add_registration_arguments, run


class Command(BaseCommand):
    help = "Register a cluster (it starts in monitor mode); the same again changes nothing."

    def add_arguments(self, parser: CommandParser) -> None:
        add_registration_arguments(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        run(self, options, may_change=False)
