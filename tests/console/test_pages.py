"""Console pages: login and roles, what each page shows, and the forms that call services."""

import json
import re
from datetime import UTC, datetime, timedelta

import pytest
from django.test import Client

from detection.models import DetectionSettings
from fleet import services
from fleet.core.scheduler import ClusterSnapshot, JobState, NodeRecord, NodeState
from fleet.models import AuditEntry, Cluster
from remediation import services as remediation
from remediation.models import NodeHealth
from tests.factories import JobRecordFactory, UserFactory
from tests.remediation.conftest import anomaly_on, running_attempt

pytestmark = pytest.mark.django_db
T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)

PAGES = [
    "/",
    "/clusters/research/",
    "/clusters/research/_card",
    "/clusters/research/_workloads",
    "/workloads/",
    "/clusters/research/nodes/",
    "/clusters/research/nodes/_table",
    "/clusters/research/settings/",
    "/clusters/research/mode/",
    "/clusters/research/mode/_status",
    "/audit/",
    "/audit/_chain",
    "/signals/",
    "/reviews/_agreement",
]


@pytest.fixture
def cluster() -> Cluster:
    cluster = services.create_cluster("user:alice", "research")
    failed = JobRecordFactory(
        job_id="81", name="llama", state=JobState.NODE_FAIL, reason="NodeFail", end_time=T0
    )
    # Twenty nodes: isolating one stays under the circuit breaker's share.
    nodes = [NodeRecord(f"n{i}", NodeState.ALLOCATED, gpus=8) for i in range(1, 21)]
    nodes.append(NodeRecord("gpu-node-001", NodeState.DOWN, reason="Not responding", gpus=8))
    services.record_snapshot("test", cluster, ClusterSnapshot(T0, (failed,), tuple(nodes)))
    return cluster


@pytest.fixture
def advised(cluster: Cluster):
    """A running attempt interrupted by an Xid on n2, and the policy's advice for it."""
    anomaly = anomaly_on(running_attempt(cluster))
    remediation.advise_cluster(cluster, T0 + timedelta(seconds=5))
    return anomaly


def client_for(*roles: str, username: str = "") -> Client:
    client = Client()
    client.force_login(UserFactory(username=username or "-".join(roles) or "nobody", roles=roles))
    return client


def text(response) -> str:
    return response.content.decode()


# --- login and roles ---------------------------------------------------------------------------


@pytest.mark.parametrize("path", PAGES)
def test_every_page_sends_anonymous_visitors_to_log_in(cluster, path: str) -> None:
    response = Client().get(path)
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/?next=")


@pytest.mark.parametrize("path", PAGES)
def test_a_viewer_can_read_every_page(cluster, advised, path: str) -> None:
    assert client_for("viewer").get(path).status_code == 200


def test_a_user_without_a_role_is_refused(cluster) -> None:
    assert client_for().get("/").status_code == 403


def test_logging_in_through_the_form_lands_on_the_overview(cluster) -> None:
    carol = UserFactory(username="carol", roles=["viewer"])
    carol.set_password("demo-password")
    carol.save()
    client = Client(enforce_csrf_checks=True)
    client.get("/accounts/login/")
    token = client.cookies["csrftoken"].value
    response = client.post(
        "/accounts/login/",
        {"username": "carol", "password": "demo-password", "csrfmiddlewaretoken": token},
    )
    assert response.status_code == 302 and response["Location"] == "/"
    assert "research" in text(client.get("/"))


def test_forms_without_a_csrf_token_are_refused(cluster) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(UserFactory(username="op", roles=["operator"]))
    response = client.post("/clusters/research/mode/request", {"note": "go"})
    assert response.status_code == 403


def test_only_reviewers_see_the_review_queue(cluster) -> None:
    assert client_for("viewer").get("/reviews/").status_code == 403
    assert client_for("reviewer").get("/reviews/").status_code == 200
    assert "Review queue" not in text(client_for("viewer").get("/"))


# --- overview, cluster, workloads ------------------------------------------------------------


