from typing import Any

from django.apps import AppConfig
from django.db.models.signals import post_migrate, post_save


class ConsoleConfig(AppConfig):
    """Floor 4: what people and REST clients see and do."""

    name = "recovery_console.console"
    label = "console"
    verbose_name = "Recovery Console"

    def ready(self) -> None:
        # The Celery app must exist before a task is sent from a web or command process.
        from fleet.models import AuditEntry
        from recovery_console.celery import app  # noqa: F401

        post_save.connect(_notify, sender=AuditEntry, dispatch_uid="console.notifications")
        post_migrate.connect(_sync_roles, sender=self, dispatch_uid="console.roles")
        _hide_plain_tokens_from_the_admin()


def _hide_plain_tokens_from_the_admin() -> None:
    # DRF's plain-key tokens are not used (``api.tokens`` keeps digests): none to make there.
    from django.contrib import admin
    from rest_framework.authtoken.models import TokenProxy

    if admin.site.is_registered(TokenProxy):
        admin.site.unregister(TokenProxy)


def _notify(sender: type, instance: Any, **kwargs: Any) -> None:
    # Notifications hang off the audit trail, so the loop's services need not know of them.
    from .tasks import enqueue_notifications

    enqueue_notifications(instance, bool(kwargs.get("created")))


def _sync_roles(sender: AppConfig, **kwargs: Any) -> None:
    # After every migrate (and flush of a test database) the role groups exist again.
    from .roles import sync_role_groups

    sync_role_groups()
