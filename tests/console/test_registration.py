"""Registering a cluster: the commands (idempotent), the API (admins only) and the console's
form, each checked by the same validator and each change audited."""

import io
import json
import re
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.test import Client
from rest_framework.test import APIClient

from fleet import services
from fleet.models import AuditEntry, Cluster, ClusterMode
from recovery_console.console import memberships
from recovery_console.console.roles import roles_of
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

FILES = ["--backend", "slurm", "--logs", "files", "--logs-path", "/shared/slurm-logs"]


def run(command: str, *args: str) -> str:
    out = io.StringIO()
    call_command(command, *args, stdout=out)
    return out.getvalue().strip()


def verbs(*names: str) -> list[str]:
    return list(AuditEntry.objects.filter(verb__in=names).values_list("verb", flat=True))


# --- commands --------------------------------------------------------------------------------


def test_add_cluster_registers_in_monitor_mode_and_again_changes_nothing() -> None:
    assert run("add_cluster", "research", *FILES, "--metrics", "none") == (
        "registered research (monitor mode)"
    )
    assert run("add_cluster", "research", *FILES, "--metrics", "none") == "research unchanged"
    cluster = Cluster.objects.get(name="research")
    assert cluster.mode == ClusterMode.MONITOR
    assert cluster.scheduler == {"backend": "slurm"}
    assert cluster.telemetry == {
        "logs": {"type": "files", "path": "/shared/slurm-logs"},
        "metrics": {"type": "none"},
    }
    entry = AuditEntry.objects.get(verb="cluster.created")
    assert (entry.actor, entry.cluster_id) == ("system:cli", cluster.pk)
    assert verbs("cluster.settings_changed") == []


def test_a_registered_cluster_is_a_slurm_one_and_without_telemetry_reads_nothing() -> None:
    run("add_cluster", "research")
    cluster = Cluster.objects.get(name="research")
    assert cluster.scheduler == {"backend": "slurm"}
    assert run("add_cluster", "research") == "research unchanged"
    report = run("check_cluster", "research")
    assert "[PROBLEM] logs: no log source is configured" in report
    assert "var/sim" not in report


def test_add_cluster_refuses_to_change_a_registered_cluster() -> None:
    run("add_cluster", "research", *FILES)
    with pytest.raises(CommandError, match="registered with other telemetry: configure_cluster"):
        run("add_cluster", "research", "--logs", "files", "--logs-path", "/elsewhere")


def test_configure_cluster_changes_only_what_differs_and_audits_it_once() -> None:
    run("configure_cluster", "research", *FILES, "--metrics", "none")
    assert run("configure_cluster", "research", "--partition", "canary") == (
        "changed research: partitions_allowlist"
    )
    assert run("configure_cluster", "research", "--partition", "canary") == "research unchanged"
    # A flag replaces its own section only: the metrics stay.
    run("configure_cluster", "research", "--logs", "files", "--logs-path", "/other")
    cluster = Cluster.objects.get(name="research")
    assert cluster.telemetry["metrics"] == {"type": "none"}
    assert cluster.telemetry["logs"]["path"] == "/other"
    assert verbs("cluster.created", "cluster.settings_changed") == [
        "cluster.created",
        "cluster.settings_changed",
        "cluster.settings_changed",
    ]


