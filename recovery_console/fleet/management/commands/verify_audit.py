"""``manage.py verify_audit``: check the audit trail's hash chain and name the first broken row."""

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from recovery_console.fleet.audit import verify_chain


class Command(BaseCommand):
    help = "Verify the audit trail's hash chain; exits non-zero at the first broken entry."

    def handle(self, *args: Any, **options: Any) -> None:
        report = verify_chain()
        if not report.intact:
            # A non-zero exit, so a scheduled check notices the broken chain.
            raise CommandError(
                f"audit chain broken at entry #{report.broken_sequence} "
                f"(row id {report.broken_entry_id}): {report.problem}; "
                f"{report.checked} entries before it are intact"
            )
        self.stdout.write(f"audit chain intact: {report.checked} entries verified")