def test_the_overview_shows_each_clusters_figures(cluster, advised) -> None:
    page = text(client_for("viewer").get("/"))
    assert 'href="/clusters/research/"' in page and "monitor mode" in page
    assert re.search(r'data-figure="open-anomalies"[^>]*>1<', page)
    assert re.search(r'data-figure="awaiting-review"[^>]*>1<', page)
    assert "0.0 / 0.0" in page  # detection latency p50 / p95: evidence and detection at T0


def test_the_cluster_page_shows_nodes_anomalies_and_bad_endings(cluster, advised) -> None:
    page = text(client_for("viewer").get("/clusters/research/"))
    assert "DOWN 1" in page
    assert "NodeFail" in page
    assert f'href="/anomalies/{advised.pk}/"' in page


def test_workloads_are_filtered_by_cluster_state_and_search(cluster, advised) -> None:
    other = services.create_cluster("user:alice", "other")
    job = JobRecordFactory(job_id="7", name="bert-finetune")
    services.record_snapshot("test", other, ClusterSnapshot(T0, (job,), ()))
    client = client_for("viewer")
    everything = text(client.get("/workloads/"))
    assert "llama" in everything and "bert-finetune" in everything
    assert "bert-finetune" not in text(client.get("/workloads/?cluster=research"))
    interrupted = text(client.get("/workloads/?state=interrupted"))
    assert ">llama<" in interrupted and "bert-finetune" not in interrupted
    assert "No workload matches" in text(client.get("/workloads/?q=nothing-like-this"))


def test_the_workload_page_embeds_its_timeline_and_losses(cluster, advised) -> None:
    workload = advised.workload
    page = text(client_for("viewer").get(f"/workloads/{workload.pk}/"))
    assert f'data-plotly="timeline-{workload.pk}"' in page
    assert "vendor/plotly.min.js" in page
    start = page.index(f'data-plotly="timeline-{workload.pk}">') + len(
        f'data-plotly="timeline-{workload.pk}">'
    )
    figure = json.loads(page[start : page.index("</script>", start)])
    names = {trace.get("name") for trace in figure["data"]}
    assert {"attempts", "anomaly", "advice"} <= names
    assert 'data-figure="gpu-hours-lost"' in page


def test_the_workload_partials_render_alone(cluster, advised) -> None:
    client = client_for("viewer")
    pk = advised.workload_id
    assert "Xid 79 on n2" in text(client.get(f"/workloads/{pk}/_attempts"))
    assert "data-plotly" in text(client.get(f"/workloads/{pk}/_timeline"))


def test_unknown_pages_are_404(cluster) -> None:
    client = client_for("viewer")
    for path in ("/clusters/nope/", "/workloads/999/", "/anomalies/999/", "/clusters/nope/mode/"):
        assert client.get(path).status_code == 404


# --- anomaly ---------------------------------------------------------------------------------


def test_the_anomaly_page_marks_the_root_cause_line_and_shows_the_advice(cluster) -> None:
    attempt = running_attempt(cluster)
    anomaly = anomaly_on(attempt)
    anomaly.evidence = [
        {
            "source": "log",
            "at": T0.isoformat(),
            "text": "NVRM: Xid 79 fell off",
            "host": "n2",
            "signature": "nvrm_xid",
        },
        {
            "source": "log",
            "at": (T0 + timedelta(seconds=1)).isoformat(),
            "text": "NCCL error: remote process exited",
            "signature": "nccl_remote_error",
        },
    ]
    anomaly.save()
    remediation.advise_cluster(cluster, T0 + timedelta(seconds=5))
    page = text(client_for("viewer").get(f"/anomalies/{anomaly.pk}/"))
    root = page.index("root cause</span>")
    assert root < page.index("NVRM: Xid 79 fell off") < page.index("NCCL error: remote")
    assert page.count('class="root-tag"') == 1
    assert "role-cascade" in page
    assert "Restart excluding nodes" in page and "excluding n2" in page


# --- nodes -----------------------------------------------------------------------------------