def test_a_yaml_file_registers_and_flags_override_its_sections(tmp_path, settings) -> None:
    settings.SECRETS_DIR = str(tmp_path)
    (tmp_path / "head-key").write_text("k")
    (tmp_path / "head-known-hosts").write_text("h")
    document = tmp_path / "research.yaml"
    document.write_text(
        "name: research\n"
        "scheduler:\n"
        "  backend: slurm\n"
        "  transport: ssh\n"
        "  ssh: {host: slurm-head, user: rc, key: {file: head-key},"
        " known_hosts: {file: head-known-hosts}}\n"
        "telemetry:\n"
        "  logs: {type: loki, url: 'https://loki.example.org', tenant: hpc,"
        " query: '{job=\"slurm\"}', token: {env: RC_SECRET_LOKI}}\n"
        "  metrics: {type: none}\n"
        "partitions_allowlist: [canary]\n"
        "policy: {drain_after_strikes: 3}\n"
    )
    assert run("configure_cluster", "--file", str(document)) == "registered research (monitor mode)"
    run(
        "configure_cluster",
        "--file",
        str(document),
        "--metrics",
        "prometheus",
        "--metrics-url",
        "https://prom.example.org",
        "--metrics-token",
        "env:RC_SECRET_PROM",
        "--metrics-timeout",
        "5",
    )
    cluster = Cluster.objects.get(name="research")
    assert cluster.scheduler["ssh"]["key"] == {"file": "head-key"}
    assert cluster.telemetry["logs"]["tenant"] == "hpc"
    assert cluster.telemetry["metrics"] == {
        "type": "prometheus",
        "url": "https://prom.example.org",
        "token": {"env": "RC_SECRET_PROM"},
        "timeout": 5.0,
    }
    assert cluster.partitions_allowlist == ["canary"]


def test_every_problem_is_named_and_nothing_is_registered() -> None:
    with pytest.raises(CommandError) as refused:
        run(
            "add_cluster",
            "research",
            "--transport",
            "ssh",
            "--ssh-host",
            "head",
            "--logs",
            "loki",
            "--logs-url",
            "ftp://loki",
            "--metrics",
            "prometheus",
            "--metrics-url",
            "https://prom",
            "--metrics-timeout",
            "0",
            "--partition",
            "two words",
        )
    message = str(refused.value)
    for problem in (
        "scheduler: ssh.user is required",
        "scheduler: ssh.key is required",
        "telemetry: logs.url: the scheme must be http or https, not 'ftp'",
        "telemetry: metrics.timeout must be a number of seconds above 0",
        "partitions_allowlist: [0] 'two words' is not a partition name",
    ):
        assert problem in message
    assert not Cluster.objects.exists()
    assert not AuditEntry.objects.exists()


def test_a_secret_flag_takes_a_reference_never_a_value() -> None:
    with pytest.raises(CommandError, match="takes a reference, env:NAME or file:NAME"):
        run("add_cluster", "research", *FILES[:2], "--logs", "loki", "--logs-token", "hunter2")
    assert not Cluster.objects.exists()


@pytest.fixture
def stdin_document(monkeypatch):
    def feed(text: str) -> None:
        monkeypatch.setattr("sys.stdin", io.StringIO(text))

    return feed


def test_the_document_can_come_on_stdin_and_a_real_cluster_never_reads_simulated_files(
    stdin_document,
) -> None:
    stdin_document('{"telemetry": {"logs": {"type": "simulated"}}}')
    with pytest.raises(CommandError, match="logs.type simulated reads the simulated cluster's"):
        run("add_cluster", "research", "--backend", "slurm", "--file", "-")
    stdin_document('{"name": "research", "scheduler": {"backend": "slurm"}}')
    with pytest.raises(CommandError, match="the file registers 'research', the command names 'x'"):
        run("add_cluster", "x", "--file", "-")
    stdin_document('{"name": "research", "scheduler": {"backend": "slurm"}}')
    assert run("add_cluster", "--file", "-") == "registered research (monitor mode)"


def test_a_command_never_applies_what_needs_a_second_person() -> None:
    run("add_cluster", "research", *FILES)
    Cluster.objects.filter(name="research").update(mode=ClusterMode.ACTION)
    with pytest.raises(CommandError, match="in action mode and it changes the policy"):
        run("configure_cluster", "research", "--policy", '{"drain_after_strikes": 3}')
    assert Cluster.objects.get(name="research").policy == {}


# --- API -------------------------------------------------------------------------------------


@pytest.fixture
def api():
    people = {
        "root": UserFactory(username="root", roles=["admin"]),
        "olga": UserFactory(username="olga", roles=["operator"]),
        "carol": UserFactory(username="carol", roles=["viewer"]),
    }

    def client_for(name: str) -> APIClient:
        client = APIClient()
        client.force_login(people[name])
        return client

    return client_for


