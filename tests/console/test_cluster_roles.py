"""Roles per cluster: a membership scopes a role to one cluster, in pages, the REST API and
websockets; the site-wide role groups still count on every cluster."""

from io import StringIO

import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.test import Client
from rest_framework.test import APIClient

from fleet import services
from fleet.models import AuditEntry, Cluster
from recovery_console.asgi import application
from recovery_console.console import approval, memberships, reviews, roles
from recovery_console.console.models import ClusterMembership, ModeChangeRequest, Review
from tests.console.api.conftest import advice_on
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def a_and_b():
    return services.create_cluster("user:root", "alpha"), services.create_cluster(
        "user:root", "beta"
    )


def member(username: str, role: str, cluster: Cluster, site_roles=()):
    user = UserFactory(username=username, roles=list(site_roles))
    memberships.grant_role("test", user, role, cluster)
    return user


def logged_in(user, client_class=Client):
    client = client_class()
    client.force_login(user)
    return client


def labelled(cluster, count: int) -> None:
    rita = UserFactory(username="rita", roles=["reviewer"])
    for _ in range(count):
        reviews.label_advice(rita, advice_on(cluster), agrees=True)


# --- the roles themselves ----------------------------------------------------------------------


def test_a_membership_gives_its_role_on_its_cluster_only(a_and_b) -> None:
    alpha, beta = a_and_b
    rae = member("rae", "reviewer", alpha)
    assert roles.roles_of(rae, alpha) == {"viewer", "reviewer"}
    assert roles.roles_of(rae, beta) == frozenset()
    assert roles.roles_of(rae) == frozenset()  # no site-wide role
    assert roles.has_role_anywhere(rae, "reviewer")
    assert roles.cluster_ids_with(rae, "viewer") == {alpha.pk}


def test_a_site_wide_group_counts_on_every_cluster(a_and_b) -> None:
    alpha, beta = a_and_b
    vera = UserFactory(username="vera", roles=["viewer"])
    memberships.grant_role("test", vera, "approver", alpha)
    assert roles.roles_of(vera, beta) == {"viewer"}
    assert roles.roles_of(vera, alpha) == {"viewer", "approver"}
    assert roles.cluster_ids_with(vera, "viewer") is None


def test_admin_cannot_be_scoped_to_a_cluster(a_and_b) -> None:
    with pytest.raises(memberships.RoleNotScoped, match="admin is site-wide only"):
        memberships.grant_role("test", UserFactory(), "admin", a_and_b[0])


def test_a_deactivated_member_loses_the_role(a_and_b) -> None:
    alpha, _ = a_and_b
    gone = member("gone", "operator", alpha)
    gone.is_active = False
    assert roles.roles_of(gone, alpha) == frozenset()


# --- pages -------------------------------------------------------------------------------------


def test_a_reviewer_of_a_sees_only_a_in_pages(a_and_b) -> None:
    alpha, beta = a_and_b
    mine, theirs = advice_on(alpha), advice_on(beta)
    client = logged_in(member("rae", "reviewer", alpha))
    overview = client.get("/").content.decode()
    assert "/clusters/alpha/" in overview and "/clusters/beta/" not in overview
    assert client.get("/clusters/alpha/").status_code == 200
    assert client.get("/clusters/beta/").status_code == 403
    assert client.get("/clusters/beta/nodes/").status_code == 403
    assert client.get(f"/anomalies/{mine.anomaly_id}/").status_code == 200
    assert client.get(f"/anomalies/{theirs.anomaly_id}/").status_code == 404
    assert client.get(f"/workloads/{theirs.workload_id}/").status_code == 404
    workloads = client.get("/workloads/").content.decode()
    assert mine.workload.key in workloads and theirs.workload.key not in workloads
    queue = client.get("/reviews/_queue").content.decode()
    assert f"/reviews/advice/{mine.pk}/label" in queue
    assert f"/reviews/advice/{theirs.pk}/label" not in queue


def test_the_overview_offers_the_review_queue_only_where_the_person_reviews(a_and_b) -> None:
    alpha, _ = a_and_b
    client = logged_in(member("wes", "reviewer", alpha, site_roles=["viewer"]))
    overview = client.get("/").content.decode()
    assert "/reviews/?cluster=alpha" in overview and "/reviews/?cluster=beta" not in overview
    assert "/clusters/beta/" in overview  # a site-wide viewer sees beta's card


