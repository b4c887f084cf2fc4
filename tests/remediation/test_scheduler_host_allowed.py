"""The scheduler's SSH host is an outbound connection like a telemetry URL: with
OUTBOUND_ALLOWED_HOSTS set it must be one of them, when the registration is saved and again
each time the console would connect (the list may have been narrowed since)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.core.exceptions import ValidationError

from fleet import services
from remediation.checkup import check_cluster

pytestmark = pytest.mark.django_db


def ssh_scheduler(host: str) -> dict:
    return {
        "backend": "slurm",
        "transport": "ssh",
        "ssh": {
            "host": host,
            "user": "rc",
            "key": {"file": "head-key"},
            "known_hosts": {"file": "head-known-hosts"},
        },
    }


@pytest.fixture
def secrets(settings, tmp_path):
    settings.SECRETS_DIR = str(tmp_path)
    (tmp_path / "head-key").write_text("key")
    (tmp_path / "head-known-hosts").write_text("host key")
    return tmp_path


def test_a_registration_naming_an_ssh_host_outside_the_allowed_ones_is_refused(
    settings, secrets
) -> None:
    settings.OUTBOUND_ALLOWED_HOSTS = ["*.hpc.example.org"]
    with pytest.raises(ValidationError) as refused:
        services.create_cluster("user:root", "lab", scheduler=ssh_scheduler("intranet.example.com"))
    assert "ssh.host: host intranet.example.com is not in OUTBOUND_ALLOWED_HOSTS" in str(
        refused.value
    )
    cluster = services.create_cluster(
        "user:root", "lab", scheduler=ssh_scheduler("head.hpc.example.org")
    )
    assert cluster.scheduler["ssh"]["host"] == "head.hpc.example.org"


def test_a_host_no_longer_allowed_is_not_connected_to(settings, secrets) -> None:
    cluster = services.create_cluster(
        "user:root", "lab", scheduler=ssh_scheduler("head.hpc.example.org")
    )
    settings.OUTBOUND_ALLOWED_HOSTS = ["loki.example.org"]
    stages = {f.stage: f for f in check_cluster(cluster, datetime.now(UTC))}
    assert stages["scheduler"].status == "problem"
    assert "head.hpc.example.org is not in OUTBOUND_ALLOWED_HOSTS" in stages["scheduler"].summary