REGISTRATION = {
    "name": "research",
    "scheduler": {"backend": "slurm", "slurm_conf": "/etc/slurm/slurm.conf"},
    "telemetry": {"logs": {"type": "files", "path": "/shared/slurm-logs"}},
    "partitions_allowlist": ["canary"],
}


@pytest.mark.parametrize("person", ["olga", "carol"])
def test_only_an_admin_registers_a_cluster(api, person) -> None:
    refused = api(person).post("/api/v1/clusters/", REGISTRATION, format="json")
    assert refused.status_code == 403
    assert refused.json() == {"detail": "this needs the admin role"}
    assert not Cluster.objects.exists()


def test_an_admin_registers_a_cluster_and_it_is_audited(api) -> None:
    response = api("root").post("/api/v1/clusters/", REGISTRATION, format="json")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert (body["name"], body["mode"]) == ("research", "monitor")
    assert body["scheduler"] == REGISTRATION["scheduler"]
    entry = AuditEntry.objects.get(verb="cluster.created")
    assert entry.actor == "user:root"
    assert entry.payload["telemetry"] == REGISTRATION["telemetry"]
    again = api("root").post("/api/v1/clusters/", REGISTRATION, format="json")
    assert again.status_code == 400
    assert again.json() == {
        "name": ["a cluster named 'research' is registered already; change it instead"]
    }


def test_a_refused_registration_names_each_field(api) -> None:
    bad = {
        "name": "Research",
        "scheduler": {"backend": "slurm", "transport": "ssh"},
        "telemetry": {"logs": {"type": "files"}},
    }
    response = api("root").post("/api/v1/clusters/", bad, format="json")
    assert response.status_code == 400
    problems = response.json()
    assert problems["name"] == [
        "must be 1-63 lower-case letters, digits and -, starting with a letter or digit"
    ]
    assert any(p.startswith("ssh must be a JSON object") for p in problems["scheduler"])
    assert "logs.path is required for a files source" in problems["telemetry"]
    assert not AuditEntry.objects.exists()


def test_put_changes_a_registration_only_for_an_admin_and_only_what_differs(api) -> None:
    api("root").post("/api/v1/clusters/", REGISTRATION, format="json")
    changed = {**REGISTRATION, "partitions_allowlist": ["canary", "gpu"]}
    assert api("olga").put("/api/v1/clusters/research/", changed, format="json").status_code == 403
    response = api("root").put("/api/v1/clusters/research/", changed, format="json")
    assert response.status_code == 200, response.json()
    assert response.json()["partitions_allowlist"] == ["canary", "gpu"]
    assert api("root").put("/api/v1/clusters/research/", changed, format="json").status_code == 200
    entries = AuditEntry.objects.filter(verb="cluster.settings_changed")
    assert [e.payload for e in entries] == [
        {"partitions_allowlist": {"from": ["canary"], "to": ["canary", "gpu"]}}
    ]
    renamed = api("root").put(
        "/api/v1/clusters/research/", {**changed, "name": "other"}, format="json"
    )
    assert renamed.status_code == 400
    assert "not renamed" in renamed.json()["name"][0]


def test_put_in_action_mode_asks_a_second_person_for_the_policy(api) -> None:
    api("root").post("/api/v1/clusters/", REGISTRATION, format="json")
    Cluster.objects.filter(name="research").update(mode=ClusterMode.ACTION)
    changed = {**REGISTRATION, "policy": {"drain_after_strikes": 3}, "note": "fewer strikes"}
    response = api("root").put("/api/v1/clusters/research/", changed, format="json")
    assert response.status_code == 202, response.json()
    assert response.json()["changes"] == {"policy": {"drain_after_strikes": 3}}
    assert Cluster.objects.get(name="research").policy == {}


