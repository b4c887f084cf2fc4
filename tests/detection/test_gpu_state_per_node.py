"""What the metrics showed of each node's GPUs is kept per node: a large cluster's state never
becomes one value past MariaDB's default 16 MB packet, and a scrape rewrites only what changed."""

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection

from detection import scan
from detection import services as detection
from detection.core.sharding import shard_of
from detection.core.telemetry import Dcgm, MetricSample
from detection.models import Anomaly, NodeGpuState
from detection.sources.config import ClusterSources
from detection.sources.memory import MemoryMetrics
from fleet import services
from fleet.core.scheduler import ClusterSnapshot
from tests.factories import JobRecordFactory

pytestmark = pytest.mark.django_db
T0 = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
GPUS = 8


def gpu_samples(at: datetime, hosts: list[str], xid_on: dict[str, int] | None = None):
    xid_on = xid_on or {}
    for host in hosts:
        for gpu in range(GPUS):
            job = "700" if host == "gpu-00001" else None
            pci = f"00000000:{gpu + 16:02X}:00.0"
            xid = xid_on.get(host, 0) if gpu == 3 else 0
            yield MetricSample(at, host, gpu, Dcgm.XID_ERRORS, xid, job, pci)
            yield MetricSample(at, host, gpu, Dcgm.ECC_DBE_VOL_TOTAL, 0.0, job, pci)


@pytest.fixture
def large_cluster():
    cluster = services.create_cluster("test", "large", scheduler={"backend": "simulated"})
    job = JobRecordFactory(job_id="700", nodes=("gpu-00001", "gpu-00002"), start_time=T0)
    services.record_snapshot("controller:test", cluster, ClusterSnapshot(T0, (job,), ()))
    metrics = MemoryMetrics()
    return cluster, metrics, ClusterSources({}, metrics)


class Statements:
    def __init__(self) -> None:
        self.sizes: list[tuple[int, str]] = []

    def __call__(self, execute, sql, params, many, context):
        size = len(sql) + sum(len(str(p)) for p in (params or ()))
        self.sizes.append((size, sql))
        return execute(sql, params, many, context)

    def writes_to(self, table: str) -> list[str]:
        return [
            sql
            for _, sql in self.sizes
            if table in sql and sql.lstrip().split()[0] in ("INSERT", "UPDATE", "DELETE")
        ]


def scan_with(cluster, sources, at) -> Statements:
    statements = Statements()
    with connection.execute_wrapper(statements):
        scan.scan_cluster(cluster, at, sources)
    return statements


def test_the_gpus_of_thousands_of_nodes_are_stored_in_rows_far_below_the_packet_limit(
    large_cluster,
) -> None:
    cluster, metrics, sources = large_cluster
    hosts = [f"gpu-{n:05d}" for n in range(1, 4001)]
    metrics.publish(gpu_samples(T0, hosts))
    statements = scan_with(cluster, sources, T0 + timedelta(seconds=5))
    assert NodeGpuState.objects.filter(cluster=cluster).count() == len(hosts)
    # All the GPUs in one value would pass 2 MB here (and 16 MB at 25,000 nodes).
    assert max(size for size, _ in statements.sizes) < 512 * 1024


def test_a_scrape_that_shows_nothing_new_writes_nothing_and_a_change_rewrites_its_node_only(
    large_cluster,
) -> None:
    cluster, metrics, sources = large_cluster
    hosts = [f"gpu-{n:05d}" for n in range(1, 301)]
    metrics.publish(gpu_samples(T0, hosts))
    scan_with(cluster, sources, T0 + timedelta(seconds=5))

    metrics.publish(gpu_samples(T0 + timedelta(seconds=10), hosts))
    same = scan_with(cluster, sources, T0 + timedelta(seconds=15))
    assert same.writes_to("nodegpustate") == []

    metrics.publish(gpu_samples(T0 + timedelta(seconds=20), hosts, xid_on={"gpu-00001": 79}))
    changed = scan_with(cluster, sources, T0 + timedelta(seconds=25))
    assert len(changed.writes_to("nodegpustate")) == 1
    stored = NodeGpuState.objects.get(cluster=cluster, host="gpu-00001").gpus
    assert stored["3"]["xid"] == 79
    # What changed between the two scrapes is still found: Xid 79 takes its node out.
    anomaly = Anomaly.objects.get()
    assert (anomaly.category, anomaly.implicated_hosts) == ("gpu_hardware", ["gpu-00001"])


def test_a_node_whose_gpus_vanish_is_reported_and_its_row_goes(large_cluster) -> None:
    cluster, metrics, sources = large_cluster
    metrics.publish(gpu_samples(T0, ["gpu-00001", "gpu-00002"]))
    scan_with(cluster, sources, T0 + timedelta(seconds=5))
    metrics.publish(gpu_samples(T0 + timedelta(seconds=10), ["gpu-00002"]))
    scan_with(cluster, sources, T0 + timedelta(seconds=15))
    assert list(NodeGpuState.objects.values_list("host", flat=True)) == ["gpu-00002"]
    anomaly = Anomaly.objects.get()
    assert (anomaly.category, anomaly.implicated_hosts) == (
        "node_or_process_failure",
        ["gpu-00001"],
    )


def test_a_metric_label_too_long_for_a_host_name_is_not_kept(large_cluster) -> None:
    cluster, metrics, sources = large_cluster
    metrics.publish(gpu_samples(T0, ["gpu-00001", "x" * 300]))
    scan_with(cluster, sources, T0 + timedelta(seconds=5))
    assert list(NodeGpuState.objects.values_list("host", flat=True)) == ["gpu-00001"]


def test_shards_split_the_nodes_gpu_state_and_each_finds_its_own_nodes_faults(
    large_cluster,
) -> None:
    """With the scan in shards, each keeps (and compares) the GPU state of its own nodes, so
    the cluster-wide work is split, and a fault is found once, by the node's shard."""
    cluster, metrics, sources = large_cluster
    detection.update_detection_settings("test", cluster, scan_shards=3)
    hosts = [f"gpu-{n:05d}" for n in range(1, 301)]
    metrics.publish(gpu_samples(T0, hosts))
    read_by = {}
    for shard in range(3):
        scan.scan_cluster(cluster, T0 + timedelta(seconds=5), sources, shard=shard)
        read_by[shard] = set(NodeGpuState.objects.values_list("host", flat=True)) - set().union(
            *read_by.values()
        )
    assert set().union(*read_by.values()) == set(hosts)
    assert all(50 < len(own) < 150 for own in read_by.values()), read_by
    assert all(shard_of(h, 3) == shard for shard, own in read_by.items() for h in own)

    metrics.publish(gpu_samples(T0 + timedelta(seconds=10), hosts, xid_on={"gpu-00001": 79}))
    for shard in range(3):
        scan.scan_cluster(cluster, T0 + timedelta(seconds=15), sources, shard=shard)
    anomaly = Anomaly.objects.get()
    assert (anomaly.category, anomaly.implicated_hosts) == ("gpu_hardware", ["gpu-00001"])
