"""Personal API tokens: ``Token <key>`` for people, kept apart from controllers' ``Bearer``."""

import hashlib

import pytest
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from fleet.models import AuditEntry
from recovery_console.console.models import PersonalToken
from remediation.services import issue_controller_token

pytestmark = pytest.mark.django_db


def with_header(value: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=value)
    return client


def test_a_person_issues_a_token_and_uses_it(api, cluster) -> None:
    carol = api("carol")
    assert carol.get("/api/v1/token/").json() == {"exists": False, "created": None}
    issued = carol.post("/api/v1/token/")
    assert issued.status_code == 201
    key = issued.json()["key"]
    assert len(key) == 40
    status = carol.get("/api/v1/token/").json()
    assert status["exists"] is True
    assert "key" not in status
    response = with_header(f"Token {key}").get("/api/v1/clusters/")
    assert response.status_code == 200
    assert [c["name"] for c in response.json()["results"]] == ["research"]


def test_rotating_revokes_the_previous_key(api, cluster) -> None:
    carol = api("carol")
    old = carol.post("/api/v1/token/").json()["key"]
    new = carol.post("/api/v1/token/").json()["key"]
    assert old != new
    stale = with_header(f"Token {old}").get("/api/v1/clusters/")
    assert stale.status_code == 401
    assert stale.json() == {"detail": "Invalid token."}
    assert with_header(f"Token {new}").get("/api/v1/clusters/").status_code == 200
    verbs = list(AuditEntry.objects.filter(actor="user:carol").values_list("verb", flat=True))
    assert verbs == ["api_token.issued", "api_token.rotated"]
    assert old not in str(AuditEntry.objects.values_list("payload", flat=True))


def test_a_revoked_token_stops_working(api, cluster) -> None:
    carol = api("carol")
    key = carol.post("/api/v1/token/").json()["key"]
    assert carol.delete("/api/v1/token/").status_code == 204
    assert with_header(f"Token {key}").get("/api/v1/clusters/").status_code == 401


def test_a_token_carries_its_owners_roles_only(api, cluster) -> None:
    key = api("carol").post("/api/v1/token/").json()["key"]
    response = with_header(f"Token {key}").patch(
        "/api/v1/clusters/research/", {"policy": {}}, format="json"
    )
    assert response.status_code == 403
    assert response.json() == {"detail": "this needs the operator role"}


def test_anonymous_clients_get_no_token(api) -> None:
    response = api(None).post("/api/v1/token/")
    assert response.status_code == 401
    assert response.json() == {"detail": "Authentication credentials were not provided."}


def test_a_controller_token_opens_nothing_in_the_console_api(cluster) -> None:
    secret = issue_controller_token("user:root", cluster, "c1").secret
    response = with_header(f"Bearer {secret}").get("/api/v1/clusters/")
    assert response.status_code == 401
    assert response.json() == {"detail": "Authentication credentials were not provided."}


def test_a_personal_token_opens_nothing_in_the_advisor_api(api, cluster) -> None:
    key = api("root").post("/api/v1/token/").json()["key"]
    response = with_header(f"Token {key}").get("/api/v1/advisor/research/advice")
    assert response.status_code in (401, 403)
    assert "detail" in response.json()


def test_the_browser_session_needs_csrf_for_writes(people, cluster) -> None:
    browser = APIClient(enforce_csrf_checks=True)
    browser.force_login(people["olga"])
    assert browser.get("/api/v1/clusters/").status_code == 200
    response = browser.patch("/api/v1/clusters/research/", {"policy": {}}, format="json")
    assert response.status_code == 403
    assert response.json()["detail"].startswith("CSRF Failed")


def test_only_the_tokens_digest_is_stored(api, cluster) -> None:
    key = api("carol").post("/api/v1/token/").json()["key"]
    stored = PersonalToken.objects.get(user__username="carol")
    assert stored.digest == hashlib.sha256(key.encode()).hexdigest()
    assert not Token.objects.exists()
    assert key not in str(PersonalToken.objects.values_list())


def test_a_client_address_sending_wrong_tokens_is_refused_for_a_while(api, settings) -> None:
    settings.TOKEN_FAILURE_LIMIT = 3
    key = api("carol").post("/api/v1/token/").json()["key"]
    for _ in range(3):
        assert with_header("Token " + "0" * 40).get("/api/v1/clusters/").status_code == 401
    refused = with_header(f"Token {key}").get("/api/v1/clusters/")
    assert refused.status_code == 429
    assert refused.json() == {"detail": "Too many invalid tokens from this address."}
    # Another address is not concerned.
    other = with_header(f"Token {key}")
    assert other.get("/api/v1/clusters/", REMOTE_ADDR="10.0.0.9").status_code == 200


@pytest.mark.django_db(transaction=True)
def test_an_upgrade_hashes_the_plain_tokens_which_go_on_working() -> None:
    from tests.fleet.test_migrations import latest, migrate

    old = migrate(
        [
            ("console", "0003_dispatch_cycles_by_its_name"),
            ("authtoken", "0004_alter_tokenproxy_options"),
        ]
    )
    user = old.get_model("auth", "User").objects.create(username="rhea", is_active=True)
    plain = "f" * 40
    old.get_model("authtoken", "Token").objects.create(key=plain, user_id=user.pk)
    new = migrate(latest())
    assert not new.get_model("authtoken", "Token").objects.exists()
    stored = new.get_model("console", "PersonalToken").objects.get()
    assert (stored.user_id, stored.digest) == (user.pk, hashlib.sha256(plain.encode()).hexdigest())
    response = with_header(f"Token {plain}").get("/api/v1/token/")
    assert response.status_code == 200
    assert response.json()["exists"] is True


def test_the_admin_offers_no_plain_tokens(people) -> None:
    admin = APIClient()
    admin.force_login(people["root"])
    people["root"].is_staff = people["root"].is_superuser = True
    people["root"].save()
    assert admin.get("/admin/authtoken/tokenproxy/").status_code == 404
