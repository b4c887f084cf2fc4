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
