"""Each telemetry source read through a whole scan exactly as a cluster's settings name it:
Loki and VictoriaLogs (replayed as their HTTP APIs document them) with the cluster's tenant,
credentials by reference and query, and a real Prometheus behind HTTPS and basic auth scraping
dcgm-exporter's exposition text; the scan finds each recorded failure."""

import json
from datetime import UTC, datetime, timedelta

import pytest

from detection import scan
from detection import services as detection
from detection.models import Anomaly, AttemptMonitor, SourceCursor
from detection.sources.base import SourceUnavailable
from detection.sources.config import build_sources, check_telemetry
from fleet import services
from fleet.core.outbound import SecretStore
from fleet.core.scheduler import ClusterSnapshot
from fleet.models import Attempt
from tests.detection.sources.conftest import FIRST_SCRAPE_TIMEOUT
from tests.detection.sources.prom_support import (
    FakeDcgmExporter,
    FakeGpuNode,
    PrometheusProcess,
    WebSecurity,
)
from tests.detection.sources.replay import (
    LokiReplay,
    VictoriaLogsReplay,
    fixture_bytes,
    loki_entries_from_push,
)
from tests.factories import JobRecordFactory, UserFactory
from tests.test_settings import free_port

pytestmark = pytest.mark.django_db
# The recorded datasets: job 1234 on gpu-node-01/02 times out in a collective at 11:10:10.
STARTED = datetime(2026, 11, 29, 10, 55, tzinfo=UTC)
AFTER_THE_FAILURE = datetime(2026, 11, 29, 11, 15, tzinfo=UTC)
TOKEN = "loki-reader-token"  # noqa: S105 - a test credential, sent to the loopback replay


def cluster_reading(telemetry: dict):
    cluster = services.create_cluster("user:root", "site", telemetry=telemetry)
    job = JobRecordFactory(job_id="1234", nodes=("gpu-node-01", "gpu-node-02"), start_time=STARTED)
    services.record_snapshot("controller:site", cluster, ClusterSnapshot(STARTED, (job,), ()))
    return cluster


def assert_the_collective_timeout_was_found(source: str) -> None:
    anomaly = Anomaly.objects.get(attempt__job_id="1234")
    assert anomaly.category == "nccl_timeout_hang", anomaly.summary
    assert any(
        "Watchdog caught collective operation timeout" in e["text"] for e in anomaly.evidence
    )
    assert AttemptMonitor.objects.get(attempt__job_id="1234").lines_seen >= 10
    assert SourceCursor.objects.get(source=source).healthy


def test_a_scan_reads_loki_as_the_cluster_configures_it(replay_server, monkeypatch) -> None:
    monkeypatch.setenv("RC_SECRET_LOKI_TOKEN", TOKEN)
    entries = loki_entries_from_push_fixture()
    replay_server.app = LokiReplay(
        entries,
        query='{job="slurm"}',
        headers={"X-Scope-OrgID": "team-a", "Authorization": f"Bearer {TOKEN}"},
    )
    cluster = cluster_reading(
        {
            "logs": {
                "type": "loki",
                "url": replay_server.url,
                "tenant": "team-a",
                "query": '{job="slurm"}',
                "token": {"env": "RC_SECRET_LOKI_TOKEN"},
                "timeout": 5,
            },
            "metrics": {"type": "none"},
        }
    )
    summary = scan.scan_cluster(cluster, AFTER_THE_FAILURE)
    assert not summary.failed_sources, summary
    assert summary.lines == sum(1 for e in entries if e.labels.get("job") == "slurm")
    assert_the_collective_timeout_was_found("loki")
    # Every request carried the cluster's tenant and credential.
    assert all(r.headers.get("X-Scope-OrgID") == "team-a" for r in replay_server.requests)


def test_the_workload_page_shows_the_latest_output_from_loki(replay_server, client) -> None:
    replay_server.app = LokiReplay(loki_entries_from_push_fixture(), query='{job="slurm"}')
    cluster = cluster_reading({"logs": {"type": "loki", "url": replay_server.url}})
    attempt = Attempt.objects.get(cluster=cluster, job_id="1234")
    Attempt.objects.filter(pk=attempt.pk).update(ended_at=AFTER_THE_FAILURE)
    client.force_login(UserFactory(username="carol", roles=["viewer"]))
    page = client.get(f"/workloads/{attempt.workload_id}/_attempts").content.decode()
    assert "srun: Force Terminated StepId=1234.0" in page
    assert "epoch 3 batch 80 ok" not in page  # job 1235's line, in the same query's answer


