"""The README's "Add your cluster", run as written: its shell block, with this test's paths and
console URL put in place of the README's and ``--once`` given to the controller and watchdog,
runs in bash with DEBUG off against a real local Slurm cluster and the test database. The
controller and the watchdog run as on a head node: no ``DATABASE_URL`` (nor Redis or Django
settings) in their environment and no installed package (``python -S``), so they reach the
console over HTTP with their token files only. Then ``check_cluster``'s report (the block's last
command) must show both heartbeats and the cluster's running job: visible in Slurm and on the
console, its output arriving."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection

from fleet.models import Cluster, ClusterMode
from recovery_console.console.roles import roles_of
from remediation.models import ControllerToken

from .lab import ROOT, SlurmLab, wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.django_db(transaction=True)]
MARKER = "<!-- add-your-cluster"
# What a head node has: the source tree and Python, none of the console's settings or packages.
HEAD_NODE = (
    "env -u DATABASE_URL -u REDIS_URL -u DJANGO_SETTINGS_MODULE -u SECRET_KEY -u AUDIT_HMAC_KEY "
    f"{sys.executable} -S -m remediation.controller"
)


def readme_block() -> str:
    text = (ROOT / "README.md").read_text()
    assert MARKER in text, "the README lost its 'Add your cluster' block"
    after = text[text.index(MARKER) :]
    match = re.search(r"```sh\n(.*?)```", after, re.DOTALL)
    assert match, "no sh block after the 'Add your cluster' marker"
    return match.group(1)


def as_run_here(block: str, replacements: dict[str, str]) -> str:
    for written, here in replacements.items():
        # A README edit that drops one of these would silently test something else.
        assert written in block, f"the README block no longer mentions {written!r}"
        block = block.replace(written, here)
    return "set -euo pipefail\n" + block


def database_url() -> str:
    db = connection.settings_dict
    if connection.vendor != "mysql":
        pytest.fail("this test shares its database with subprocesses: run it on MariaDB", False)
    password = f":{db['PASSWORD']}" if db["PASSWORD"] else ""
    return f"mysql://{db['USER']}{password}@{db['HOST']}:{db['PORT']}/{db['NAME']}"


def production_env() -> dict[str, str]:
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "DEBUG"))}
    return {
        **keep,
        "DATABASE_URL": database_url(),
        "DEBUG": "false",
        "SECRET_KEY": "add-your-cluster-test-key",
        # The test process's own key, so the entries the commands append chain and verify.
        "AUDIT_HMAC_KEY": settings.AUDIT_HMAC_KEY,
    }


def test_the_readme_commands_register_and_check_a_slurm_cluster(
    slurm_lab: SlurmLab, live_server, tmp_path: Path
) -> None:
    slurm_lab.reset()
    job_id = slurm_lab.submit_job(nodes=1, sleep=120)
    output = slurm_lab.output_path(job_id)
    wait_for(lambda: output.exists() and "task 0" in output.read_text(), 30, "the job's output")
    for directory in ("etc", "var"):
        (tmp_path / directory).mkdir()
    script = as_run_here(
        readme_block(),
        {
            "/etc/recovery-console/": f"{tmp_path}/etc/",
            "/var/lib/recovery-console/": f"{tmp_path}/var/",
            "/etc/slurm/slurm.conf": str(slurm_lab.slurm_conf),
            "/shared/slurm-logs": str(slurm_lab.jobs_dir),
            "https://console.example.org": live_server.url,
            "/opt/recovery-console": str(ROOT),
            "python3 -m remediation.controller controller": f"{HEAD_NODE} controller --once",
            "python3 -m remediation.controller watchdog": f"{HEAD_NODE} watchdog --once",
        },
    )
    done = subprocess.run(
        ["bash", "-c", script],
        cwd=ROOT,
        env=production_env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    report = done.stdout[done.stdout.index("research (monitor mode, slurm)") :]

    assert "[     ok] scheduler: read on local: Slurm 22.5" in report, report
    assert "[     ok] controller: head-node: last heartbeat" in report, report
    assert "[     ok] watchdog: watchdog: last heartbeat" in report, report
    assert f"[     ok] job {job_id}: visible: Slurm: RUNNING, console: attempt 0, RUNNING" in report
    signal = re.search(rf"\[     ok\] job {job_id}: signal: job-files: (\d+) lines", report)
    assert signal and int(signal[1]) >= 1, report
    assert f"[   info] job {job_id}: advice: no anomaly detected" in report

    cluster = Cluster.objects.get(name="research")
    assert cluster.mode == ClusterMode.MONITOR
    assert (tmp_path / "var" / "watchdog-research.json").exists()
    # The two the block issued, each heard with its role: neither issued itself another.
    tokens = {t.name: t.heartbeat.get("role") for t in ControllerToken.objects.all()}
    assert tokens == {"head-node": "controller", "watchdog": "watchdog"}
    people = get_user_model().objects
    assert people.get(username="admin").is_superuser
    assert {"operator", "reviewer"} <= roles_of(people.get(username="alice"))
    assert "approver" in roles_of(people.get(username="bob"))
    slurm_lab.reset()