def test_an_operator_changes_the_policy_but_not_the_connections(api) -> None:
    services.create_cluster("user:root", "research")
    policy = api("olga").patch(
        "/api/v1/clusters/research/", {"policy": {"drain_after_strikes": 3}}, format="json"
    )
    assert policy.status_code == 200
    for document in ({"telemetry": {"metrics": {"type": "none"}}}, {"scheduler": {}}):
        refused = api("olga").patch("/api/v1/clusters/research/", document, format="json")
        assert refused.status_code == 403
        assert refused.json() == {
            "detail": "changing a cluster's scheduler or telemetry needs the admin role"
        }


# --- the console's form ----------------------------------------------------------------------


@pytest.fixture
def browser():
    def logged_in(name: str, roles: list[str]) -> Client:
        client = Client()
        client.force_login(UserFactory(username=name, roles=roles))
        return client

    return logged_in


def test_an_admin_registers_a_cluster_with_the_form(browser) -> None:
    admin = browser("root", ["admin"])
    assert b"Register a cluster" in admin.get("/").content
    assert admin.get("/clusters/new/").status_code == 200
    form = {
        "name": "research",
        "scheduler": json.dumps({"backend": "slurm"}),
        "telemetry": json.dumps({"logs": {"type": "files", "path": "/shared"}}),
        "partitions_allowlist": "canary, gpu",
        "policy": "",
    }
    response = admin.post("/clusters/new/", form)
    assert response.status_code == 302
    assert response["Location"] == "/clusters/research/"
    cluster = Cluster.objects.get(name="research")
    assert cluster.partitions_allowlist == ["canary", "gpu"]
    assert AuditEntry.objects.get(verb="cluster.created").actor == "user:root"


def test_the_form_shows_each_problem_next_to_its_field(browser) -> None:
    admin = browser("root", ["admin"])
    form = {
        "name": "research",
        "scheduler": '{"backend": "slurm", "transport": "ssh"',
        "telemetry": json.dumps({"logs": {"type": "files", "path": "/x", "token": "hunter2"}}),
    }
    response = admin.post("/clusters/new/", form)
    assert response.status_code == 400
    assert "not valid JSON" in response.context["form"].errors["scheduler"][0]
    form["scheduler"] = json.dumps({"backend": "slurm", "transport": "ssh"})
    response = admin.post("/clusters/new/", form)
    errors = response.context["form"].errors
    assert any(e.startswith("ssh must be a JSON object") for e in errors["scheduler"])
    assert any(e.startswith("logs.token: an inline secret") for e in errors["telemetry"])
    assert not Cluster.objects.exists()


def test_an_admin_edits_a_registration_and_others_may_not(browser) -> None:
    services.create_cluster("user:root", "research", scheduler={"backend": "slurm"})
    operator = browser("olga", ["operator"])
    assert operator.get("/clusters/research/registration/").status_code == 403
    assert operator.post("/clusters/new/", {"name": "x"}).status_code == 403
    admin = browser("root", ["admin"])
    page = admin.get("/clusters/research/registration/")
    assert page.status_code == 200
    assert page.context["form"].fields["name"].disabled
    form = {
        "name": "ignored",
        "scheduler": json.dumps({"backend": "slurm"}),
        "telemetry": json.dumps(
            {"metrics": {"type": "none"}, "logs": {"type": "files", "path": "/shared"}}
        ),
        "partitions_allowlist": "",
        "policy": "",
    }
    saved = admin.post("/clusters/research/registration/", form, follow=True)
    assert "Saved: telemetry." in saved.content.decode()
    assert Cluster.objects.get(name="research").telemetry["metrics"] == {"type": "none"}
    again = admin.post("/clusters/research/registration/", form, follow=True)
    assert "Nothing changed." in again.content.decode()
    assert AuditEntry.objects.filter(verb="cluster.settings_changed").count() == 1


