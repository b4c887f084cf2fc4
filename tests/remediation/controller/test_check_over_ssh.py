"""``check_cluster`` reaches Slurm as the scheduler document says: over SSH to a real sshd,
with the key and known_hosts named under SECRETS_DIR, and the host key checked."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime

import pytest

from fleet import services
from remediation.checkup import check_cluster

from .lab import SlurmLab, SshServer

pytestmark = [pytest.mark.slurm, pytest.mark.django_db]


@pytest.fixture
def secrets(settings, tmp_path, sshd: SshServer):
    settings.SECRETS_DIR = str(tmp_path)
    shutil.copy(sshd.identity_file, tmp_path / "head-key")
    (tmp_path / "head-key").chmod(0o600)  # ssh refuses a key others can read
    shutil.copy(sshd.known_hosts_file, tmp_path / "head-known-hosts")
    (tmp_path / "impostor-known-hosts").write_text(
        f"[127.0.0.1]:{sshd.port} ssh-ed25519 "
        "AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl\n"
    )
    return tmp_path


def scheduler(slurm_lab: SlurmLab, sshd: SshServer, known_hosts: str) -> dict:
    return {
        "backend": "slurm",
        "transport": "ssh",
        "slurm_conf": str(slurm_lab.slurm_conf),
        "ssh": {
            "host": "127.0.0.1",
            "user": sshd.user,
            "port": sshd.port,
            "key": {"file": "head-key"},
            "known_hosts": {"file": known_hosts},
        },
    }


def findings_of(cluster) -> dict[str, tuple[str, str]]:
    return {f.stage: (f.status, f.summary) for f in check_cluster(cluster, datetime.now(UTC))}


def test_the_scheduler_is_read_over_ssh_and_an_impostor_is_refused(
    slurm_lab: SlurmLab, sshd: SshServer, secrets
) -> None:
    slurm_lab.reset()
    job_id = slurm_lab.submit_job(nodes=2, sleep=60)
    cluster = services.create_cluster(
        "user:root", "lab", scheduler=scheduler(slurm_lab, sshd, "head-known-hosts")
    )
    seen = findings_of(cluster)
    status, summary = seen["scheduler"]
    assert status == "ok"
    assert summary.startswith(f"read on ssh {sshd.user}@127.0.0.1:{sshd.port}: Slurm 22.5")
    assert "4 nodes" in summary
    assert seen[f"job {job_id}: visible"][0] == "problem"  # no controller reported it yet

    cluster = services.update_cluster_settings(
        "user:root", cluster, scheduler=scheduler(slurm_lab, sshd, "impostor-known-hosts")
    )
    status, summary = findings_of(cluster)["scheduler"]
    assert status == "problem"
    assert "Host key verification failed" in summary
    slurm_lab.reset()
