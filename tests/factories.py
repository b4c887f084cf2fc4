"""factory-boy factories for rows that tests need in bulk. Writes that carry meaning (and an
audit entry) go through services instead."""

from datetime import UTC, datetime, timedelta

import factory
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group

from detection.models import Anomaly
from fleet.core.scheduler import JobRecord, JobState
from fleet.models import Attempt, Cluster, Node, Workload
from remediation.models import Advice

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


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


# --- people, and rows for the console's reviews, API and metrics -----------------------------


class UserFactory(factory.django.DjangoModelFactory):
    """A user; ``UserFactory(roles=["operator", "reviewer"])`` puts them in those groups."""

    class Meta:
        model = get_user_model()
        django_get_or_create = ("username",)
        skip_postgeneration_save = True

    username = factory.Sequence(lambda n: f"user{n}")
    email = factory.LazyAttribute(lambda u: f"{u.username}@example.org")
    password = factory.django.Password(None)  # unusable: tests log in with force_login

    @factory.post_generation
    def roles(self, create, extracted, **kwargs):
        if create and extracted:
            self.groups.add(*Group.objects.filter(name__in=extracted))


class WorkloadFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Workload

    cluster = factory.SubFactory(ClusterFactory)
    key = factory.Sequence(lambda n: f"llama-{n}")
    state = "running"
    created_at = T0
    updated_at = T0


class AttemptFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Attempt

    workload = factory.SubFactory(WorkloadFactory)
    cluster = factory.SelfAttribute("workload.cluster")
    job_id = factory.Sequence(lambda n: str(5000 + n))
    attempt_index = 0
    name = factory.SelfAttribute("workload.key")
    partition = "gpu"
    state = "RUNNING"
    nodes = ["n1", "n2"]
    first_seen_at = T0
    started_at = T0


class AnomalyFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Anomaly

    attempt = factory.SubFactory(AttemptFactory)
    workload = factory.SelfAttribute("attempt.workload")
    cluster = factory.SelfAttribute("attempt.cluster")
    family = "interruption"
    kind = "crash"
    category = "gpu_hardware"
    attribution = "hardware"
    confidence = 0.95
    confidence_label = "established"
    root_cause = "nvrm_xid:n2"
    implicated_hosts = ["n2"]
    summary = "Xid 79 on n2"
    evidence = [{"source": "log", "text": "NVRM: Xid (PCI:0000:3b:00): 79", "host": "n2"}]
    first_evidence_at = T0
    detected_at = T0 + timedelta(seconds=4)
    updated_at = T0 + timedelta(seconds=4)


class AdviceFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Advice

    anomaly = factory.SubFactory(AnomalyFactory)
    attempt = factory.SelfAttribute("anomaly.attempt")
    workload = factory.SelfAttribute("anomaly.workload")
    cluster = factory.SelfAttribute("anomaly.cluster")
    action = "restart_excluding_node"
    desired_state = "running_excluding"
    exclude_nodes = ["n2"]
    reasons = ["Xid 79 on n2 is established"]
    category = "gpu_hardware"
    attribution = "hardware"
    confidence_label = "established"
    state = "proposed"
    decided_at = T0 + timedelta(seconds=5)
    updated_at = T0 + timedelta(seconds=5)


class NodeFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Node

    cluster = factory.SubFactory(ClusterFactory)
    name = factory.Sequence(lambda n: f"n{n}")
    state = "IDLE"
    gpus = 8
    partitions = ["gpu"]
    updated_at = T0