def test_the_latest_output_says_why_a_source_cannot_be_read(client) -> None:
    cluster = cluster_reading({"logs": {"type": "loki", "url": f"http://127.0.0.1:{free_port()}"}})
    attempt = Attempt.objects.get(cluster=cluster, job_id="1234")
    client.force_login(UserFactory(username="carol", roles=["viewer"]))
    page = client.get(f"/workloads/{attempt.workload_id}/_attempts").content.decode()
    assert "The output could not be read: loki at http://127.0.0.1:" in page
    assert "connection refused" in page


def test_the_latest_output_reads_victorialogs_and_files_as_configured(
    replay_server, tmp_path
) -> None:
    rows = fixture_bytes("victorialogs/slurm_jobs.ndjson").splitlines()
    replay_server.app = VictoriaLogsReplay(rows, filter='{job="slurm"}')
    cluster = cluster_reading({"logs": {"type": "victorialogs", "url": replay_server.url}})
    tail = detection.job_output_tail(cluster, "1234", lines=3, until=AFTER_THE_FAILURE)
    assert tail.problem == "" and len(tail.lines) == 3
    assert tail.lines[-1].startswith("srun: ")
    (tmp_path / "train-1234.log").write_text("step 1\nstep 2\nCUDA out of memory\n")
    files = {"type": "files", "path": str(tmp_path), "pattern": "train-*.log"}
    cluster.telemetry = {"logs": {**files, "name_regex": r"^train-(?P<job>\d+)\.log$"}}
    assert detection.job_output_tail(cluster, "1234", lines=2).lines == [
        "step 2",
        "CUDA out of memory",
    ]


def test_a_scan_reads_victorialogs_as_the_cluster_configures_it(replay_server) -> None:
    rows = fixture_bytes("victorialogs/slurm_jobs.ndjson").splitlines()
    replay_server.app = VictoriaLogsReplay(
        rows, filter='{job="slurm"}', headers={"Authorization": "Basic cmVhZGVyOg=="}
    )
    cluster = cluster_reading(
        {
            "logs": {
                "type": "victorialogs",
                "url": replay_server.url,
                "query": '{job="slurm"}',
                "username": "reader",
            },
            "metrics": {"type": "none"},
        }
    )
    summary = scan.scan_cluster(cluster, AFTER_THE_FAILURE)
    assert not summary.failed_sources, summary
    assert summary.lines > 0
    assert_the_collective_timeout_was_found("victorialogs")


def test_a_wrong_credential_is_a_source_down_not_a_silent_empty_read(
    replay_server, monkeypatch
) -> None:
    monkeypatch.setenv("RC_SECRET_LOKI_TOKEN", "not-the-token")
    replay_server.app = LokiReplay(
        loki_entries_from_push_fixture(),
        query='{job="slurm"}',
        headers={"Authorization": f"Bearer {TOKEN}"},
    )
    cluster = cluster_reading(
        {
            "logs": {
                "type": "loki",
                "url": replay_server.url,
                "token": {"env": "RC_SECRET_LOKI_TOKEN"},
            },
            "metrics": {"type": "none"},
        }
    )
    summary = scan.scan_cluster(cluster, AFTER_THE_FAILURE + timedelta(minutes=1))
    [failure] = summary.failed_sources
    assert "HTTP 401" in failure
    assert not Anomaly.objects.exists()
    assert not SourceCursor.objects.get(source="loki").healthy


def loki_entries_from_push_fixture():
    return loki_entries_from_push(json.loads(fixture_bytes("loki/push_slurm_jobs.json")))


# --- Prometheus: a real server behind HTTPS and basic auth, scraping dcgm-exporter's text ---


@pytest.fixture(scope="module")
def secure_prometheus(tmp_path_factory):
    """Debian's Prometheus with a web config (its own CA-less certificate, basic auth),
    scraping one fake dcgm-exporter node that runs Slurm job 4242."""
    workdir = tmp_path_factory.mktemp("secure-prometheus")
    node = FakeGpuNode("gpu-node-11", "Hostname", gpus=4, job="4242")
    exporter = FakeDcgmExporter(node)
    security = WebSecurity(workdir)
    server = PrometheusProcess(workdir, [exporter.target], security)
    try:
        server.start()
        server.wait_until(
            "count(DCGM_FI_DEV_GPU_UTIL)",
            lambda r: bool(r) and r[0]["value"][1] == "4",
            FIRST_SCRAPE_TIMEOUT,
            "4 GPU series behind HTTPS and basic auth",
        )
        yield server, node, security
    finally:
        server.stop()
        exporter.close()


