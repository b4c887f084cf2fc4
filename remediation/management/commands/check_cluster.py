"""``manage.py check_cluster NAME [--job ID ...] [--minutes N] [--json]``: does this cluster
work? Reads each telemetry source once, the scheduler once and the controller's and watchdog's
last heartbeats, then reports stage by stage, as an operator troubleshoots: is the job visible,
is its signal arriving, is advice produced, was it acted on. Writes nothing."""

import json
from dataclasses import asdict
from datetime import UTC, datetime, timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from fleet.models import Cluster
from remediation.checkup import check_cluster
from remediation.core.checkup import Finding, worst

MARKS = {"ok": "ok", "warning": "warning", "problem": "PROBLEM", "info": "info"}


class Command(BaseCommand):
    help = "Check a cluster stage by stage: scheduler, heartbeats, sources, each job."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name")
        parser.add_argument("--job", action="append", default=[], help="check this job (repeat)")
        parser.add_argument("--minutes", type=float, default=5.0, help="what counts as recent")
        parser.add_argument("--json", action="store_true", help="one JSON document")

    def handle(self, *args: Any, **options: Any) -> None:
        cluster = Cluster.objects.filter(name=options["name"]).first()
        if cluster is None:
            raise CommandError(f"no cluster named {options['name']!r}")
        if options["minutes"] <= 0:
            raise CommandError("--minutes must be positive")
        findings = check_cluster(
            cluster,
            datetime.now(UTC),
            jobs=options["job"],
            window=timedelta(minutes=options["minutes"]),
        )
        if options["json"]:
            document = {
                "cluster": cluster.name,
                "mode": cluster.mode,
                "status": worst(findings),
                "findings": [asdict(f) for f in findings],
            }
            self.stdout.write(json.dumps(document, indent=2))
            return
        self.stdout.write(f"{cluster.name} ({cluster.mode} mode, {cluster.backend})")
        for finding in findings:
            self.stdout.write(_line(finding))
        self.stdout.write(f"overall: {worst(findings)}")


def _line(finding: Finding) -> str:
    # A scheduler's or server's error can span lines: keep them all under their finding.
    head, *more = f"[{MARKS[finding.status]:>7}] {finding.stage}: {finding.summary}".splitlines()
    rest = [*more, *(line for detail in finding.details for line in detail.splitlines())]
    return "\n".join([head, *(" " * 10 + line for line in rest)])
