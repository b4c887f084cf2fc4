"""``manage.py grant_role USER ROLE [ROLE ...] [--cluster NAME] [--revoke]
[--create [--password-file F]]``: give (or take back) console roles on every cluster, or with
``--cluster`` on that one only. Works with DEBUG off, where no demo people exist; ``--create``
makes the account first. Audited through ``console.memberships``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from fleet.models import Cluster
from recovery_console.console.memberships import (
    RoleNotScoped,
    create_user,
    grant_role,
    revoke_role,
)
from recovery_console.console.roles import ROLES, UnknownRole

ACTOR = "command:grant_role"


class Command(BaseCommand):
    help = (
        "Give a person roles: on every cluster (the role groups), or with --cluster on that "
        "cluster only (viewer, operator, reviewer, approver; admin is site-wide). Idempotent."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("roles", nargs="+", choices=ROLES, metavar="ROLE")
        parser.add_argument("--cluster", help="hold the roles on this cluster only")
        parser.add_argument("--revoke", action="store_true", help="take the roles away instead")
        parser.add_argument("--create", action="store_true", help="create the user if missing")
        parser.add_argument(
            "--password-file",
            help="with --create: a file holding the password (without: none until changepassword)",
        )
        parser.add_argument("--email", default="")

    def handle(self, *args: Any, **options: Any) -> None:
        cluster = self._cluster(options["cluster"])
        scope = f"on {cluster.name}" if cluster else "on every cluster"
        change = revoke_role if options["revoke"] else grant_role
        verb = "no longer holds" if options["revoke"] else "holds"
        lines: list[str] = []
        try:
            # All or nothing: ``reviewer admin --cluster`` makes no account and grants nothing.
            with transaction.atomic():
                user = self._user(options, lines)
                for role in dict.fromkeys(options["roles"]):
                    changed = change(ACTOR, user, role, cluster)
                    note = "" if changed else " (unchanged)"
                    lines.append(f"{user.username} {verb} {role} {scope}{note}")
        except (UnknownRole, RoleNotScoped) as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write("\n".join(lines))

    def _user(self, options: dict[str, Any], lines: list[str]) -> Any:
        username = options["username"]
        user = get_user_model().objects.filter(username=username).first()
        if user is not None:
            return user
        if not options["create"]:
            raise CommandError(f"no user {username!r}: add --create, or create it first")
        password = self._password(options["password_file"])
        try:
            user = create_user(ACTOR, username, password, options["email"])
        except ValidationError as exc:
            raise CommandError("password refused: " + " ".join(exc.messages)) from None
        if password is None:
            lines.append(f"created {username}: set a password with changepassword {username}")
        return user

    def _password(self, path: str | None) -> str | None:
        # Never an argument: it would sit in the shell's history and the process list.
        if path is None:
            return None
        try:
            return Path(path).read_text().strip()
        except OSError as exc:
            raise CommandError(f"cannot read {path}: {exc.strerror}") from None

    def _cluster(self, name: str | None) -> Cluster | None:
        if name is None:
            return None
        cluster = Cluster.objects.filter(name=name).first()
        if cluster is None:
            known = ", ".join(Cluster.objects.order_by("name").values_list("name", flat=True))
            raise CommandError(f"no cluster {name!r} (known: {known or 'none'})")
        return cluster