def test_a_reviewer_of_a_cannot_label_advice_of_b_in_pages(a_and_b) -> None:
    alpha, beta = a_and_b
    theirs = advice_on(beta)
    client = logged_in(member("rae", "reviewer", alpha))
    response = client.post(f"/reviews/advice/{theirs.pk}/label", {"verdict": "agree"})
    assert response.status_code == 404
    # A site-wide viewer sees beta's advice, but labels it only where they review.
    watcher = logged_in(member("wes", "reviewer", alpha, site_roles=["viewer"]))
    response = watcher.post(
        f"/reviews/advice/{theirs.pk}/label",
        {"verdict": "agree"},
        headers={"accept": "application/json"},
    )
    assert response.status_code == 400
    assert response.json()["error"] == "labelling advice needs the reviewer role"
    assert not Review.objects.exists()


def test_a_reviewer_of_a_labels_advice_of_a_in_pages(a_and_b) -> None:
    alpha, _ = a_and_b
    mine = advice_on(alpha)
    client = logged_in(member("rae", "reviewer", alpha))
    response = client.post(
        f"/reviews/advice/{mine.pk}/label",
        {"verdict": "agree"},
        headers={"accept": "application/json"},
    )
    assert response.status_code == 200, response.content
    assert Review.objects.get().advice_id == mine.pk


def test_an_approver_of_a_cannot_approve_b_in_pages(a_and_b) -> None:
    alpha, beta = a_and_b
    labelled(beta, 50)
    olga = UserFactory(username="olga", roles=["operator"])
    asked = approval.request_action_mode(olga, beta)
    client = logged_in(member("abe", "approver", alpha))
    assert client.post(f"/clusters/beta/mode/{asked.pk}/approve").status_code == 403
    assert ModeChangeRequest.objects.get().status == "pending"
    assert Cluster.objects.get(name="beta").mode == "monitor"


def test_an_approver_of_a_approves_a_in_pages(a_and_b) -> None:
    alpha, _ = a_and_b
    labelled(alpha, 50)
    asked = approval.request_action_mode(UserFactory(username="olga", roles=["operator"]), alpha)
    client = logged_in(member("abe", "approver", alpha))
    assert client.post(f"/clusters/alpha/mode/{asked.pk}/approve").status_code == 302
    assert Cluster.objects.get(name="alpha").mode == "action"


def test_test_signals_offers_only_the_members_clusters(a_and_b) -> None:
    client = logged_in(member("rae", "viewer", a_and_b[0]))
    page = client.get("/signals/").content.decode()
    assert '<option value="alpha">' in page and '<option value="beta">' not in page
    excerpt = {"text": "NVRM: Xid 79", "tasks_per_node": 8}
    assert client.post("/signals/", {**excerpt, "cluster": "alpha"}).status_code == 200
    refused = client.post("/signals/", {**excerpt, "cluster": "beta"})
    assert refused.status_code == 400
    assert "Select a valid choice" in refused.content.decode()


def test_the_audit_trail_shows_a_member_only_their_clusters_entries(a_and_b) -> None:
    alpha, beta = a_and_b
    client = logged_in(member("rae", "viewer", alpha))
    page = client.get("/audit/").content.decode()
    assert "alpha" in page and ">beta<" not in page
    assert AuditEntry.objects.filter(cluster=beta).exists()


# --- REST API ----------------------------------------------------------------------------------


def test_a_reviewer_of_a_sees_and_labels_only_a_through_the_api(a_and_b) -> None:
    alpha, beta = a_and_b
    mine, theirs = advice_on(alpha), advice_on(beta)
    api = logged_in(member("rae", "reviewer", alpha), APIClient)
    listed = [a["id"] for a in api.get("/api/v1/advice/").json()["results"]]
    assert listed == [mine.pk]
    assert [c["name"] for c in api.get("/api/v1/clusters/").json()["results"]] == ["alpha"]
    assert api.get(f"/api/v1/advice/{theirs.pk}/").status_code == 404
    assert api.get(f"/api/v1/anomalies/{theirs.anomaly_id}/").status_code == 404
    assert api.get("/api/v1/clusters/beta/agreement/").status_code == 404
    refused = api.post(f"/api/v1/advice/{theirs.pk}/label/", {"agrees": True})
    assert refused.status_code == 404
    assert api.post(f"/api/v1/advice/{mine.pk}/label/", {"agrees": True}).status_code == 200
    assert list(Review.objects.values_list("advice_id", flat=True)) == [mine.pk]


def test_a_site_wide_viewer_reviewing_a_gets_403_labelling_b(a_and_b) -> None:
    alpha, beta = a_and_b
    theirs = advice_on(beta)
    api = logged_in(member("wes", "reviewer", alpha, site_roles=["viewer"]), APIClient)
    assert api.get(f"/api/v1/advice/{theirs.pk}/").status_code == 200
    refused = api.post(f"/api/v1/advice/{theirs.pk}/label/", {"agrees": True})
    assert refused.status_code == 403
    assert refused.json() == {"detail": "this needs the reviewer role"}


