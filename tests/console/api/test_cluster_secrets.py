"""A cluster's telemetry names its secrets by reference, and its URLs only where a site allows:
a real loopback listener stands in for Loki and records what the worker sends it."""

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from django.test import Client

from detection import scan
from detection.models import SourceCursor
from fleet.models import AuditEntry, Cluster
from tests.detection.sources.listener import Listener, serving

pytestmark = pytest.mark.django_db
T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
listener = pytest.fixture(serving)
elsewhere = pytest.fixture(serving)


@pytest.fixture
def secrets_dir(tmp_path: Path, settings) -> Path:
    directory = tmp_path / "secrets"
    directory.mkdir()
    settings.SECRETS_DIR = str(directory)
    settings.SECRET_ENV_PREFIX = "RC_SECRET_"
    settings.OUTBOUND_ALLOWED_HOSTS = []
    return directory


def patch(api, telemetry):
    return api("root").patch("/api/v1/clusters/research/", {"telemetry": telemetry}, format="json")


def loki(listener: Listener, **fields) -> dict:
    return {"logs": {"type": "loki", "url": listener.url, **fields}, "metrics": {"type": "none"}}


def test_a_token_file_outside_the_secrets_dir_is_refused_and_never_sent(
    api, cluster, listener, secrets_dir, tmp_path
) -> None:
    key_file = tmp_path / "secret_key"  # beside the secrets dir, not in it: the server's own key
    key_file.write_text("the-servers-secret-key\n")
    response = patch(api, loki(listener, token_file=str(key_file)))
    assert response.status_code == 400
    problems = response.json()["telemetry"]
    assert any(p.startswith("logs.token_file:") for p in problems), problems
    assert Cluster.objects.get().telemetry == {}
    # A reference that climbs out of the secrets dir is refused just the same.
    climbing = patch(api, loki(listener, token={"file": "../secret_key"}))
    assert climbing.status_code == 400
    assert any(p.startswith("logs.token:") for p in climbing.json()["telemetry"])
    scan.scan_cluster(Cluster.objects.get(), T0)
    assert not any("the-servers-secret-key" in (a or "") for a in listener.authorizations)


def test_a_symlink_out_of_the_secrets_dir_is_refused(
    api, cluster, listener, secrets_dir, tmp_path
) -> None:
    (tmp_path / "secret_key").write_text("the-servers-secret-key\n")
    (secrets_dir / "loki-token").symlink_to(tmp_path / "secret_key")
    response = patch(api, loki(listener, token={"file": "loki-token"}))
    assert response.status_code == 400
    assert any("outside SECRETS_DIR" in p for p in response.json()["telemetry"])


def test_a_symlink_made_after_validation_is_refused_when_the_source_connects(
    api, cluster, listener, secrets_dir, tmp_path
) -> None:
    assert patch(api, loki(listener, token={"file": "loki-token"})).status_code == 200
    (tmp_path / "secret_key").write_text("the-servers-secret-key\n")
    (secrets_dir / "loki-token").symlink_to(tmp_path / "secret_key")
    scan.scan_cluster(Cluster.objects.get(), T0)
    assert listener.authorizations == []
    row = SourceCursor.objects.get(source="loki")
    assert not row.healthy
    assert "outside SECRETS_DIR" in row.last_error
    assert "the-servers-secret-key" not in row.last_error


def test_secrets_named_by_reference_are_sent(
    api, cluster, listener, secrets_dir, monkeypatch
) -> None:
    (secrets_dir / "loki-token").write_text("token-from-a-file\n")
    assert patch(api, loki(listener, token={"file": "loki-token"})).status_code == 200
    scan.scan_cluster(Cluster.objects.get(), T0)
    assert listener.authorizations[-1] == "Bearer token-from-a-file"
    monkeypatch.setenv("RC_SECRET_LOKI", "token-from-the-environment")
    assert patch(api, loki(listener, token={"env": "RC_SECRET_LOKI"})).status_code == 200
    scan.scan_cluster(Cluster.objects.get(), T0)
    assert listener.authorizations[-1] == "Bearer token-from-the-environment"
    # The trail and the API hold the reference, never the value.
    trail = json.dumps([e.payload for e in AuditEntry.objects.all()])
    assert "token-from" not in trail
    shown = api("carol").get("/api/v1/clusters/research/").json()
    assert shown["telemetry"]["logs"]["token"] == {"env": "RC_SECRET_LOKI"}


