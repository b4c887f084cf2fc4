from typing import Any

from django.apps import AppConfig
from django.db.models.signals import post_migrate


class FleetConfig(AppConfig):
    """Floor 1: clusters, workloads, attempts, nodes and the audit trail.

    The label is the one these models had before the console moved out of this app, so their
    tables and migration history stay as they were."""

    name = "fleet"
    label = "recovery_console"
    verbose_name = "Fleet"

    def ready(self) -> None:
        post_migrate.connect(_create_audit_head, sender=self, dispatch_uid="fleet.audit_head")


def _create_audit_head(sender: AppConfig, **kwargs: Any) -> None:
    # After every migrate, and every flush of a test database, the chain's head row exists
    # again (concurrent first writers creating it at once can deadlock).
    from .models import AuditChainHead

    AuditChainHead.objects.get_or_create(pk=1)
