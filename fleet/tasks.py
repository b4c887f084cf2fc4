"""Periodic work of the fleet base."""

from celery import shared_task
from django.conf import settings

from fleet import audit


@shared_task(name="recovery_console.export_audit_anchor")
def export_audit_anchor() -> str:
    """Every five minutes (beat): the trail's head to ``AUDIT_ANCHOR_FILE`` and the log."""
    anchor = audit.export_anchor(settings.AUDIT_ANCHOR_FILE or None)
    return f"audit anchor #{anchor.sequence}"