@pytest.mark.parametrize(
    ("field", "value", "problem"),
    [
        ("token", "abc123", "logs.token: an inline secret"),
        ("password", "hunter2", "logs.password: an inline secret"),
        ("token", {"env": "SECRET_KEY"}, "logs.token: the variable must start with RC_SECRET_"),
        ("token", {"file": "/etc/shadow"}, "logs.token: a file name under SECRETS_DIR"),
        ("password_file", "/etc/rc/pw", "logs.password_file: a free path"),
    ],
)
def test_inline_secrets_and_free_paths_are_refused(
    api, cluster, listener, secrets_dir, field, value, problem
) -> None:
    response = patch(api, loki(listener, username="rc", **{field: value}))
    assert response.status_code == 400
    assert any(p.startswith(problem) for p in response.json()["telemetry"]), response.json()


@pytest.mark.parametrize(
    ("telemetry", "problem"),
    [
        ({"logs": {"type": "files"}}, "logs.path is required"),
        ({"logs": {"type": "files", "path": 7}}, "logs.path must be a non-empty string"),
        ({"logs": {"type": "loki"}}, "logs.url is required"),
        ({"logs": {"type": "loki", "url": "file:///etc/passwd"}}, "logs.url: the scheme must be"),
        ({"logs": {"type": "loki", "url": "http://"}}, "logs.url: no host"),
        ({"logs": {"type": "loki", "url": "http://u:p@loki"}}, "logs.url: credentials"),
        ({"logs": {"type": "loki", "url": "http://loki", "colour": 1}}, "logs.colour is not"),
        ({"logs": {"type": "loki", "url": "http://l", "labels": "x"}}, "logs.labels must be"),
        ({"logs": "loki"}, "logs must be a JSON object"),
        ({"metrics": {"type": "prometheus"}}, "metrics.url is required"),
        ({"metrics": {"type": "prometheus", "url": "gopher://p"}}, "metrics.url: the scheme"),
        ({"traces": {}}, "traces is not a telemetry section"),
    ],
)
def test_every_section_is_validated_and_each_problem_named(
    api, cluster, secrets_dir, telemetry, problem
) -> None:
    response = patch(api, telemetry)
    assert response.status_code == 400
    assert any(p.startswith(problem) for p in response.json()["telemetry"]), response.json()
    assert Cluster.objects.get().telemetry == {}


def test_outbound_hosts_are_limited_at_validation_and_when_the_source_connects(
    api, cluster, listener, secrets_dir, settings
) -> None:
    settings.OUTBOUND_ALLOWED_HOSTS = ["loki.example.org"]
    refused = patch(api, loki(listener))
    assert refused.status_code == 400
    assert any(
        p.startswith("logs.url: host 127.0.0.1 is not in OUTBOUND_ALLOWED_HOSTS")
        for p in refused.json()["telemetry"]
    )
    settings.OUTBOUND_ALLOWED_HOSTS = []
    assert patch(api, loki(listener)).status_code == 200
    # The site narrows the list later: the stored URL is refused when the source connects.
    settings.OUTBOUND_ALLOWED_HOSTS = ["loki.example.org", "*.example.org"]
    scan.scan_cluster(Cluster.objects.get(), T0)
    assert listener.authorizations == []
    assert "not in OUTBOUND_ALLOWED_HOSTS" in SourceCursor.objects.get(source="loki").last_error


def test_a_redirect_is_not_followed_with_the_token(
    api, cluster, listener, elsewhere, secrets_dir, monkeypatch
) -> None:
    monkeypatch.setenv("RC_SECRET_LOKI", "loki-token")
    assert patch(api, loki(listener, token={"env": "RC_SECRET_LOKI"})).status_code == 200
    listener.redirect_to = elsewhere.url
    scan.scan_cluster(Cluster.objects.get(), T0)
    assert listener.authorizations == ["Bearer loki-token"]
    assert elsewhere.authorizations == []
    assert "redirects are not followed" in SourceCursor.objects.get(source="loki").last_error


def test_inline_secrets_stored_before_are_never_shown(api, people, cluster, secrets_dir) -> None:
    # Written around validation, as a row from before secrets were by reference would be.
    telemetry = {"logs": {"type": "loki", "url": "http://loki", "password": "hunter2"}}
    Cluster.objects.filter(pk=cluster.pk).update(telemetry=telemetry)
    shown = api("carol").get("/api/v1/clusters/research/")
    assert shown.status_code == 200
    assert "hunter2" not in shown.content.decode()
    assert shown.json()["telemetry"]["logs"]["password"] == "(redacted)"
    page = Client()
    page.force_login(people["carol"])
    assert "hunter2" not in page.get("/clusters/research/settings/").content.decode()


def test_the_scheduler_document_keeps_no_credentials(api, cluster, secrets_dir) -> None:
    response = api("root").patch(
        "/api/v1/clusters/research/",
        {"scheduler": {"backend": "slurm", "identity_file": "/root/.ssh/id_ed25519"}},
        format="json",
    )
    assert response.status_code == 400
    assert any(p.startswith("scheduler.identity_file:") for p in response.json()["scheduler"])
