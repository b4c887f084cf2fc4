"""factory-boy factories for rows that tests need in bulk. Writes that carry meaning (and an
audit entry) go through services instead."""

from datetime import UTC, datetime

import factory

from detection.telemetry import JobRecord, JobState
from recovery_console.models import Cluster


class ClusterFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Cluster

    name = factory.Sequence(lambda n: f"cluster-{n}")


class JobRecordFactory(factory.Factory):
    class Meta:
        model = JobRecord

    job_id = factory.Sequence(lambda n: str(1000 + n))
    name = "llama-pretrain"
    state = JobState.RUNNING
    partition = "gpu"
    nodes = ("gpu-node-001", "gpu-node-002")
    start_time = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
