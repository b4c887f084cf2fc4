"""Admin pages. The audit trail is read-only here as everywhere; other writes go through the
console's forms and services, so the admin shows rows and lets nobody edit history."""

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from .models import Attempt, AuditEntry, Cluster, Node, Workload


# Even for superusers: a write here would bypass the services and leave no audit entry.
class ReadOnlyAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Cluster)
class ClusterAdmin(ReadOnlyAdmin):
    # Clusters change in the console, where changes are audited and mode changes approved.
    list_display = ("name", "mode", "created_at")


@admin.register(Workload)
class WorkloadAdmin(ReadOnlyAdmin):
    list_display = ("key", "cluster", "state", "updated_at")
    list_filter = ("cluster", "state")
    search_fields = ("key",)


@admin.register(Attempt)
class AttemptAdmin(ReadOnlyAdmin):
    list_display = ("job_id", "attempt_index", "workload", "state", "started_at", "ended_at")
    list_filter = ("cluster", "state")
    search_fields = ("job_id", "name")


@admin.register(Node)
class NodeAdmin(ReadOnlyAdmin):
    list_display = ("name", "cluster", "state", "reason", "gpus")
    list_filter = ("cluster", "state")


@admin.register(AuditEntry)
class AuditEntryAdmin(ReadOnlyAdmin):
    list_display = ("sequence", "at", "actor", "verb", "object_type", "object_id")
    list_filter = ("verb",)
    search_fields = ("actor", "object_id")