@pytest.fixture
def secrets_dir(tmp_path, settings, secure_prometheus):
    _, _, security = secure_prometheus
    (tmp_path / "prometheus-ca.pem").write_text(security.certificate.read_text())
    (tmp_path / "prometheus-password").write_text(security.PASSWORD + "\n")
    settings.SECRETS_DIR = str(tmp_path)
    return tmp_path


def prometheus_cluster(url: str, tmp_path, **metrics):
    now = datetime.now(UTC)
    logs = tmp_path / "logs"
    logs.mkdir(exist_ok=True)
    telemetry = {
        "logs": {"type": "files", "path": str(logs)},
        "metrics": {"type": "prometheus", "url": url, **metrics},
    }
    cluster = services.create_cluster("user:root", "gpus", telemetry=telemetry)
    job = JobRecordFactory(
        job_id="4242", nodes=("gpu-node-11",), start_time=now - timedelta(minutes=10)
    )
    services.record_snapshot("controller:gpus", cluster, ClusterSnapshot(now, (job,), ()))
    return cluster


SECURED = {
    "username": "reader",
    "password": {"file": "prometheus-password"},
    "ca": {"file": "prometheus-ca.pem"},
    "timeout": 5,
}


def test_a_scan_reads_a_secured_prometheus_as_configured(secure_prometheus, secrets_dir) -> None:
    server, node, _ = secure_prometheus
    cluster = prometheus_cluster(server.url, secrets_dir, **SECURED)
    first = scan.scan_cluster(cluster, datetime.now(UTC))
    assert not first.failed_sources, first
    assert SourceCursor.objects.get(source="metrics").healthy
    node.xid = {2: 79}  # GPU 2 falls off the bus; the next scrape carries it
    try:
        server.wait_until(
            "max(DCGM_FI_DEV_XID_ERRORS)", lambda r: r and r[0]["value"][1] == "79", 15, "Xid 79"
        )
        second = scan.scan_cluster(cluster, datetime.now(UTC))
    finally:
        node.xid = {}
    assert second.new_anomalies == 1, second
    anomaly = Anomaly.objects.get()
    assert (anomaly.category, anomaly.implicated_hosts) == ("gpu_hardware", ["gpu-node-11"])
    assert anomaly.attempt.job_id == "4242"


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"ca": None}, "CERTIFICATE_VERIFY_FAILED"),
        ({"password": {"env": "RC_SECRET_WRONG_PROM_PASSWORD"}}, "HTTP 401"),
    ],
)
def test_a_secured_prometheus_refuses_what_is_not_configured_right(
    secure_prometheus, secrets_dir, monkeypatch, changes, reason
) -> None:
    monkeypatch.setenv("RC_SECRET_WRONG_PROM_PASSWORD", "guess")
    server, _, _ = secure_prometheus
    metrics = {k: v for k, v in {**SECURED, **changes}.items() if v is not None}
    cluster = prometheus_cluster(server.url, secrets_dir, **metrics)
    summary = scan.scan_cluster(cluster, datetime.now(UTC))
    [failure] = summary.failed_sources
    assert reason in failure
    row = SourceCursor.objects.get(source="metrics")
    assert not row.healthy and reason in row.last_error


def test_a_timeout_and_a_ca_are_checked_as_they_are_saved() -> None:
    problems = check_telemetry(
        {
            "metrics": {
                "type": "prometheus",
                "url": "https://prometheus.example.org",
                "timeout": "5",
                "ca": "/etc/ssl/private/site-ca.pem",
            }
        }
    )
    assert problems == [
        "metrics.timeout must be a number of seconds above 0 and at most 120",
        'metrics.ca: name the secret by reference: {"env": NAME} or {"file": NAME}',
    ]


def test_a_ca_that_is_not_a_certificate_leaves_the_source_down_saying_why() -> None:
    store = SecretStore(environ={"RC_SECRET_SITE_CA": "not a certificate"})
    sources = build_sources(
        "gpus",
        {
            "metrics": {
                "type": "prometheus",
                "url": "https://prometheus.example.org",
                "ca": {"env": "RC_SECRET_SITE_CA"},
            }
        },
        "/nonexistent",
        store,
    )
    with pytest.raises(SourceUnavailable, match="the CA is not a PEM certificate"):
        sources.metrics.scrape()
