"""``manage.py issue_controller_token --cluster NAME --name NAME``: a token scoped to one
cluster for a controller or watchdog. It is printed once; only its hash is kept."""

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from fleet.models import Cluster
from remediation.services import issue_controller_token


class Command(BaseCommand):
    help = "Issue a controller token for one cluster (printed once)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--cluster", required=True)
        parser.add_argument("--name", required=True)

    def handle(self, *args: Any, **options: Any) -> None:
        cluster = Cluster.objects.filter(name=options["cluster"]).first()
        if cluster is None:
            raise CommandError(f"no cluster named {options['cluster']!r}")
        issued = issue_controller_token("system:cli", cluster, options["name"])
        self.stdout.write(issued.secret)
