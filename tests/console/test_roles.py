"""Roles: the groups and their permissions, the ladder, and the guards for views and the API."""

from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AnonymousUser, Group
from django.core.exceptions import PermissionDenied
from django.core.management import call_command
from django.http import HttpResponse
from django.test import RequestFactory
from django.views import View
from rest_framework.test import APIRequestFactory

from lab.demo.management.commands.seed_demo import DEMO_USERS
from recovery_console.console import roles
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


def codenames(role: str) -> set[str]:
    return set(Group.objects.get(name=role).permissions.values_list("codename", flat=True))


def test_each_role_is_a_group_with_matching_permissions() -> None:
    assert set(Group.objects.filter(name__in=roles.ROLES).values_list("name", flat=True)) == set(
        roles.ROLES
    )
    viewer = codenames("viewer")
    assert {"view_cluster", "view_auditentry", "view_advice", "view_anomaly"} <= viewer
    assert not any(c.startswith(("add_", "change_", "delete_")) for c in viewer)
    assert {"change_cluster", "change_nodehealth", "add_modechangerequest"} <= codenames("operator")
    assert "approve_modechangerequest" not in codenames("operator")
    assert {"add_review", "change_review"} <= codenames("reviewer")
    assert "approve_modechangerequest" in codenames("approver")
    assert {"delete_notificationchannel", "approve_modechangerequest"} <= codenames("admin")


def test_every_role_implies_viewer_and_nothing_else() -> None:
    alice = UserFactory(username="alice", roles=["operator", "reviewer"])
    assert roles.roles_of(alice) == {"viewer", "operator", "reviewer"}
    assert not roles.has_role(alice, "approver")
    bob = UserFactory(username="bob", roles=["approver"])
    assert roles.roles_of(bob) == {"viewer", "approver"}


def test_admins_and_superusers_hold_every_role() -> None:
    admin = UserFactory(username="root", roles=["admin"])
    superuser = UserFactory(username="su", is_superuser=True)
    for user in (admin, superuser):
        assert all(roles.has_role(user, role) for role in roles.ROLES)


def test_anonymous_inactive_and_groupless_users_hold_no_role() -> None:
    inactive = UserFactory(username="gone", roles=["admin"], is_active=False)
    nobody = UserFactory(username="nobody")
    for user in (AnonymousUser(), inactive, nobody, None):
        assert roles.roles_of(user) == frozenset()


def test_an_unknown_role_is_an_error_not_a_silent_refusal() -> None:
    with pytest.raises(roles.UnknownRole, match="'operater' is not a role"):
        roles.has_role(UserFactory(), "operater")
    with pytest.raises(roles.UnknownRole):
        roles.HasRole("root")


def test_roles_are_cached_until_forgotten() -> None:
    carol = UserFactory(username="carol", roles=["viewer"])
    assert not roles.has_role(carol, "operator")
    carol.groups.add(Group.objects.get(name="operator"))
    assert not roles.has_role(carol, "operator")
    roles.forget_roles(carol)
    assert roles.has_role(carol, "operator")


@roles.role_required("operator")
def operator_page(request):
    return HttpResponse("settings")


class ApproverPage(roles.RoleRequiredMixin, View):
    required_role = "approver"

    def get(self, request):
        return HttpResponse("approve")


@pytest.mark.parametrize(
    "view", [operator_page, ApproverPage.as_view()], ids=["decorator", "mixin"]
)
def test_views_send_anonymous_users_to_log_in(view) -> None:
    request = RequestFactory().get("/clusters/research/settings")
    request.user = AnonymousUser()
    response = view(request)
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/?next=")


@pytest.mark.parametrize(
    ("view", "allowed"),
    [(operator_page, "operator"), (ApproverPage.as_view(), "approver")],
    ids=["decorator", "mixin"],
)
def test_views_refuse_users_without_the_role(view, allowed) -> None:
    request = RequestFactory().get("/")
    request.user = UserFactory(username="carol", roles=["viewer"])
    with pytest.raises(PermissionDenied, match=f"needs the {allowed} role"):
        view(request)
    request.user = UserFactory(username="dora", roles=[allowed])
    assert view(request).status_code == 200


def test_the_api_permission_checks_the_role() -> None:
    request = APIRequestFactory().get("/api/v1/clusters/")
    request.user = UserFactory(username="carol", roles=["viewer"])
    assert roles.IsViewer().has_permission(request, None)
    assert not roles.HasRole("operator")().has_permission(request, None)
    assert roles.IsOperator.message == "this needs the operator role"


def test_seed_demo_creates_the_demo_people_once_with_a_printed_password(settings) -> None:
    settings.DEBUG = True
    out = StringIO()
    call_command("seed_demo", stdout=out)
    assert "created demo users alice, bob, carol, admin with the password 'demo-password'" in (
        out.getvalue()
    )
    User = get_user_model()  # noqa: N806
    alice, bob, carol, admin = (User.objects.get(username=n) for n in DEMO_USERS)
    assert roles.roles_of(alice) == {"viewer", "operator", "reviewer"}
    assert roles.roles_of(bob) == {"viewer", "approver", "reviewer"}
    assert roles.roles_of(carol) == {"viewer"}
    assert admin.is_superuser and roles.has_role(admin, "admin")
    assert alice.check_password("demo-password")
    again = StringIO()
    call_command("seed_demo", stdout=again)
    assert "demo users already exist" in again.getvalue()
    assert User.objects.count() == 4


def test_seed_demo_creates_no_known_password_with_debug_off(settings) -> None:
    settings.DEBUG = False
    out = StringIO()
    call_command("seed_demo", stdout=out)
    assert "no demo users created" in out.getvalue()
    assert not get_user_model().objects.exists()


def test_syncing_repairs_a_deleted_group_and_a_removed_permission() -> None:
    Group.objects.filter(name="approver").delete()
    Group.objects.get(name="operator").permissions.clear()
    roles.sync_role_groups()
    assert "approve_modechangerequest" in codenames("approver")
    assert "change_cluster" in codenames("operator")
