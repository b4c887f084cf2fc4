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

A role group holds its role on every cluster (site-wide). A ``ClusterMembership`` gives a
viewer, operator, reviewer or approver role on one cluster only; admin is site-wide only. A
check about one cluster's rows passes ``cluster``; without it, ``has_role`` asks for the
site-wide role, so a check that forgets its cluster refuses rather than lets through.
``has_role_anywhere`` (a page's first guard) and ``visible`` (querysets) serve lists that span
clusters. ``manage.py grant_role`` gives either kind.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar

from django.contrib.auth.decorators import login_required
from django.contrib.auth.mixins import AccessMixin
from django.core.exceptions import PermissionDenied
from django.db.models import Model, QuerySet
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
_MEMBERSHIPS = "_recovery_console_memberships"

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


def _site_roles(user: Any) -> frozenset[str]:
    """The roles a user holds on every cluster: superuser, or role groups (cached)."""
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


def _cluster_roles(user: Any) -> dict[int, frozenset[str]]:
    """The roles a user holds through memberships, by cluster id (cached)."""
    cached: dict[int, frozenset[str]] | None = getattr(user, _MEMBERSHIPS, None)
    if cached is not None:
        return cached
    from recovery_console.console.models import ClusterMembership

    granted: dict[int, set[str]] = {}
    for cluster_id, role in ClusterMembership.objects.filter(user_id=user.pk).values_list(
        "cluster_id", "role"
    ):
        granted.setdefault(cluster_id, set()).update({role, *IMPLIED[role]})
    held = {pk: frozenset(roles) for pk, roles in granted.items()}
    setattr(user, _MEMBERSHIPS, held)
    return held


def _active(user: Any) -> bool:
    # A deactivated account keeps its groups but loses every role at once.
    return user is not None and getattr(user, "is_authenticated", False) and user.is_active


def cluster_id_of(thing: Any) -> int | None:
    """The id of the cluster a cluster, a cluster id or a row of one cluster belongs to."""
    if thing is None or isinstance(thing, int):
        return thing
    from fleet.models import Cluster

    if isinstance(thing, Cluster):
        return int(thing.pk)
    if getattr(thing, "cluster_id", None) is not None:
        return int(thing.cluster_id)
    # A review belongs to its advice's cluster.
    advice = getattr(thing, "advice", None)
    return cluster_id_of(advice) if advice is not None else None


def roles_of(user: Any, cluster: Any = None) -> frozenset[str]:
    """Every role a user holds, implied ones included: site-wide, or on ``cluster`` (a cluster,
    its id, or a row of it) where memberships add theirs."""
    if not _active(user):
        return frozenset()
    site = _site_roles(user)
    cluster_id = cluster_id_of(cluster)
    if cluster_id is None:
        return site
    return site | _cluster_roles(user).get(cluster_id, frozenset())


def roles_anywhere(user: Any) -> frozenset[str]:
    """Every role a user holds on at least one cluster (what a page spanning clusters offers)."""
    if not _active(user):
        return frozenset()
    return _site_roles(user).union(*_cluster_roles(user).values())


def _check(role: str) -> None:
    if role not in ROLES:
        raise UnknownRole(f"{role!r} is not a role: use one of {', '.join(ROLES)}")


def has_role(user: Any, role: str, cluster: Any = None) -> bool:
    """Whether ``user`` holds ``role`` directly, through the ladder, or as admin/superuser:
    on ``cluster`` when given, else site-wide."""
    _check(role)
    return role in roles_of(user, cluster)


def has_role_anywhere(user: Any, role: str) -> bool:
    """Whether ``user`` holds ``role`` site-wide or on at least one cluster."""
    _check(role)
    return role in roles_anywhere(user)


def cluster_ids_with(user: Any, role: str = VIEWER) -> frozenset[int] | None:
    """The ids of the clusters where ``user`` holds ``role``; None means every cluster."""
    _check(role)
    if has_role(user, role):
        return None
    if not _active(user):
        return frozenset()
    return frozenset(pk for pk, held in _cluster_roles(user).items() if role in held)


M = TypeVar("M", bound=Model)


def visible(
    queryset: QuerySet[M], user: Any, role: str = VIEWER, field: str = "cluster"
) -> QuerySet[M]:
    """``queryset`` narrowed to the rows of clusters where ``user`` holds ``role``. ``field``
    names the path to the cluster (``"pk"`` for clusters themselves); rows of no cluster (a
    site-wide audit entry) stay visible to site-wide holders only."""
    ids = cluster_ids_with(user, role)
    if ids is None:
        return queryset
    lookup = f"{field}__in" if field == "pk" else f"{field}_id__in"
    return queryset.filter(**{lookup: ids})


def forget_roles(user: Any) -> None:
    """Drop the cached roles after the user's groups or memberships changed."""
    for cache in (_CACHE, _MEMBERSHIPS):
        if hasattr(user, cache):
            delattr(user, cache)


def _cluster_in_url(kwargs: dict[str, Any]) -> int | None:
    """The id of the cluster a console URL names (``clusters/<name>/``), if any and known."""
    name = kwargs.get("name")
    if name is None:
        return None
    from fleet.models import Cluster

    return Cluster.objects.filter(name=name).values_list("pk", flat=True).first()


def _allowed(user: Any, role: str, kwargs: dict[str, Any]) -> bool:
    # A page under one cluster's URL needs the role there; any other page needs it somewhere,
    # and the view checks each row's cluster (or narrows its lists with ``visible``).
    cluster_id = _cluster_in_url(kwargs)
    if cluster_id is not None:
        return has_role(user, role, cluster_id)
    return has_role_anywhere(user, role)


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
            if not _allowed(request.user, role, kwargs):
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
        if not _allowed(request.user, self.required_role, kwargs):
            raise PermissionDenied(f"this needs the {self.required_role} role")
        return super().dispatch(request, *args, **kwargs)  # type: ignore[misc]


class _HasRole(BasePermission):
    role: str = VIEWER
    message = "this needs the viewer role"

    def has_permission(self, request: Request, view: Any) -> bool:
        # Somewhere is enough to list: querysets are narrowed to the clusters a person sees.
        return has_role_anywhere(request.user, self.role)

    def has_object_permission(self, request: Request, view: Any, obj: Any) -> bool:
        # One row: the role must be held on its own cluster (site-wide for rows of none).
        return has_role(request.user, self.role, cluster_id_of(obj))


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