@pytest.fixture
def struck(cluster: Cluster):
    """As ``advised``, in action mode: only advice that is acted on strikes n2."""
    cluster.mode = "action"
    cluster.save()
    anomaly = anomaly_on(running_attempt(cluster))
    remediation.advise_cluster(cluster, T0 + timedelta(seconds=5))
    return anomaly


def test_an_operator_releases_a_suspect_node_with_a_reason(cluster, struck) -> None:
    assert NodeHealth.objects.get(cluster=cluster, name="n2").state == "suspect"
    client = client_for("operator", username="olga")
    page = text(client.get("/clusters/research/nodes/"))
    assert "/clusters/research/nodes/n2/release" in page
    response = client.post("/clusters/research/nodes/n2/release", {"reason": "GPU replaced"})
    assert response.status_code == 302
    health = NodeHealth.objects.get(cluster=cluster, name="n2")
    assert (health.state, health.released_by, health.release_reason) == (
        "healthy",
        "user:olga",
        "GPU replaced",
    )
    assert AuditEntry.objects.filter(verb="node.released", actor="user:olga").exists()


def test_a_release_without_a_reason_changes_nothing(cluster, struck) -> None:
    client = client_for("operator")
    response = client.post("/clusters/research/nodes/n2/release", {"reason": " "}, follow=True)
    assert "a reason is needed" in text(response)
    assert NodeHealth.objects.get(cluster=cluster, name="n2").state == "suspect"


def test_viewers_cannot_release_nodes_nor_see_the_button(cluster, advised) -> None:
    client = client_for("viewer")
    assert "/nodes/n2/release" not in text(client.get("/clusters/research/nodes/"))
    assert client.post("/clusters/research/nodes/n2/release", {"reason": "x"}).status_code == 403


def test_the_nodes_page_shows_what_monitor_mode_would_have_done(cluster, advised) -> None:
    page = text(client_for("viewer").get("/clusters/research/nodes/"))
    row = page[page.index('data-node="n2"') :]
    assert "+1 not acted on" in row[: row.index("</tr>")]
    assert NodeHealth.objects.get(cluster=cluster, name="n2").state == "healthy"


def test_nodes_are_filtered_by_health(cluster, struck) -> None:
    page = text(client_for("viewer").get("/clusters/research/nodes/?health=suspect"))
    assert 'data-node="n2"' in page and 'data-node="n1"' not in page


# --- audit -----------------------------------------------------------------------------------


def test_the_audit_trail_filters_pages_and_links_its_export(cluster, advised) -> None:
    client = client_for("viewer")
    page = text(client.get("/audit/?verb=anomaly.detected"))
    assert "anomaly.detected" in page and "node.observed</a>" not in page
    assert "format=csv" in page and "verb=anomaly.detected" in page
    newest = AuditEntry.objects.order_by("-sequence").first()
    paged = text(client.get(f"/audit/?cursor={newest.sequence}"))
    assert f'<td class="num">{newest.sequence}</td>' not in paged
    assert f'<td class="num">{newest.sequence - 1}</td>' in paged


def test_the_chain_status_says_the_trail_is_intact(cluster) -> None:
    page = text(client_for("viewer").get("/audit/_chain"))
    assert "Hash chain intact" in page


# --- cluster settings ------------------------------------------------------------------------


def settings_form(**changes: str) -> dict[str, str]:
    form = {
        "partitions_allowlist": "",
        "policy": "",
        "signatures": "",
        "progress_pattern": "",
        "hang": "",
        "straggler": "",
        "poll_seconds": "5",
        "scan_shards": "1",
    }
    return form | changes


def test_an_operator_changes_the_allowlist_and_policy(cluster) -> None:
    client = client_for("operator", username="olga")
    form = settings_form(partitions_allowlist="canary, gpu", policy='{"drain_after_strikes": 5}')
    response = client.post("/clusters/research/settings/", form)
    assert response.status_code == 302
    cluster.refresh_from_db()
    assert cluster.partitions_allowlist == ["canary", "gpu"]
    assert cluster.policy == {"drain_after_strikes": 5}
    entry = AuditEntry.objects.filter(verb="cluster.settings_changed").latest("sequence")
    assert entry.actor == "user:olga"


