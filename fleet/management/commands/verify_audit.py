"""``manage.py verify_audit [--anchor FILE]``: check the audit trail's chain, its keyed hashes
and (with anchors exported outside the database) that no entry was removed or re-hashed."""

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from fleet.audit import AnchorError, read_anchors, verify_chain


class Command(BaseCommand):
    help = "Verify the audit trail's hash chain; exits non-zero at the first broken entry."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--anchor",
            default=settings.AUDIT_ANCHOR_FILE or None,
            help="a file of anchors from export_audit_anchor (default: AUDIT_ANCHOR_FILE)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            anchors = read_anchors(options["anchor"]) if options["anchor"] else []
        except AnchorError as exc:
            raise CommandError(str(exc)) from exc
        report = verify_chain(anchors=anchors)
        if not report.intact:
            # A non-zero exit, so a scheduled check notices the broken chain.
            raise CommandError(
                f"audit chain broken at entry #{report.broken_sequence} "
                f"(row id {report.broken_entry_id}): {report.problem}; "
                f"{report.checked} entries before it are intact"
            )
        against = f", {report.anchors_checked} anchors matched" if anchors else ""
        self.stdout.write(f"audit chain intact: {report.checked} entries verified{against}")
