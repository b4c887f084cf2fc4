import pytest
from django.core.exceptions import ValidationError

from fleet import services
from fleet.models import AuditEntry, Cluster

pytestmark = pytest.mark.django_db


def test_a_new_cluster_starts_in_monitor_mode_and_is_audited() -> None:
    cluster = services.create_cluster("user:alice", "research", policy={"drain_after_strikes": 2})
    assert cluster.mode == "monitor"
    entry = AuditEntry.objects.get(verb="cluster.created")
    assert (entry.actor, entry.cluster_id) == ("user:alice", cluster.pk)
    assert entry.payload["policy"] == {"drain_after_strikes": 2}


def test_an_invalid_policy_document_is_refused_with_every_reason() -> None:
    with pytest.raises(ValidationError) as refused:
        services.create_cluster(
            "user:alice",
            "research",
            policy={"drain_after_strikes": 0, "max_restarts": 5, "circuit_breaker_max_share": "x"},
        )
    problems = refused.value.message_dict["policy"]
    assert "drain_after_strikes must be between 1 and 100" in problems
    assert "max_restarts is not a policy setting" in problems
    assert "circuit_breaker_max_share must be a number" in problems
    assert not Cluster.objects.exists()
    assert not AuditEntry.objects.exists()


def test_an_unknown_mode_is_refused() -> None:
    cluster = services.create_cluster("user:alice", "research")
    cluster.mode = "autopilot"
    with pytest.raises(ValidationError, match="unknown mode 'autopilot'"):
        cluster.save()


def test_unknown_telemetry_and_scheduler_types_are_refused() -> None:
    with pytest.raises(ValidationError) as refused:
        services.create_cluster(
            "user:alice",
            "research",
            telemetry={"logs": {"type": "splunk"}},
            scheduler={"backend": "pbs"},
        )
    assert "telemetry" in refused.value.message_dict
    assert "scheduler" in refused.value.message_dict


def test_a_settings_change_records_what_changed() -> None:
    cluster = services.create_cluster("user:alice", "research")
    services.update_cluster_settings(
        "user:bob", cluster, partitions_allowlist=["canary"], policy={"drain_after_strikes": 4}
    )
    entry = AuditEntry.objects.get(verb="cluster.settings_changed")
    assert entry.actor == "user:bob"
    assert entry.payload["partitions_allowlist"] == {"from": [], "to": ["canary"]}
    assert set(entry.payload) == {"partitions_allowlist", "policy"}


def test_a_refused_settings_change_leaves_the_cluster_and_trail_untouched() -> None:
    cluster = services.create_cluster("user:alice", "research", policy={"drain_after_strikes": 2})
    with pytest.raises(ValidationError):
        services.update_cluster_settings("user:bob", cluster, policy={"drain_after_strikes": -1})
    cluster.refresh_from_db()
    assert cluster.policy == {"drain_after_strikes": 2}
    assert AuditEntry.objects.count() == 1


def test_mode_cannot_be_changed_as_a_setting() -> None:
    cluster = services.create_cluster("user:alice", "research")
    with pytest.raises(ValueError, match="not a cluster setting: mode"):
        services.update_cluster_settings("user:bob", cluster, mode="action")
