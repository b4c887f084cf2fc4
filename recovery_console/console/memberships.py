"""People and their roles: an account, and roles given or taken site-wide (a role group) or on
one cluster (a membership).

Called by ``manage.py grant_role`` and the admin; each account made (``user.created``), grant
(``role.granted``) and revocation (``role.revoked``) is audited with the actor, so who gave whom
which role stays on the trail."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model, password_validation
from django.contrib.auth.models import Group
from django.db import transaction
from django.utils import timezone

from fleet import audit
from fleet.models import Cluster

from .models import ClusterMembership, ClusterRole
from .roles import ADMIN, ROLES, UnknownRole, forget_roles


class RoleNotScoped(ValueError):
    """A role that cannot be held on one cluster only (admin)."""


def _checked(role: str, cluster: Cluster | None) -> None:
    if role not in ROLES:
        raise UnknownRole(f"{role!r} is not a role: use one of {', '.join(ROLES)}")
    if cluster is not None and role not in ClusterRole.values:
        raise RoleNotScoped(f"{role} is site-wide only: grant it without a cluster")


@transaction.atomic
def create_user(actor: str, username: str, password: str | None = None, email: str = "") -> Any:
    """An account holding no role yet. With ``password``, one the site's validators accept
    (``ValidationError`` says why not); without, none usable until its owner sets one
    (``manage.py changepassword``)."""
    model = get_user_model()
    if password is not None:
        password_validation.validate_password(password, model(username=username))
    user = model.objects.create_user(username, email=email, password=password)
    audit.record(actor, "user.created", user, payload={"username": username})
    return user


@transaction.atomic
def grant_role(actor: str, user: Any, role: str, cluster: Cluster | None = None) -> bool:
    """Give ``user`` ``role`` on ``cluster`` (or site-wide); False when it was already held."""
    _checked(role, cluster)
    if cluster is None:
        group = Group.objects.get(name=role)
        added = not user.groups.filter(pk=group.pk).exists()
        if added:
            user.groups.add(group)
    else:
        _, added = ClusterMembership.objects.get_or_create(
            user=user,
            cluster=cluster,
            role=role,
            defaults={"granted_at": timezone.now(), "granted_by": actor},
        )
    if added:
        _audit(actor, "role.granted", user, role, cluster)
    forget_roles(user)
    return added


@transaction.atomic
def revoke_role(actor: str, user: Any, role: str, cluster: Cluster | None = None) -> bool:
    """Take ``role`` on ``cluster`` (or site-wide) from ``user``; False when it was not held."""
    _checked(role, cluster)
    if cluster is None:
        group = Group.objects.get(name=role)
        removed = user.groups.filter(pk=group.pk).exists()
        user.groups.remove(group)
    else:
        removed, _ = ClusterMembership.objects.filter(
            user=user, cluster=cluster, role=role
        ).delete()
    if removed:
        _audit(actor, "role.revoked", user, role, cluster)
    forget_roles(user)
    return bool(removed)


def _audit(actor: str, verb: str, user: Any, role: str, cluster: Cluster | None) -> None:
    scope = cluster.name if cluster is not None else "all clusters"
    payload = {"user": user.username, "role": role, "scope": scope}
    audit.record(actor, verb, user, cluster=cluster, payload=payload)


__all__ = ["ADMIN", "RoleNotScoped", "create_user", "grant_role", "revoke_role"]
