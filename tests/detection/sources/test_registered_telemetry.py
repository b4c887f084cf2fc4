"""A telemetry document as a cluster's registration gives it: a real cluster never falls back to
the simulator's files, and servers take a timeout and the site's own CA (a real TLS server)."""

import ssl
import subprocess
import threading
from datetime import UTC, datetime
from pathlib import Path

import pytest

from detection.sources import LokiSource, PrometheusSource, SourceUnavailable
from detection.sources.config import build_sources, check_telemetry
from fleet.core.outbound import NO_REDIRECTS, SecretStore
from tests.detection.sources.listener import Listener

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def test_a_real_cluster_names_each_sources_type() -> None:
    assert check_telemetry({"logs": {"path": "/x"}}, backend="slurm") == [
        "logs.type is required (files, loki, victorialogs)"
    ]
    assert check_telemetry({"metrics": {"type": "simulated"}}, backend="slurm") == [
        "metrics.type simulated reads the simulated cluster's files; a slurm cluster names "
        "its own source (prometheus, none)"
    ]
    assert check_telemetry({"logs": {"path": "/x"}}) == [
        "logs.path is not a setting of a simulated source (nothing but type)"
    ]


def test_without_telemetry_a_real_cluster_reads_nothing_and_a_simulated_one_its_files(
    tmp_path,
) -> None:
    real = build_sources("research", {}, tmp_path, backend="slurm")
    assert (real.logs, real.metrics) == ({}, None)
    simulated = build_sources("demo", {}, tmp_path)
    assert set(simulated.logs) == {"job-files", "node-logs"}
    assert simulated.metrics is not None


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ({"timeout": 0}, "metrics.timeout must be a number of seconds above 0 and at most 120"),
        ({"timeout": "5"}, "metrics.timeout must be a number"),
        ({"ca": "/etc/ssl/ca.pem"}, "metrics.ca: name the secret by reference"),
        ({"ca": {"file": "../ca.pem"}}, "metrics.ca: a file name under SECRETS_DIR"),
    ],
)
def test_timeout_and_ca_are_checked(spec, problem, tmp_path) -> None:
    document = {"metrics": {"type": "prometheus", "url": "https://prom.example.org", **spec}}
    problems = check_telemetry(document, SecretStore(directory=str(tmp_path)))
    assert any(p.startswith(problem) for p in problems), problems


@pytest.fixture(scope="module")
def tls_pair(tmp_path_factory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (the site's own CA) and its key."""
    workdir = tmp_path_factory.mktemp("tls")
    cert, key = workdir / "ca.pem", workdir / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True,
        capture_output=True,
        timeout=60,
    )  # fmt: skip
    return cert, key


@pytest.fixture
def https_loki(tls_pair):
    cert, key = tls_pair
    listener = Listener()
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    listener.server.socket = context.wrap_socket(listener.server.socket, server_side=True)
    thread = threading.Thread(target=listener.server.serve_forever, daemon=True)
    thread.start()
    yield f"https://127.0.0.1:{listener.server.server_port}"
    listener.server.shutdown()
    listener.server.server_close()


def test_an_https_server_is_trusted_through_the_sites_ca_only(https_loki, tls_pair, tmp_path):
    (tmp_path / "site-ca.pem").write_text(tls_pair[0].read_text())
    secrets = SecretStore(directory=str(tmp_path))
    logs = {"type": "loki", "url": https_loki, "ca": {"file": "site-ca.pem"}, "timeout": 3}
    trusted = build_sources("research", {"logs": logs}, tmp_path, secrets, backend="slurm")
    source = trusted.logs["loki"]
    assert isinstance(source, LokiSource)
    assert source.client.timeout == 3
    assert source.fetch(None, NOW).lines == ()
    without_ca = {k: v for k, v in logs.items() if k != "ca"}
    plain = build_sources("research", {"logs": without_ca}, tmp_path, secrets, backend="slurm")
    with pytest.raises(SourceUnavailable, match="CERTIFICATE_VERIFY_FAILED"):
        plain.logs["loki"].fetch(None, NOW)


def test_prometheus_takes_the_timeout_and_ca_and_a_bad_bundle_is_a_source_down(
    tls_pair, tmp_path
) -> None:
    (tmp_path / "site-ca.pem").write_text(tls_pair[0].read_text())
    (tmp_path / "garbage.pem").write_text("not a certificate")
    secrets = SecretStore(directory=str(tmp_path))
    metrics = {"type": "prometheus", "url": "https://prom.example.org", "timeout": 2.5}
    good = build_sources(
        "r", {"metrics": {**metrics, "ca": {"file": "site-ca.pem"}}}, tmp_path, secrets
    ).metrics
    assert isinstance(good, PrometheusSource)
    assert good.client.timeout == 2.5
    assert good.client.opener is not NO_REDIRECTS
    bad = build_sources(
        "r", {"metrics": {**metrics, "ca": {"file": "garbage.pem"}}}, tmp_path, secrets
    ).metrics
    with pytest.raises(SourceUnavailable, match="the CA is not a PEM certificate"):
        bad.scrape(NOW)
