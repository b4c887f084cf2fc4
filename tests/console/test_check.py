"""The cluster page's Check button, the API's check verb and ``check_cluster`` on a cluster
whose logs are files on disk and whose scheduler cannot be reached (the Slurm side is tested
against a real cluster in tests/remediation/controller/test_add_your_cluster.py)."""

import io
import json
from datetime import UTC, datetime

import pytest
from django.core.management import call_command
from django.test import Client
from rest_framework.test import APIClient

from fleet import services
from fleet.core.scheduler import ClusterSnapshot
from fleet.models import AuditEntry
from recovery_console.console import memberships
from remediation import services as remediation
from tests.factories import JobRecordFactory, UserFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def site(tmp_path):
    logs = tmp_path / "slurm-logs"
    logs.mkdir()
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    (logs / "slurm-7001.out").write_text(f"{now} iteration 1/100 | lm loss: 2.1 |\n")
    cluster = services.create_cluster(
        "user:root",
        "site",
        telemetry={"logs": {"type": "files", "path": str(logs)}, "metrics": {"type": "none"}},
        # Nothing answers there: the check says so and carries on with what the console has.
        scheduler={"backend": "slurm", "slurm_conf": str(tmp_path / "missing" / "slurm.conf")},
    )
    job = JobRecordFactory(job_id="7001", nodes=("gpu-node-001",))
    services.record_snapshot(
        "controller:site", cluster, ClusterSnapshot(job.start_time, (job,), ())
    )
    remediation.issue_controller_token("user:root", cluster, "head-node")
    return cluster


def test_check_cluster_reports_stage_by_stage_and_writes_nothing(site) -> None:
    entries = AuditEntry.objects.count()
    out = io.StringIO()
    call_command("check_cluster", "site", "--json", stdout=out)
    document = json.loads(out.getvalue())
    stages = {f["stage"]: f for f in document["findings"]}
    assert document["status"] == "problem"
    assert stages["scheduler"]["status"] == "problem"
    assert stages["scheduler"]["summary"] == (
        f"cannot read Slurm on local: slurm_conf {site.scheduler['slurm_conf']} is not a file here"
    )
    assert stages["controller"]["summary"] == "no controller has sent a heartbeat yet"
    assert stages["logs job-files"]["status"] == "ok"
    assert stages["job 7001: visible"]["summary"] == "console: attempt 0, RUNNING"
    assert stages["job 7001: signal"]["summary"] == "job-files: 1 lines"
    assert AuditEntry.objects.count() == entries


def test_the_text_report_keeps_each_finding_with_its_details(site) -> None:
    out = io.StringIO()
    call_command("check_cluster", "site", "--job", "7001", stdout=out)
    text = out.getvalue()
    assert text.startswith("site (monitor mode, slurm)\n")
    assert "[     ok] job 7001: signal: job-files: 1 lines" in text
    # The controller's token was never used, so it may be the watchdog's as well.
    assert "[warning] watchdog: no watchdog has sent a heartbeat yet" in text
    assert "          never used: " in text
    assert "          on the head node: python -m remediation.controller watchdog" in text
    assert text.rstrip().endswith("overall: problem")


def test_the_check_button_is_for_operators(site) -> None:
    viewer, operator = Client(), Client()
    viewer.force_login(UserFactory(username="carol", roles=["viewer"]))
    operator.force_login(UserFactory(username="olga", roles=["operator"]))
    assert b'id="check-form"' not in viewer.get("/clusters/site/").content
    assert b'id="check-form"' in operator.get("/clusters/site/").content
    assert viewer.post("/clusters/site/check").status_code == 403
    assert operator.get("/clusters/site/check").status_code == 405
    page = operator.post("/clusters/site/check")
    assert page.status_code == 200
    html = page.content.decode()
    assert 'id="check-overall">problem<' in html
    assert "job 7001: signal" in html


def test_the_api_check_answers_the_same_findings(site) -> None:
    client = APIClient()
    client.force_login(UserFactory(username="olga", roles=["operator"]))
    response = client.post("/api/v1/clusters/site/check/")
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "problem"
    assert {"stage": "job 7001: signal", "status": "ok", "summary": "job-files: 1 lines",
            "details": []} in body["findings"]  # fmt: skip
    viewer = APIClient()
    viewer.force_login(UserFactory(username="carol", roles=["viewer"]))
    assert viewer.post("/api/v1/clusters/site/check/").status_code == 403


def test_an_operator_of_this_cluster_only_may_check_it_and_not_another(site) -> None:
    other = services.create_cluster("user:root", "other")
    ours, theirs = UserFactory(username="ola"), UserFactory(username="otto")
    memberships.grant_role("test", ours, "operator", site)
    memberships.grant_role("test", theirs, "operator", other)
    page, api = Client(), APIClient()
    page.force_login(ours)
    api.force_login(ours)
    assert b'id="check-form"' in page.get("/clusters/site/").content
    assert page.post("/clusters/site/check").status_code == 200
    assert api.post("/api/v1/clusters/site/check/").status_code == 200
    # Their operator role is on another cluster: here they are not even a viewer.
    page.force_login(theirs)
    api.force_login(theirs)
    assert page.post("/clusters/site/check").status_code == 403
    assert api.post("/api/v1/clusters/site/check/").status_code == 404
    assert page.post("/clusters/other/check").status_code == 200
    # A viewer here who operates elsewhere sees no button and may not check.
    memberships.grant_role("test", theirs, "viewer", site)
    assert b'id="check-form"' not in page.get("/clusters/site/").content
    assert page.post("/clusters/site/check").status_code == 403
    assert api.post("/api/v1/clusters/site/check/").status_code == 403
