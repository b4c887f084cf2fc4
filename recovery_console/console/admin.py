"""Admin pages of the console's own rows. Memberships are granted and revoked here through the
service, so each change is audited as it is from ``manage.py grant_role``."""

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from .memberships import grant_role, revoke_role
from .models import ClusterMembership
from .reviews import actor_of


@admin.register(ClusterMembership)
class ClusterMembershipAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("user", "role", "cluster", "granted_at", "granted_by")
    list_filter = ("cluster", "role")
    search_fields = ("user__username",)
    fields = ("user", "cluster", "role")

    # A membership is granted or revoked, never edited: a changed role is another grant.
    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        grant_role(actor_of(request.user), obj.user, obj.role, obj.cluster)

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        revoke_role(actor_of(request.user), obj.user, obj.role, obj.cluster)

    def delete_queryset(self, request: HttpRequest, queryset: Any) -> None:
        for membership in queryset.select_related("user", "cluster"):
            self.delete_model(request, membership)
