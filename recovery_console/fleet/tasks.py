"""Periodic work of the fleet base."""

from celery import shared_task
from django.conf import settings

from recovery_console.fleet import audit


@shared_task(name="recovery_console.export_audit_anchor")
def export_audit_anchor() -> str:
    """Every few minutes (beat): the head to ``AUDIT_ANCHOR_FILE`` and to the log."""
    if settings.AUDIT_ANCHOR_FILE:
        anchor = audit.export_anchor(settings.AUDIT_ANCHOR_FILE)
    else:
        # No file configured: the log line alone is still a copy out of the database's reach.
        anchor = audit.current_anchor()
        audit.logger.info("audit anchor %s", anchor)
    return f"audit anchor #{anchor.sequence}"