def test_the_registration_is_a_site_wide_admins_even_for_this_clusters_operator(browser) -> None:
    research = services.create_cluster("user:root", "research", scheduler={"backend": "slurm"})
    ours = UserFactory(username="ola")
    memberships.grant_role("test", ours, "operator", research)
    page, api = Client(), APIClient()
    page.force_login(ours)
    api.force_login(ours)
    assert b"Registration</a>" not in page.get("/clusters/research/").content
    assert page.get("/clusters/research/registration/").status_code == 403
    assert page.post("/clusters/new/", {"name": "x"}).status_code == 403
    put = api.put("/api/v1/clusters/research/", {"name": "research"}, format="json")
    assert put.status_code == 403
    # Their operator role still changes the policy here, but never where it connects.
    patch = api.patch(
        "/api/v1/clusters/research/", {"telemetry": {"metrics": {"type": "none"}}}, format="json"
    )
    assert patch.status_code == 403
    assert "admin role" in patch.json()["detail"]
    admin = browser("root", ["admin"])
    assert b"Registration</a>" in admin.get("/clusters/research/").content


# --- people ----------------------------------------------------------------------------------


def test_grant_role_creates_a_user_and_gives_roles_audited(tmp_path) -> None:
    password = tmp_path / "alice.pw"
    password.write_text("a long and unusual passphrase\n")
    out = run(
        "grant_role", "alice", "operator", "reviewer", "--create", "--password-file", str(password)
    )
    assert out == "alice holds operator on every cluster\nalice holds reviewer on every cluster"
    assert Client().login(username="alice", password="a long and unusual passphrase")
    revoked = run("grant_role", "alice", "reviewer", "--revoke")
    assert revoked == "alice no longer holds reviewer on every cluster"
    alice = get_user_model().objects.get(username="alice")
    assert roles_of(alice) == {"operator", "viewer"}
    assert verbs("user.created", "role.granted", "role.revoked") == [
        "user.created",
        "role.granted",
        "role.granted",
        "role.revoked",
    ]


def test_grant_role_gives_several_roles_on_one_cluster_or_none(tmp_path) -> None:
    services.create_cluster("test", "research")
    password = tmp_path / "rita.pw"
    password.write_text("a long and unusual passphrase\n")
    cluster = ("--cluster", "research")
    with pytest.raises(CommandError, match="admin is site-wide only"):
        run(
            "grant_role",
            "rita",
            "reviewer",
            "admin",
            *cluster,
            "--create",
            "--password-file",
            str(password),
        )
    assert not get_user_model().objects.filter(username="rita").exists()
    assert not AuditEntry.objects.filter(verb__in=["user.created", "role.granted"]).exists()
    run(
        "grant_role",
        "rita",
        "reviewer",
        "operator",
        *cluster,
        "--create",
        "--password-file",
        str(password),
    )
    rita = get_user_model().objects.get(username="rita")
    assert roles_of(rita) == set()
    assert roles_of(rita, Cluster.objects.get(name="research")) == {
        "reviewer",
        "operator",
        "viewer",
    }


def test_grant_role_refuses_an_unknown_user_and_a_weak_password(tmp_path) -> None:
    with pytest.raises(CommandError, match="no user 'bob': add --create"):
        run("grant_role", "bob", "viewer")
    weak = tmp_path / "weak"
    weak.write_text("password")
    with pytest.raises(CommandError, match="password refused"):
        run("grant_role", "bob", "viewer", "--create", "--password-file", str(weak))
    with pytest.raises(CommandError, match="invalid choice: 'wizard'"):
        run("grant_role", "bob", "wizard")


def test_the_readmes_registration_file_registers_as_it_says(tmp_path, settings) -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    document = re.search(r"```yaml\n(name: research\n.*?)```", readme, re.DOTALL)
    assert document, "the README lost its registration file"
    (tmp_path / "research.yaml").write_text(document[1])
    settings.SECRETS_DIR = str(tmp_path)
    for name in ("head-key", "head-known-hosts", "prom-password"):
        (tmp_path / name).write_text("x")
    (tmp_path / "site-ca.pem").write_text("a PEM bundle")
    path = str(tmp_path / "research.yaml")
    assert run("configure_cluster", "--file", path) == "registered research (monitor mode)"
    assert run("configure_cluster", "--file", path) == "research unchanged"
