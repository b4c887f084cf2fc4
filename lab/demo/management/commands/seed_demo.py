"""``manage.py seed_demo``: the simulated ``demo`` cluster the embedded console shows, and demo
people to log in as."""

from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management.base import BaseCommand, CommandParser
from django.db import transaction

from fleet import audit, services
from fleet.models import Cluster

# A small cluster with a high fault rate, so a visitor sees interruptions within a minute;
# a simulated operator requeues failed work after a short while.
DEMO_SCHEDULER = {
    "backend": "simulated",
    "simulation": {
        "seed": 7,
        "nodes": 16,
        "workloads": 5,
        "nodes_per_job": [2, 4],
        "fault_rate": 3.0,
        "progress_interval_s": 5.0,
        "checkpoint_interval_s": 300.0,
        "manual_recovery": {"notice_s": 45.0, "act_s": 15.0},
    },
}


# Demo people, one per kind of work (see recovery_console.console.roles). They share a password that
# the command prints, so they are only created in a DEBUG (embedded) install unless asked for.
DEMO_PASSWORD = "demo-password"  # noqa: S105  # printed on purpose: a demo login
DEMO_USERS: dict[str, tuple[str, ...]] = {
    "alice": ("operator", "reviewer"),
    "bob": ("approver", "reviewer"),
    "carol": ("viewer",),
    "admin": ("admin",),
}


class Command(BaseCommand):
    help = (
        "Create the simulated demo cluster and the demo users alice (operator, reviewer), bob "
        "(approver, reviewer), carol (viewer) and admin; whatever exists is left alone."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        users = parser.add_mutually_exclusive_group()
        users.add_argument(
            "--users", action="store_true", help="create the demo users even with DEBUG off"
        )
        users.add_argument("--no-users", action="store_true", help="create no demo users")

    def handle(self, *args: Any, **options: Any) -> None:
        self._cluster()
        if options["no_users"]:
            return
        if not settings.DEBUG and not options["users"]:
            self.stdout.write("DEBUG is off: no demo users created (pass --users to create them)")
            return
        self._users()

    def _cluster(self) -> None:
        if Cluster.objects.filter(name="demo").exists():
            self.stdout.write("demo cluster already exists")
            return
        services.create_cluster(
            "system:seed_demo",
            "demo",
            scheduler=DEMO_SCHEDULER,
            telemetry={"logs": {"type": "simulated"}, "metrics": {"type": "simulated"}},
            partitions_allowlist=["canary"],
        )
        self.stdout.write("created the simulated demo cluster")

    def _users(self) -> None:
        created = [name for name, roles in DEMO_USERS.items() if _create_user(name, roles)]
        if created:
            self.stdout.write(
                f"created demo users {', '.join(created)} with the password {DEMO_PASSWORD!r}"
            )
        else:
            self.stdout.write("demo users already exist")


@transaction.atomic
def _create_user(username: str, roles: tuple[str, ...]) -> bool:
    User = get_user_model()  # noqa: N806
    if User.objects.filter(username=username).exists():
        return False
    is_admin = "admin" in roles
    user = User.objects.create_user(
        username,
        email=f"{username}@example.org",
        password=DEMO_PASSWORD,
        is_staff=is_admin,
        is_superuser=is_admin,
    )
    user.groups.add(*Group.objects.filter(name__in=roles))
    audit.record(
        "system:seed_demo", "user.created", user, payload={"username": username, "roles": roles}
    )
    return True