def test_bad_json_is_shown_next_to_its_field(cluster) -> None:
    client = client_for("operator")
    response = client.post("/clusters/research/settings/", settings_form(policy="{not json"))
    assert response.status_code == 400
    page = text(response)
    errors = page[page.index('data-errors-for="policy"') :]
    assert "not valid JSON" in errors[:300]


def test_a_policy_the_service_refuses_is_explained_at_the_policy_field(cluster) -> None:
    client = client_for("operator")
    form = settings_form(policy='{"drain_after_strikes": "many"}')
    response = client.post("/clusters/research/settings/", form)
    assert response.status_code == 400
    assert 'data-errors-for="policy"' in text(response)
    cluster.refresh_from_db()
    assert cluster.policy == {}


def test_a_bad_signature_leaves_the_other_settings_unchanged(cluster) -> None:
    client = client_for("operator")
    bad = json.dumps([{"name": "x", "pattern": "(", "kind": "crash"}])
    form = settings_form(partitions_allowlist="canary", signatures=bad)
    response = client.post("/clusters/research/settings/", form)
    assert response.status_code == 400
    assert 'data-errors-for="signatures"' in text(response)
    cluster.refresh_from_db()
    assert cluster.partitions_allowlist == []


def test_detector_settings_are_changed_at_runtime(cluster) -> None:
    client = client_for("operator")
    form = settings_form(hang='{"floor_seconds": 240}', poll_seconds="10")
    assert client.post("/clusters/research/settings/", form).status_code == 302
    settings = DetectionSettings.objects.get(cluster=cluster)
    assert (settings.hang, settings.poll_seconds) == ({"floor_seconds": 240}, 10.0)


def test_viewers_read_the_settings_but_cannot_change_them(cluster) -> None:
    client = client_for("viewer")
    page = text(client.get("/clusters/research/settings/"))
    assert "needs the operator role" in page and "Save settings" not in page
    response = client.post("/clusters/research/settings/", settings_form(policy="{}"))
    assert response.status_code == 403


# --- test signals ----------------------------------------------------------------------------

XID_LOG = (
    "step 100 loss 2.1\n"
    "[ 2535.679210] NVRM: Xid (PCI:0000:3a:00): 79, pid=1, name=python3, GPU has fallen off "
    "the bus.\n"
    "srun: error: gpu-node-004: task 0: Exited with exit code 1\n"
)


def test_a_pasted_log_is_diagnosed_with_its_evidence_lines(cluster) -> None:
    response = client_for("viewer").post("/signals/", {"text": XID_LOG, "tasks_per_node": 8})
    page = text(response)
    assert response.status_code == 200
    assert 'data-field="category">gpu_hardware' in page
    assert "nvrm_xid" in page
    assert "Nothing was skipped or repaired" in page


def test_an_uploaded_file_with_bad_bytes_says_what_was_skipped(cluster) -> None:
    from django.core.files.uploadedfile import SimpleUploadedFile

    upload = SimpleUploadedFile("slurm-1.out", XID_LOG.encode() + b"\x00\xff\xfe broken\n")
    response = client_for("viewer").post("/signals/", {"upload": upload, "tasks_per_node": 8})
    page = text(response)
    assert 'data-field="kind">crash' in page
    assert "Nul bytes stripped: 1" in page
    assert "Invalid utf8 replaced: 2" in page


