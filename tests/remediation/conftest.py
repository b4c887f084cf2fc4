from datetime import UTC, datetime

import pytest

from detection.anomalies import record_interruption
from detection.core.interruption import Confidence, Evidence, Interruption
from fleet import services
from fleet.core.scheduler import ClusterSnapshot, NodeRecord, NodeState
from fleet.core.taxonomy import Attribution, Category, ConfidenceLabel, Kind
from fleet.models import Attempt
from tests.factories import JobRecordFactory

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
NODES = tuple(f"n{i}" for i in range(1, 21))


@pytest.fixture
def cluster():
    cluster = services.create_cluster("user:alice", "research")
    nodes = tuple(NodeRecord(n, NodeState.ALLOCATED, gpus=8, partitions=("gpu",)) for n in NODES)
    services.record_snapshot("test", cluster, ClusterSnapshot(T0, (), nodes))
    return cluster


def running_attempt(
    cluster, job_id="100", nodes=("n1", "n2"), comment='{"workload": "llama"}', restart=0
):
    job = JobRecordFactory(job_id=job_id, nodes=nodes, comment=comment, restart_count=restart)
    services.record_snapshot("test", cluster, ClusterSnapshot(T0, (job,), ()))
    return Attempt.objects.get(cluster=cluster, job_id=job_id, attempt_index=restart)


def anomaly_on(
    attempt,
    *,
    category="gpu_hardware",
    attribution="hardware",
    hosts=("n2",),
    label="established",
    root_cause="nvrm_xid:n2",
    at=T0,
    node_local=None,
    pci_ids=(),
):
    """An anomaly as detection stores it; the signature is the root cause's first part, and
    GPU hardware evidence is node-local unless said otherwise (an Xid 79, by default)."""
    anomaly, _ = record_interruption(
        attempt,
        Interruption(
            kind=Kind.CRASH,
            category=Category(category),
            attribution=Attribution(attribution),
            confidence=Confidence(0.95, ConfidenceLabel(label)),
            hosts=tuple(hosts),
            root_cause=root_cause,
            summary="Xid 79 on n2",
            explanation="Xid 79 on n2",
            evidence=(Evidence(text="NVRM: Xid (PCI:0000:3b:00): 79", host="n2"),),
            first_evidence_at=at,
            signature=root_cause.split(":", 1)[0],
            node_local=category == "gpu_hardware" if node_local is None else node_local,
            pci_ids=tuple(pci_ids),
        ),
        at,
    )
    return anomaly
