"""``manage.py export_audit_anchor --file FILE``: append the audit trail's head (sequence and
hash) to a file kept outside the database, for ``verify_audit --anchor FILE``."""

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from fleet.audit import AnchorError, export_anchor


class Command(BaseCommand):
    help = "Append the audit trail's current head to an anchor file (and to the log)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--file",
            default=settings.AUDIT_ANCHOR_FILE or None,
            help="the anchor file to append to (default: AUDIT_ANCHOR_FILE)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if not options["file"]:
            raise CommandError("name the anchor file with --file (or set AUDIT_ANCHOR_FILE)")
        try:
            anchor = export_anchor(options["file"])
        except AnchorError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(f"anchor #{anchor.sequence} {anchor.hash} written to {options['file']}")