def test_an_upload_past_the_limit_is_refused_by_name_and_never_diagnosed(cluster) -> None:
    from django.core.files.uploadedfile import SimpleUploadedFile

    big = XID_LOG.encode() * (11 * 1024 * 1024 // len(XID_LOG) + 1)
    upload = SimpleUploadedFile("slurm-1.out", big)
    response = client_for("viewer").post("/signals/", {"upload": upload, "tasks_per_node": 8})
    page = text(response)
    assert response.status_code == 400
    assert "The file is larger than 10.0\xa0MB" in page
    assert "data-field=" not in page  # no verdict
    assert "Paste a log or choose a file" not in page


def test_an_upload_streams_through_the_limit_without_being_held() -> None:
    """200 MB of multipart body parsed with the site's upload handlers: what is held stays
    near the limit's chunks, and the file is refused."""
    import io
    import itertools
    import tracemalloc

    from django.conf import settings
    from django.core.files.uploadhandler import load_handler
    from django.http.multipartparser import MultiPartParser
    from django.test import RequestFactory

    boundary = "----bound"
    head = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="upload"; '
        'filename="slurm-1.out"\r\nContent-Type: application/octet-stream\r\n\r\n'
    ).encode()
    tail = f"\r\n--{boundary}--\r\n".encode()
    size = 200 * 1024 * 1024

    class Body(io.RawIOBase):
        """The request body, made up as it is read."""

        def __init__(self) -> None:
            filler = (b"A" * 65536 for _ in range(size // 65536))
            self.chunks = itertools.chain([head], filler, [tail])
            self.pending = b""

        def readable(self) -> bool:
            return True

        def readinto(self, buffer) -> int:  # type: ignore[no-untyped-def]
            if not self.pending:
                self.pending = next(self.chunks, b"")
            n = min(len(buffer), len(self.pending))
            buffer[:n] = self.pending[:n]
            self.pending = self.pending[n:]
            return n

    request = RequestFactory().post("/signals/")
    meta = {
        "CONTENT_TYPE": f"multipart/form-data; boundary={boundary}",
        "CONTENT_LENGTH": str(len(head) + size + len(tail)),
    }
    handlers = [load_handler(path, request) for path in settings.FILE_UPLOAD_HANDLERS]
    tracemalloc.start()
    try:
        _, files = MultiPartParser(meta, io.BufferedReader(Body()), handlers).parse()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert "upload" not in files
    assert request.uploads_refused == ["upload"]
    assert peak < 32 * 1024 * 1024


def test_nothing_to_diagnose_is_an_error(cluster) -> None:
    response = client_for("viewer").post("/signals/", {"text": "", "tasks_per_node": 8})
    assert response.status_code == 400
    assert "Paste a log or choose a file" in text(response)


def test_a_clusters_custom_signatures_are_used_when_asked(cluster) -> None:
    from detection.services import update_detection_settings

    signature = {
        "name": "site_fabric_down",
        "pattern": "fabricd: link down",
        "kind": "crash",
        "category": "interconnect_network",
        "attribution": "interconnect",
        "role": "initiating",
    }
    update_detection_settings("test", cluster, signatures=[signature])
    client = client_for("viewer")
    form = {"text": "fabricd: link down\n", "tasks_per_node": 8}
    assert "site_fabric_down" not in text(client.post("/signals/", form))
    assert "site_fabric_down" in text(client.post("/signals/", form | {"cluster": "research"}))


def test_the_page_decides_under_the_chosen_clusters_policy_and_says_what_to_change(
    cluster,
) -> None:
    oom = {"text": "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB\n"}
    form = oom | {"tasks_per_node": 8}
    client = client_for("viewer")
    default = text(client.post("/signals/", form))
    assert 'data-field="action">stop' in default
    assert "Rule <code>cuda_oom</code>" in default
    assert "lower the micro-batch size" in default
    services.update_cluster_settings("test", cluster, policy={"rules": {"cuda_oom": "restart"}})
    lenient = text(client.post("/signals/", form | {"cluster": "research"}))
    assert 'data-field="action">restart' in lenient


def test_the_node_whose_log_it_is_names_the_host_of_a_kernel_line(cluster) -> None:
    form = {"text": XID_LOG, "tasks_per_node": 8, "host": "gpu-node-004"}
    page = text(client_for("viewer").post("/signals/", form))
    assert 'data-field="implicated_hosts">gpu-node-004' in page
    assert 'data-field="action">restart_excluding_node' in page
