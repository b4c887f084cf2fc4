"""Upgrading a database written before the console moved out of the fleet's app keeps its rows:
reviews, mode requests and notification channels, their permissions, and each attempt's
earliest failure evidence."""

from datetime import UTC, datetime

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

BEFORE = [
    ("recovery_console", "0006_audit_indexes"),
    ("detection", "0002_dispatch_cycles_every_second"),
    ("remediation", "0001_initial"),
    ("console", None),
]
T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def migrate(targets: list[tuple[str, str | None]]):  # type: ignore[no-untyped-def]
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return executor.loader.project_state([t for t in targets if t[1] is not None]).apps


def latest() -> list[tuple[str, str | None]]:
    executor = MigrationExecutor(connection)
    return executor.loader.graph.leaf_nodes()


def old_rows(apps) -> dict[str, int]:  # type: ignore[no-untyped-def]
    """Rows as the previous release wrote them, through its own models."""
    user = apps.get_model("auth", "User").objects.create(username="rhea")
    cluster = apps.get_model("recovery_console", "Cluster").objects.create(name="old")
    workload = apps.get_model("recovery_console", "Workload").objects.create(
        cluster=cluster, key="llama", created_at=T0, updated_at=T0
    )
    attempt = apps.get_model("recovery_console", "Attempt").objects.create(
        cluster=cluster,
        workload=workload,
        job_id="7",
        attempt_index=0,
        state="FAILED",
        first_seen_at=T0,
        ended_at=T0,
    )
    anomaly = apps.get_model("detection", "Anomaly").objects.create(
        cluster=cluster,
        workload=workload,
        attempt=attempt,
        family="interruption",
        kind="crash",
        category="gpu_hardware",
        attribution="hardware",
        confidence_label="established",
        root_cause="xid",
        summary="Xid 79",
        first_evidence_at=T0,
        detected_at=T0,
        updated_at=T0,
    )
    advice = apps.get_model("remediation", "Advice").objects.create(
        cluster=cluster,
        workload=workload,
        attempt=attempt,
        anomaly=anomaly,
        action="restart",
        desired_state="running",
        category="gpu_hardware",
        attribution="hardware",
        confidence_label="established",
        state="proposed",
        decided_at=T0,
        updated_at=T0,
    )
    review = apps.get_model("recovery_console", "Review").objects.create(
        advice=advice,
        reviewer=user,
        agrees=True,
        preferred_action="restart",
        created_at=T0,
        updated_at=T0,
    )
    channel = apps.get_model("recovery_console", "NotificationChannel").objects.create(
        cluster=cluster, kind="email", target="ops@example.org", events=["stop"]
    )
    return {"review": review.pk, "channel": channel.pk, "attempt": attempt.pk}


@pytest.mark.django_db(transaction=True)
def test_an_upgrade_keeps_reviews_channels_permissions_and_failure_times() -> None:
    rows = old_rows(migrate(BEFORE))
    apps = migrate(latest())

    review = apps.get_model("console", "Review").objects.get(pk=rows["review"])
    assert (review.reviewer.username, review.preferred_action) == ("rhea", "restart")
    channel = apps.get_model("console", "NotificationChannel").objects.get(pk=rows["channel"])
    assert channel.target == "ops@example.org"
    # The permissions moved with their content type, so the groups that held them still do.
    permission = apps.get_model("auth", "Permission").objects.get(
        codename="approve_modechangerequest"
    )
    assert permission.content_type.app_label == "console"
    assert permission.group_set.filter(name="approver").exists()
    attempt = apps.get_model("recovery_console", "Attempt").objects.get(pk=rows["attempt"])
    assert attempt.failed_at == T0
