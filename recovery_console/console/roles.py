"""Who may do what in the console and the REST API.

Roles are Django groups (created, with matching model permissions, by a data migration):

- ``viewer`` reads everything: clusters, workloads, anomalies, advice, nodes, the audit trail.
- ``operator`` also changes cluster settings, releases nodes, requests action mode and returns a
  cluster to monitor mode.
- ``reviewer`` also labels advice (agree or disagree, and the action they would have taken).
- ``approver`` also approves or rejects requests for action mode (never their own).
- ``admin`` may do everything; so may a superuser.

Every role implies ``viewer``; ``admin`` implies every role. Operator, reviewer and approver are
independent of each other, so the person who asks for action mode and the one who approves it
can be kept apart. Views and API endpoints check roles with ``has_role`` (through the decorator,
the mixin or ``HasRole``), never group names.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.contrib.auth.decorators import login_required
from django.contrib.auth.mixins import AccessMixin
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from rest_framework.permissions import BasePermission
from rest_framework.request import Request

VIEWER, OPERATOR, REVIEWER, APPROVER, ADMIN = ROLES = (
    "viewer",
    "operator",
    "reviewer",
    "approver",
    "admin",
)

# The roles each group grants besides itself.
IMPLIED: dict[str, frozenset[str]] = {
    VIEWER: frozenset(),
    OPERATOR: frozenset({VIEWER}),
    REVIEWER: frozenset({VIEWER}),
    APPROVER: frozenset({VIEWER}),
    ADMIN: frozenset(ROLES),
}

# Cached on the user object, which lives for one request: a group change shows on the next.
_CACHE = "_recovery_console_roles"

# The model permissions each group carries, by app (for the admin and ``user.has_perm``; the
# console itself checks roles). Every role reads; admin holds every permission of these apps.
# (The fleet's app label is ``recovery_console``; see ``fleet.apps``.)
APPS = ("recovery_console", "detection", "remediation", "console")
READ_PERMISSIONS: dict[str, tuple[str, ...]] = {
    "recovery_console": (
        "view_cluster",
        "view_workload",
        "view_attempt",
        "view_node",
        "view_auditentry",
    ),
    "detection": ("view_anomaly", "view_sourcecursor", "view_detectionsettings"),
    "remediation": ("view_advice", "view_nodehealth", "view_milestone"),
    "console": ("view_review", "view_modechangerequest", "view_notificationchannel"),
}
ROLE_PERMISSIONS: dict[str, dict[str, tuple[str, ...]]] = {
    VIEWER: {},
    OPERATOR: {
        "recovery_console": ("change_cluster",),
        "detection": ("change_detectionsettings",),
        "remediation": ("change_nodehealth",),
        "console": ("add_modechangerequest", "return_to_monitor"),
    },
    REVIEWER: {"console": ("add_review", "change_review")},
    APPROVER: {"console": ("approve_modechangerequest",)},
}


class UnknownRole(ValueError):
    """A role name that is not one of ``ROLES`` (a typo would otherwise deny silently)."""


def sync_role_groups() -> None:
    """Create the role groups and give them their permissions; idempotent. A migration does
    it first; ``post_migrate`` does it again, so a flushed or damaged database is repaired."""
    from django.apps import apps
    from django.contrib.auth.management import create_permissions
    from django.contrib.auth.models import Group, Permission

    # Django creates permissions only after migrating: make them now, so the groups get them.
    for label in APPS:
        create_permissions(apps.get_app_config(label), verbosity=0)

    def permissions(grants: dict[str, tuple[str, ...]]) -> list[Permission]:
        found: list[Permission] = []
        for label, codenames in grants.items():
            found += Permission.objects.filter(
                content_type__app_label=label, codename__in=codenames
            )
        return found

    for role, extra in ROLE_PERMISSIONS.items():
        group, _ = Group.objects.get_or_create(name=role)
        group.permissions.add(*permissions(READ_PERMISSIONS), *permissions(extra))
    admin, _ = Group.objects.get_or_create(name=ADMIN)
    admin.permissions.add(*Permission.objects.filter(content_type__app_label__in=APPS))


def roles_of(user: Any) -> frozenset[str]:
    """Every role a user holds, implied ones included (cached on the user object)."""
    # A deactivated account keeps its groups but loses every role at once.
    if user is None or not getattr(user, "is_authenticated", False) or not user.is_active:
        return frozenset()
    cached: frozenset[str] | None = getattr(user, _CACHE, None)
    if cached is not None:
        return cached
    if user.is_superuser:
        held = frozenset(ROLES)
    else:
        # Only role groups count: other groups a site adds grant nothing here.
        groups = set(user.groups.filter(name__in=ROLES).values_list("name", flat=True))
        held = frozenset(groups).union(*(IMPLIED[g] for g in groups))
    setattr(user, _CACHE, held)
    return held


def has_role(user: Any, role: str) -> bool:
    """Whether ``user`` holds ``role`` directly, through the ladder, or as admin/superuser."""
    if role not in ROLES:
        raise UnknownRole(f"{role!r} is not a role: use one of {', '.join(ROLES)}")
    return role in roles_of(user)


def forget_roles(user: Any) -> None:
    """Drop the cached roles after the user's groups changed."""
    if hasattr(user, _CACHE):
        delattr(user, _CACHE)


def role_required(
    role: str,
) -> Callable[[Callable[..., HttpResponse]], Callable[..., HttpResponse]]:
    """A function view's guard: anonymous users go to the login page, others without the role
    get 403."""
    if role not in ROLES:
        raise UnknownRole(role)

    # The role name was checked above, when the view is decorated: a typo fails at import.
    def decorator(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
        @wraps(view)
        def guarded(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if not has_role(request.user, role):
                raise PermissionDenied(f"this needs the {role} role")
            return view(request, *args, **kwargs)

        # login_required outside: an anonymous user is sent to log in rather than refused.
        return login_required(guarded)

    return decorator


class RoleRequiredMixin(AccessMixin):
    """A class-based view's guard; set ``required_role``. Anonymous users are sent to log in
    (``handle_no_permission``), others without the role get 403."""

    required_role: str = VIEWER

    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
        if not request.user.is_authenticated:
            return self.handle_no_permission()
        if not has_role(request.user, self.required_role):
            raise PermissionDenied(f"this needs the {self.required_role} role")
        return super().dispatch(request, *args, **kwargs)  # type: ignore[misc]


class _HasRole(BasePermission):
    role: str = VIEWER
    message = "this needs the viewer role"

    def has_permission(self, request: Request, view: Any) -> bool:
        return has_role(request.user, self.role)


def HasRole(role: str) -> type[BasePermission]:  # noqa: N802  # reads as a class in declarations
    """A DRF permission class for one role: ``permission_classes = [HasRole("operator")]``."""
    if role not in ROLES:
        raise UnknownRole(role)
    attributes = {"role": role, "message": f"this needs the {role} role"}
    return type(f"Is{role.capitalize()}", (_HasRole,), attributes)


IsViewer = HasRole(VIEWER)
IsOperator = HasRole(OPERATOR)
IsReviewer = HasRole(REVIEWER)
IsApprover = HasRole(APPROVER)
IsAdmin = HasRole(ADMIN)
