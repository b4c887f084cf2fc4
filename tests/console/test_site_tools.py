"""What a site plugs into its own tools: the Grafana dashboard and the Prometheus alert rules in
``deploy/`` use only metrics ``/metrics`` really exposes, and the rules pass promtool's check
and their own unit tests (a silent source, stuck advice, a heartbeat missing)."""

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
DASHBOARD = DEPLOY / "grafana" / "recovery-console.json"
ALERTS = DEPLOY / "prometheus" / "alerts.yml"
METRIC = re.compile(r"\brecovery_console_[a-z0-9_]+")
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count")}


def exposed_names() -> set[str]:
    """Every series name ``/metrics`` can carry: family names and their samples' suffixes
    (a family with no sample yet still declares its name)."""
    response = Client().get("/metrics")
    assert response.status_code == 200
    names = set()
    for family in text_string_to_metric_families(response.content.decode()):
        names.add(family.name)
        names.update(family.name + suffix for suffix in SUFFIXES.get(family.type, ()))
    return names


def dashboard_queries() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    queries = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    queries += [v["definition"] for v in dashboard["templating"]["list"] if "definition" in v]
    return queries


def alert_queries() -> list[str]:
    rules = yaml.safe_load(ALERTS.read_text())
    return [rule["expr"] for group in rules["groups"] for rule in group["rules"]]


@pytest.mark.django_db
def test_every_metric_the_dashboard_and_the_alerts_use_is_exposed() -> None:
    used = {m for query in dashboard_queries() + alert_queries() for m in METRIC.findall(query)}
    assert len(used) >= 12  # the dashboard covers the loop, not one corner of it
    assert used - exposed_names() == set()


def test_the_dashboard_is_importable_grafana_json() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] == "recovery-console"
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in panels:
        assert panel["datasource"]["uid"] == "${datasource}"
        refs = [t["refId"] for t in panel["targets"]]
        assert refs and len(refs) == len(set(refs)), panel["title"]
        assert '{cluster=~"$cluster"}' in panel["targets"][0]["expr"], panel["title"]


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:  # never a skip: CI installs Debian's prometheus package
        pytest.fail("promtool is missing: apt-get install --no-install-recommends prometheus")
    return path


def run_promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promtool(), *args], cwd=ALERTS.parent, capture_output=True, text=True, timeout=60
    )


def test_the_alert_rules_pass_promtool_check() -> None:
    checked = run_promtool("check", "rules", ALERTS.name)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 6 rules found" in checked.stdout


def test_each_alert_fires_on_the_series_it_is_written_for() -> None:
    tested = run_promtool("test", "rules", "alerts.test.yml")
    assert tested.returncode == 0, tested.stdout + tested.stderr
    names = {
        rule["alert"]
        for group in yaml.safe_load(ALERTS.read_text())["groups"]
        for rule in group["rules"]
    }
    unit_tests = (ALERTS.parent / "alerts.test.yml").read_text()
    assert {n for n in names if f"alertname: {n}" not in unit_tests} == set()
