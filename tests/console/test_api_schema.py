"""The OpenAPI schema of the whole API is valid and generates without a warning (PL)."""

from pathlib import Path

import pytest
from django.core.management import call_command
from rest_framework.test import APIClient

from tests.factories import UserFactory


def test_the_schema_generates_valid_and_without_warnings(tmp_path: Path) -> None:
    target = tmp_path / "schema.yml"
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(target))
    schema = target.read_text()
    for path in ("/api/v1/audit-entries/", "/api/v1/advice/{id}/label/", "/api/v1/advisor/"):
        assert path in schema


@pytest.mark.django_db
def test_the_schema_and_its_browsable_ui_are_served() -> None:
    client = APIClient()
    schema = client.get("/api/v1/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert schema.status_code == 200
    assert schema.json()["info"]["title"] == "Recovery Console API"
    assert "tokenAuth" in schema.json()["components"]["securitySchemes"]
    client.force_login(UserFactory(username="carol", roles=["viewer"]))
    docs = client.get("/api/v1/docs/")
    assert docs.status_code == 200
    assert b"swagger-ui" in docs.content


@pytest.mark.django_db
def test_every_null_the_api_returns_is_declared_nullable_in_the_schema() -> None:
    """A client generated from the schema must not choke on a real answer: an audit entry
    about a person has no cluster, an open mode request no decider."""
    from fleet import services
    from recovery_console.console.api.tokens import rotate_token
    from recovery_console.console.approval import request_action_mode

    cluster = services.create_cluster("user:alice", "research")
    admin = UserFactory(username="root", roles=["viewer", "operator", "approver", "admin"])
    rotate_token(admin)  # audited with no cluster
    request_action_mode(admin, cluster)  # open: decided by nobody yet
    client = APIClient()
    client.force_login(admin)
    schema = client.get("/api/v1/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    components = schema["components"]["schemas"]
    answers = {
        "AuditEntry": client.get("/api/v1/audit-entries/").json()["results"],
        "ModeChangeRequest": client.get("/api/v1/mode-requests/").json()["results"],
    }
    nulls = 0
    for name, rows in answers.items():
        properties = components[name]["properties"]
        for row in rows:
            for field, value in row.items():
                if value is None:
                    nulls += 1
                    assert properties[field].get("nullable"), f"{name}.{field} is null"
    assert nulls
