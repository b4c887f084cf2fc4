"""``manage.py grant_role USER ROLE [--cluster NAME] [--revoke] [--create]``."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from recovery_console.console.memberships import RoleNotScoped, grant_role, revoke_role
from recovery_console.console.roles import ROLES, UnknownRole
from recovery_console.fleet.models import Cluster


class Command(BaseCommand):
    help = (
        "Give a person a role: on every cluster (the role group), or with --cluster on that "
        "cluster only (viewer, operator, reviewer, approver; admin is site-wide). Idempotent."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("role", choices=ROLES)
        parser.add_argument("--cluster", help="hold the role on this cluster only")
        parser.add_argument("--revoke", action="store_true", help="take the role away instead")
        parser.add_argument(
            "--create",
            action="store_true",
            help="create the user if missing (no password: set one with changepassword)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        user = self._user(options["username"], create=options["create"])
        cluster = self._cluster(options["cluster"])
        scope = f"on {cluster.name}" if cluster else "on every cluster"
        change = revoke_role if options["revoke"] else grant_role
        try:
            changed = change("command:grant_role", user, options["role"], cluster)
        except (UnknownRole, RoleNotScoped) as exc:
            raise CommandError(str(exc)) from exc
        verb = "no longer holds" if options["revoke"] else "holds"
        note = "" if changed else " (unchanged)"
        self.stdout.write(f"{user.username} {verb} {options['role']} {scope}{note}")

    def _user(self, username: str, *, create: bool) -> Any:
        model = get_user_model()
        user = model.objects.filter(username=username).first()
        if user is not None:
            return user
        if not create:
            raise CommandError(f"no user {username!r}: add --create, or create it first")
        user = model(username=username)
        # No password until its owner sets one: ``manage.py changepassword USER``.
        user.set_unusable_password()
        user.save()
        self.stdout.write(f"created {username}: set a password with changepassword {username}")
        return user

    def _cluster(self, name: str | None) -> Cluster | None:
        if name is None:
            return None
        cluster = Cluster.objects.filter(name=name).first()
        if cluster is None:
            known = ", ".join(Cluster.objects.order_by("name").values_list("name", flat=True))
            raise CommandError(f"no cluster {name!r} (known: {known or 'none'})")
        return cluster
