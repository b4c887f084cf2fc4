"""What a cluster's registration may say (plain Python: the scheduler document, the name, the
allowlist and the registration file)."""

import pytest
import yaml

from fleet.core.outbound import SecretStore
from fleet.core.registration import (
    DocumentError,
    name_problem,
    partitions_problems,
    registration_from_text,
    scheduler_problems,
)


@pytest.fixture
def secrets(tmp_path):
    (tmp_path / "head-key").write_text("key")
    (tmp_path / "head-known-hosts").write_text("host key")
    return SecretStore(directory=str(tmp_path))


SSH = {
    "host": "slurm-head.example.org",
    "user": "rc",
    "port": 2222,
    "key": {"file": "head-key"},
    "known_hosts": {"file": "head-known-hosts"},
}


@pytest.mark.parametrize(
    "document",
    [
        {},
        {"backend": "simulated", "simulation": {"seed": 3}},
        {"backend": "slurm"},
        {"backend": "slurm", "transport": "local", "slurm_conf": "/etc/slurm/slurm.conf"},
        {"backend": "slurm", "transport": "ssh", "ssh": SSH},
    ],
)
def test_these_scheduler_documents_are_accepted(document, secrets) -> None:
    assert scheduler_problems(document, secrets) == []


@pytest.mark.parametrize(
    ("document", "problem"),
    [
        ([], "must be a JSON object"),
        ({"backend": "pbs"}, "backend 'pbs' is not one of simulated, slurm"),
        ({"backend": "slurm", "transport": "rsh"}, "transport 'rsh' is not one of local, ssh"),
        ({"backend": "slurm", "host": "x"}, "host is not a setting of a slurm scheduler"),
        ({"backend": "slurm", "slurm_conf": "slurm.conf"}, "slurm_conf must be an absolute path"),
        ({"backend": "slurm", "transport": "ssh"}, "ssh must be a JSON object with host"),
        ({"backend": "slurm", "ssh": SSH}, 'ssh is read only with "transport": "ssh"'),
        ({"backend": "simulated", "simulation": 3}, "simulation must be a JSON object"),
    ],
)
def test_a_bad_scheduler_document_is_refused_naming_the_key(document, problem, secrets) -> None:
    problems = scheduler_problems(document, secrets)
    assert any(p.startswith(problem) for p in problems), problems


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"host": "-oProxyCommand=evil"}, "ssh.host must be a host name or address"),
        ({"user": "Root User"}, "ssh.user must be a user name"),
        ({"port": 70000}, "ssh.port must be a TCP port"),
        ({"port": True}, "ssh.port must be a TCP port"),
        ({"key": "/root/.ssh/id_ed25519"}, "ssh.key: name a file under SECRETS_DIR"),
        ({"key": {"env": "RC_SECRET_KEY"}}, "ssh.key: name a file under SECRETS_DIR"),
        ({"known_hosts": {"file": "../etc/ssh"}}, "ssh.known_hosts: a file name under"),
        ({"known_hosts": {"file": "missing"}}, None),
        ({"password": {"env": "RC_SECRET_X"}}, "ssh.password is not a setting of ssh"),
    ],
)
def test_each_ssh_setting_is_checked(change, problem, secrets) -> None:
    document = {"backend": "slurm", "transport": "ssh", "ssh": {**SSH, **change}}
    problems = scheduler_problems(document, secrets)
    if problem is None:
        # A file not there yet is found when the scheduler is read, like any secret file.
        assert problems == []
    else:
        assert any(p.startswith(problem) for p in problems), problems


def test_missing_ssh_settings_are_each_named(secrets) -> None:
    problems = scheduler_problems({"backend": "slurm", "transport": "ssh", "ssh": {}}, secrets)
    assert problems == [f"ssh.{key} is required" for key in ("host", "user", "key", "known_hosts")]


@pytest.mark.parametrize(
    ("name", "ok"),
    [
        ("research", True),
        ("gpu-a100-2", True),
        ("Research", False),
        ("a_b", False),
        ("-x", False),
        ("new", False),
        ("", False),
        ("x" * 64, False),
    ],
)
def test_a_cluster_name_is_a_lower_case_slug(name, ok) -> None:
    assert (name_problem(name) is None) is ok


def test_partitions_are_names() -> None:
    assert partitions_problems(["canary", "gpu.a100"]) == []
    assert partitions_problems("canary") == ["must be a list of partition names"]
    assert partitions_problems(["ok", "two words", 3]) == [
        "[1] 'two words' is not a partition name (letters, digits, _ . -)",
        "[2] 3 is not a partition name (letters, digits, _ . -)",
    ]


def test_a_registration_file_is_json_or_yaml() -> None:
    as_json = registration_from_text('{"name": "research", "scheduler": {"backend": "slurm"}}')
    as_yaml = registration_from_text(
        "name: research\nscheduler:\n  backend: slurm\n", yaml.safe_load
    )
    assert as_json == as_yaml == {"name": "research", "scheduler": {"backend": "slurm"}}


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("[1, 2]", "the document must be an object"),
        ("name: x\nmode: action\n", "not a registration setting: mode"),
        ("name: [unclosed\n", "neither JSON nor YAML"),
    ],
)
def test_a_bad_registration_file_says_why(text, problem) -> None:
    with pytest.raises(DocumentError, match=problem):
        registration_from_text(text, yaml.safe_load)


@pytest.mark.parametrize(
    ("host", "allowed", "ok"),
    [
        ("slurm-head.example.org", [], True),
        ("slurm-head.example.org", ["slurm-head.example.org"], True),
        ("slurm-head.example.org", ["*.example.org"], True),
        ("SLURM-HEAD.example.org", ["slurm-head.example.org"], True),
        ("slurm-head.example.org", ["loki.example.org"], False),
        ("10.0.0.9", ["*.example.org"], False),
        ("[fd00::9]", ["fd00::9"], True),
    ],
)
def test_an_ssh_scheduler_host_must_be_an_allowed_outbound_host(host, allowed, ok, secrets) -> None:
    document = {"backend": "slurm", "transport": "ssh", "ssh": {**SSH, "host": host}}
    problems = scheduler_problems(document, secrets, allowed)
    if ok:
        assert problems == []
    else:
        assert problems == [f"ssh.host: host {host} is not in OUTBOUND_ALLOWED_HOSTS"]
