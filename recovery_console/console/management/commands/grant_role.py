"""``manage.py grant_role USER ROLE [ROLE ...] [--revoke] [--create --password-file F]``: give
(or take back) console roles: viewer, operator, reviewer, approver, admin. Works with DEBUG
off, where no demo people exist; ``--create`` makes the account first. Audited."""

from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from recovery_console.console.people import change_roles, create_user
from recovery_console.console.roles import ROLES

ACTOR = "system:cli"


class Command(BaseCommand):
    help = "Give a user console roles (--revoke takes them back; --create makes the user)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("roles", nargs="+", choices=ROLES, metavar="ROLE")
        parser.add_argument("--revoke", action="store_true", help="take the roles back")
        parser.add_argument("--create", action="store_true", help="create the user first")
        parser.add_argument("--password-file", help="with --create: a file holding the password")
        parser.add_argument("--email", default="")

    def handle(self, *args: Any, **options: Any) -> None:
        user = get_user_model().objects.filter(username=options["username"]).first()
        if user is None and options["create"]:
            user = self._create(options)
        elif user is None:
            raise CommandError(f"no user {options['username']!r}: add --create")
        held = change_roles(ACTOR, user, options["roles"], grant=not options["revoke"])
        self.stdout.write(f"{user.username}: {', '.join(sorted(held)) or 'no roles'}")

    def _create(self, options: dict[str, Any]) -> Any:
        if not options["password_file"]:
            raise CommandError("--create needs --password-file (a password is never an argument)")
        try:
            password = Path(options["password_file"]).read_text().strip()
        except OSError as exc:
            raise CommandError(f"cannot read {options['password_file']}: {exc.strerror}") from None
        try:
            return create_user(ACTOR, options["username"], password, options["email"])
        except ValidationError as exc:
            raise CommandError("password refused: " + " ".join(exc.messages)) from None
