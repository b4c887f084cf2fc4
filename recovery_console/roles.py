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

_CACHE = "_recovery_console_roles"


class UnknownRole(ValueError):
    """A role name that is not one of ``ROLES`` (a typo would otherwise deny silently)."""


def roles_of(user: Any) -> frozenset[str]:
    """Every role a user holds, implied ones included (cached on the user object)."""
    if user is None or not getattr(user, "is_authenticated", False) or not user.is_active:
        return frozenset()
    cached: frozenset[str] | None = getattr(user, _CACHE, None)
    if cached is not None:
        return cached
    if user.is_superuser:
        held = frozenset(ROLES)
    else:
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

    def decorator(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
        @wraps(view)
        def guarded(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if not has_role(request.user, role):
                raise PermissionDenied(f"this needs the {role} role")
            return view(request, *args, **kwargs)

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