def test_an_approver_of_a_cannot_approve_b_through_the_api(a_and_b) -> None:
    alpha, beta = a_and_b
    labelled(beta, 50)
    asked = approval.request_action_mode(UserFactory(username="olga", roles=["operator"]), beta)
    api = logged_in(member("abe", "approver", alpha), APIClient)
    assert api.post(f"/api/v1/mode-requests/{asked.pk}/approve/").status_code == 404
    watcher = logged_in(member("wes", "approver", alpha, site_roles=["viewer"]), APIClient)
    response = watcher.post(f"/api/v1/mode-requests/{asked.pk}/approve/")
    assert response.status_code == 403
    assert ModeChangeRequest.objects.get().status == "pending"


def test_the_services_refuse_a_role_held_on_another_cluster(a_and_b) -> None:
    alpha, beta = a_and_b
    labelled(beta, 50)
    asked = approval.request_action_mode(UserFactory(username="olga", roles=["operator"]), beta)
    abe = member("abe", "approver", alpha)
    with pytest.raises(reviews.RoleMissing, match="approving action mode needs the approver"):
        approval.approve_mode_request(abe, asked)
    with pytest.raises(reviews.RoleMissing):
        approval.request_action_mode(member("otto", "operator", alpha), beta)


# --- websockets --------------------------------------------------------------------------------


def connect(path: str, user) -> tuple[bool, object]:
    client = logged_in(user)
    headers = [
        (b"origin", b"http://localhost"),
        (b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode()),
    ]

    async def scenario() -> tuple[bool, object]:
        socket = WebsocketCommunicator(application, path, headers=headers)
        connected, code = await socket.connect()
        await socket.disconnect()
        return connected, code

    return async_to_sync(scenario)()


@pytest.mark.django_db(transaction=True)
def test_a_socket_is_refused_for_a_cluster_the_member_cannot_see() -> None:
    alpha = services.create_cluster("user:root", "alpha")
    beta = services.create_cluster("user:root", "beta")
    mine, theirs = advice_on(alpha), advice_on(beta)
    rae = member("rae", "reviewer", alpha)
    assert connect(f"/ws/clusters/{alpha.pk}/", rae)[0]
    assert connect(f"/ws/workloads/{mine.workload_id}/", rae)[0]
    assert connect(f"/ws/clusters/{beta.pk}/", rae) == (False, 4403)
    assert connect(f"/ws/workloads/{theirs.workload_id}/", rae) == (False, 4403)
    assert connect("/ws/workloads/999999/", rae) == (False, 4403)


# --- granting ----------------------------------------------------------------------------------


def grant(*args: str) -> str:
    out = StringIO()
    call_command("grant_role", *args, stdout=out)
    return out.getvalue()


def test_grant_role_gives_a_role_on_one_cluster_and_audits_it(a_and_b) -> None:
    UserFactory(username="rae")
    assert grant("rae", "reviewer", "--cluster", "alpha") == "rae holds reviewer on alpha\n"
    assert grant("rae", "reviewer", "--cluster", "alpha").endswith("(unchanged)\n")
    [held] = ClusterMembership.objects.all()
    assert (held.user.username, held.cluster.name, held.role) == ("rae", "alpha", "reviewer")
    entry = AuditEntry.objects.get(verb="role.granted")
    assert entry.payload == {"user": "rae", "role": "reviewer", "scope": "alpha"}
    assert entry.cluster.name == "alpha" and entry.actor == "command:grant_role"
    assert grant("rae", "reviewer", "--cluster", "alpha", "--revoke").startswith("rae no longer")
    assert not ClusterMembership.objects.exists()
    assert AuditEntry.objects.filter(verb="role.revoked").count() == 1


def test_grant_role_without_a_cluster_gives_the_site_wide_group(a_and_b) -> None:
    out = grant("newcomer", "admin", "--create")
    assert "created newcomer: set a password with changepassword newcomer" in out
    newcomer = get_user_model().objects.get(username="newcomer")
    assert not newcomer.has_usable_password()
    assert roles.roles_of(newcomer) == set(roles.ROLES)


def test_grant_role_names_what_is_wrong(a_and_b) -> None:
    UserFactory(username="rae")
    with pytest.raises(CommandError, match=r"no cluster 'gamma' \(known: alpha, beta\)"):
        grant("rae", "viewer", "--cluster", "gamma")
    with pytest.raises(CommandError, match="no user 'ghost': add --create"):
        grant("ghost", "viewer")
    with pytest.raises(CommandError, match="admin is site-wide only"):
        grant("rae", "admin", "--cluster", "alpha")
