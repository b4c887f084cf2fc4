"""People as a site without ``DEBUG`` makes them: an account, and the roles it holds. Each
change is audited (``user.created``, ``user.roles_changed``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.contrib.auth import get_user_model, password_validation
from django.contrib.auth.models import Group
from django.db import transaction

from recovery_console.fleet import audit

from .roles import ROLES, UnknownRole, forget_roles, roles_of


@transaction.atomic
def create_user(actor: str, username: str, password: str, email: str = "") -> Any:
    """An account with a password the site's validators accept (``ValidationError`` says why
    not); it holds no role until one is given."""
    model = get_user_model()
    password_validation.validate_password(password, model(username=username))
    user = model.objects.create_user(username, email=email, password=password)
    audit.record(actor, "user.created", user, payload={"username": username})
    return user


@transaction.atomic
def change_roles(actor: str, user: Any, roles: Iterable[str], *, grant: bool) -> frozenset[str]:
    """Give (or take back) role groups; the roles the user holds afterwards."""
    names = sorted(set(roles))
    unknown = [name for name in names if name not in ROLES]
    if unknown:
        raise UnknownRole(f"{', '.join(unknown)} is not a role: use {', '.join(ROLES)}")
    groups = Group.objects.filter(name__in=names)
    if grant:
        user.groups.add(*groups)
    else:
        user.groups.remove(*groups)
    forget_roles(user)
    held = roles_of(user)
    verb = "granted" if grant else "revoked"
    payload = {"username": user.username, verb: names, "holds": sorted(held)}
    audit.record(actor, "user.roles_changed", user, payload=payload)
    return held
