"""The rules for the hosts the console connects to and the secrets it names (plain Python)."""

import pytest

from fleet.core.outbound import (
    REDACTED,
    SecretStore,
    host_allowed,
    redacted,
    url_problem,
)


@pytest.mark.parametrize(
    ("host", "allowed", "ok"),
    [
        ("loki.example.org", [], True),
        ("loki.example.org", ["loki.example.org"], True),
        ("LOKI.example.org.", ["loki.example.org"], True),
        ("a.b.example.org", ["*.example.org"], True),
        ("example.org", ["*.example.org"], False),
        ("evilexample.org", ["*.example.org"], False),
        ("loki.example.org.evil.net", ["loki.example.org"], False),
        ("127.0.0.1", ["loki.example.org"], False),
    ],
)
def test_outbound_hosts_are_exact_names_or_sub_domains(host, allowed, ok) -> None:
    assert host_allowed(host, allowed) is ok


def test_a_url_is_http_with_a_host_and_no_credentials() -> None:
    assert url_problem("https://loki.example.org:3100/prefix", []) is None
    assert url_problem("http://loki:port", []) is not None
    assert url_problem("javascript:alert(1)", []).startswith("the scheme must be http or https")
    assert url_problem(None, []) == "must be a URL"


def test_env_references_need_the_prefix_and_files_stay_in_the_directory(tmp_path) -> None:
    store = SecretStore("RC_SECRET_", str(tmp_path), environ={"RC_SECRET_A": " a \n"})
    assert store.read({"env": "RC_SECRET_A"}) == "a"
    assert store.problem({"env": "DATABASE_URL"}) == "the variable must start with RC_SECRET_"
    assert store.problem({"env": "RC_SECRET_A", "file": "x"}) is not None
    for name in ("/etc/passwd", "../x", "a/../../x", ".", ""):
        assert store.problem({"file": name}) is not None, name
    assert SecretStore().problem({"file": "x"}) == "file references need SECRETS_DIR to be set"


def test_what_viewers_see_keeps_references_and_hides_the_rest() -> None:
    document = {
        "logs": {"token": {"env": "RC_SECRET_T"}, "password": "p", "password_file": "/x"},
        "url": "http://u:p@h/x",
    }
    assert redacted(document) == {
        "logs": {"token": {"env": "RC_SECRET_T"}, "password": REDACTED, "password_file": REDACTED},
        "url": f"http://{REDACTED}@h/x",
    }
