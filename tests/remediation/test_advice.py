from dataclasses import replace
from datetime import timedelta

import pytest

from detection.anomalies import Recorded, record_interruption
from detection.core.context import DiagnosisContext
from detection.core.diagnosis import diagnose_lines
from detection.core.interruption import Confidence, Evidence, Interruption
from detection.core.sharding import stable_hash
from detection.models import Anomaly, NodeGpuState
from fleet import services as console
from fleet.core.taxonomy import Attribution, Category, ConfidenceLabel, Kind
from fleet.models import AuditEntry, ClusterMode
from remediation import services
from remediation.models import Advice, AdviceState, Milestone, NodeHealth
from tests.remediation.conftest import T0, anomaly_on, running_attempt

pytestmark = pytest.mark.django_db


def action_mode(cluster, allowlist=()):
    cluster.mode = ClusterMode.ACTION
    cluster.partitions_allowlist = list(allowlist)
    cluster.save()


def test_monitor_mode_publishes_advice_that_must_not_be_enforced(cluster) -> None:
    anomaly = anomaly_on(running_attempt(cluster))
    assert services.advise_cluster(cluster, T0) == 1
    advice = Advice.objects.get()
    assert (advice.action, advice.desired_state, advice.exclude_nodes) == (
        "restart_excluding_node",
        "running_excluding",
        ["n2"],
    )
    assert (advice.enforce, advice.state) == (False, "proposed")
    assert advice.anomaly == anomaly
    assert "Implicated: n2." in advice.explanation
    assert AuditEntry.objects.filter(verb="advice.proposed").count() == 1


def test_action_mode_dispatches_inside_the_allowlist_only(cluster) -> None:
    action_mode(cluster, allowlist=["canary"])
    anomaly_on(running_attempt(cluster))
    services.advise_cluster(cluster, T0)
    advice = Advice.objects.get()
    assert (advice.enforce, advice.state) == (False, "proposed")
    assert "outside the action allowlist" in advice.reasons[-1]
    action_mode(cluster, allowlist=["gpu"])
    anomaly_on(running_attempt(cluster, job_id="101"))
    services.advise_cluster(cluster, T0)
    assert Advice.objects.get(attempt__job_id="101").state == "dispatched"


def test_advising_again_without_news_changes_nothing(cluster) -> None:
    anomaly_on(running_attempt(cluster))
    services.advise_cluster(cluster, T0)
    assert services.advise_cluster(cluster, T0 + timedelta(seconds=5)) == 0
    assert Advice.objects.get().generation == 1


def test_sharper_evidence_before_a_claim_makes_a_new_generation(cluster) -> None:
    attempt = running_attempt(cluster)
    anomaly_on(
        attempt,
        category="nccl_timeout_hang",
        attribution="none",
        hosts=(),
        label="supported",
        root_cause="nccl_watchdog_timeout",
    )
    services.advise_cluster(cluster, T0)
    assert Advice.objects.get().action == "restart"
    anomaly_on(attempt, at=T0 + timedelta(seconds=3))  # the Xid on n2 arrives
    services.advise_cluster(cluster, T0 + timedelta(seconds=5))
    advice = Advice.objects.get()
    assert (advice.generation, advice.action, advice.exclude_nodes) == (
        2,
        "restart_excluding_node",
        ["n2"],
    )
    assert AuditEntry.objects.filter(verb="advice.revised").exists()


def test_each_implicated_node_gets_one_strike_per_anomaly_and_is_drained_at_the_limit(
    cluster,
) -> None:
    action_mode(cluster)
    for n in range(3):
        anomaly_on(running_attempt(cluster, job_id=str(200 + n), comment=f'{{"workload": "w{n}"}}'))
        services.advise_cluster(cluster, T0 + timedelta(minutes=n))
        services.advise_cluster(cluster, T0 + timedelta(minutes=n, seconds=1))
    assert len(NodeHealth.objects.get(name="n2").strikes) == 3
    last = Advice.objects.get(attempt__job_id="202")
    assert last.drain_nodes == ["n2"]


def test_monitor_mode_records_what_it_would_do_without_striking_or_excluding(cluster) -> None:
    for n in range(3):
        anomaly_on(running_attempt(cluster, job_id=str(200 + n), comment=f'{{"workload": "w{n}"}}'))
        services.advise_cluster(cluster, T0 + timedelta(minutes=n))
        services.advise_cluster(cluster, T0 + timedelta(minutes=n, seconds=1))
    health = NodeHealth.objects.get(name="n2")
    assert (health.state, health.strikes, health.excluded_at) == ("healthy", [], None)
    assert [(m["exclude"], m["drain"]) for m in health.would_isolate] == [
        (True, False),
        (True, False),
        (True, True),
    ]
    # The advice still says what action mode would do (the third strike drains) ...
    assert Advice.objects.get(attempt__job_id="202").drain_nodes == ["n2"]
    assert AuditEntry.objects.filter(verb="node.would_isolate").count() == 3
    assert not AuditEntry.objects.filter(verb="node.struck").exists()
    # ... and none of it counts once the cluster acts: n3 may be excluded at once.
    action_mode(cluster)
    anomaly_on(
        running_attempt(cluster, job_id="300", nodes=("n3", "n4"), comment='{"workload": "x"}'),
        hosts=("n3",),
        root_cause="nvrm_xid:n3",
    )
    services.advise_cluster(cluster, T0 + timedelta(minutes=5))
    advice = Advice.objects.get(attempt__job_id="300")
    assert (advice.exclude_nodes, advice.drain_nodes) == (["n3"], [])
    assert not any("circuit breaker" in r for r in advice.reasons)


def test_the_breaker_counts_exclusions_the_controller_carried_out(cluster) -> None:
    action_mode(cluster)
    cluster.policy = {"circuit_breaker_max_nodes": 1}
    cluster.save()
    anomaly_on(running_attempt(cluster))
    services.advise_cluster(cluster, T0)
    first = Advice.objects.get()
    controller = services.issue_controller_token("user:alice", cluster, "ctl").token
    detail = {"nodes": ["n2"]}
    services.record_milestone(controller, first.pk, "k1", "update_exclusions", T0, detail)
    services.reconcile(controller, first.pk, 1, "converged", "done")
    assert NodeHealth.objects.get(name="n2").excluded_at == T0
    other = running_attempt(cluster, job_id="300", nodes=("n3", "n4"), comment='{"workload": "x"}')
    anomaly_on(other, hosts=("n3",), root_cause="nvrm_xid:n3", at=T0 + timedelta(minutes=1))
    services.advise_cluster(cluster, T0 + timedelta(minutes=1))
    second = Advice.objects.get(attempt__job_id="300")
    assert second.exclude_nodes == []
    refusal = next(r for r in second.reasons if r.startswith("circuit breaker"))
    assert "limit 1" in refusal and refusal.endswith("n3 stays in service")


def test_advice_in_flight_counts_against_the_breaker(cluster) -> None:
    action_mode(cluster)
    cluster.policy = {"circuit_breaker_max_nodes": 1}
    cluster.save()
    anomaly_on(running_attempt(cluster))
    other = running_attempt(cluster, job_id="300", nodes=("n3", "n4"), comment='{"workload": "x"}')
    anomaly_on(other, hosts=("n3",), root_cause="nvrm_xid:n3")
    services.advise_cluster(cluster, T0)
    excluded = dict(Advice.objects.values_list("attempt__job_id", "exclude_nodes"))
    assert excluded == {"100": ["n2"], "300": []}


def test_a_second_controller_cannot_claim_what_the_first_claimed(cluster) -> None:
    action_mode(cluster)
    anomaly_on(running_attempt(cluster))
    services.advise_cluster(cluster, T0)
    advice = Advice.objects.get()
    first = services.issue_controller_token("user:alice", cluster, "ctl-a").token
    second = services.issue_controller_token("user:alice", cluster, "ctl-b").token
    assert services.reconcile(first, advice.pk, 1, "pending", "").changed
    assert not services.reconcile(first, advice.pk, 1, "pending", "").changed  # a replay
    with pytest.raises(services.AdviceAlreadyClaimed):
        services.reconcile(second, advice.pk, 1, "pending", "")
    advice.refresh_from_db()
    assert (advice.state, advice.claimed_by) == ("claimed", "controller:research/ctl-a")


def test_reconciliation_is_generation_scoped_and_idempotent(cluster) -> None:
    action_mode(cluster)
    anomaly_on(running_attempt(cluster))
    services.advise_cluster(cluster, T0)
    advice = Advice.objects.get()
    controller = services.issue_controller_token("user:alice", cluster, "ctl").token
    with pytest.raises(services.StaleGeneration):
        services.reconcile(controller, advice.pk, 7, "converged", "done")
    assert services.reconcile(controller, advice.pk, 1, "converged", "requeued").changed
    assert not services.reconcile(controller, advice.pk, 1, "converged", "requeued").changed
    advice.refresh_from_db()
    assert advice.state == AdviceState.EXECUTED and advice.executed_at is not None
    assert AuditEntry.objects.filter(verb="advice.executed").count() == 1


def test_monitor_mode_advice_refuses_reconciliation(cluster) -> None:
    anomaly_on(running_attempt(cluster))
    services.advise_cluster(cluster, T0)
    controller = services.issue_controller_token("user:alice", cluster, "ctl").token
    with pytest.raises(PermissionError, match="monitor mode"):
        services.reconcile(controller, Advice.objects.get().pk, 1, "pending", "")


def test_a_replayed_milestone_is_recorded_once(cluster) -> None:
    action_mode(cluster)
    anomaly_on(running_attempt(cluster))
    services.advise_cluster(cluster, T0)
    advice = Advice.objects.get()
    controller = services.issue_controller_token("user:alice", cluster, "ctl").token
    _, created = services.record_milestone(controller, advice.pk, "k1", "requeue_hold", T0, {})
    _, again = services.record_milestone(controller, advice.pk, "k1", "requeue_hold", T0, {})
    assert (created, again) == (True, False)
    assert Milestone.objects.count() == 1
    assert AuditEntry.objects.filter(verb="controller.requeue_hold").count() == 1


def test_releasing_a_node_needs_a_reason_and_is_audited(cluster) -> None:
    action_mode(cluster)
    anomaly_on(running_attempt(cluster))
    services.advise_cluster(cluster, T0)
    with pytest.raises(ValueError, match="needs a reason"):
        services.release_node("user:bob", cluster, "n2", "  ")
    health = services.release_node("user:bob", cluster, "n2", "GPU replaced, dcgmi diag passed")
    assert (health.state, health.strikes, health.released_by) == ("healthy", [], "user:bob")
    entry = AuditEntry.objects.get(verb="node.released")
    assert entry.payload == {
        "from": "suspect",
        "reason": "GPU replaced, dcgmi diag passed",
        "resume_in_slurm": False,  # never drained: nothing to resume in Slurm
    }


def test_time_to_resume_is_recorded_when_the_next_attempt_runs(cluster) -> None:
    from dataclasses import replace

    from fleet.core.scheduler import ClusterSnapshot, JobState
    from tests.factories import JobRecordFactory

    job = JobRecordFactory(job_id="300", comment='{"workload": "gpt"}')
    console.record_snapshot(
        "t",
        cluster,
        ClusterSnapshot(
            T0, (replace(job, state=JobState.FAILED, end_time=T0 + timedelta(seconds=30)),), ()
        ),
    )
    anomaly_on(cluster.attempts.get(job_id="300"), at=T0 + timedelta(seconds=20))
    again = replace(job, restart_count=1, start_time=T0 + timedelta(seconds=80))
    console.record_snapshot("t", cluster, ClusterSnapshot(T0 + timedelta(seconds=80), (again,), ()))
    assert cluster.attempts.get(job_id="300", attempt_index=1).time_to_resume_s == 60.0


def test_advice_on_the_schedulers_word_alone_waits_for_log_evidence(cluster) -> None:
    attempt = running_attempt(cluster)
    anomaly_on(
        attempt,
        category="node_or_process_failure",
        attribution="none",
        hosts=(),
        label="hypothesis",
        root_cause="slurm:FAILED",
    )
    assert services.advise_cluster(cluster, T0 + timedelta(seconds=5)) == 0
    anomaly_on(attempt, at=T0 + timedelta(seconds=6))  # the log's Xid arrives meanwhile
    services.advise_cluster(cluster, T0 + timedelta(seconds=7))
    advice = Advice.objects.get()
    assert (advice.generation, advice.action, advice.exclude_nodes) == (
        1,
        "restart_excluding_node",
        ["n2"],
    )


def test_an_xid_line_without_a_host_names_the_node_whose_gpu_metrics_reported_it(cluster) -> None:
    attempt = running_attempt(cluster, nodes=("n1", "n2", "n3"))
    # dcgm-exporter's labels, as the metrics source keeps them per node between scrapes.
    for host, xid in (("n3", 79), ("n1", 0)):
        NodeGpuState.objects.create(
            cluster=cluster,
            host=host,
            host_hash=stable_hash(host),
            gpus={"2": {"job": "100", "xid": xid, "pci": "00000000:3B:00.0"}},
        )
    anomaly_on(attempt, hosts=(), root_cause="nvrm_xid", pci_ids=("0000:3b:00",))
    services.advise_cluster(cluster, T0)
    advice = Advice.objects.get()
    assert (advice.action, advice.exclude_nodes) == ("restart_excluding_node", ["n3"])
    assert "n3 (its GPU at that PCI address reported it)" in advice.explanation


def test_advice_records_the_rule_that_chose_it(cluster) -> None:
    anomaly_on(running_attempt(cluster))
    services.advise_cluster(cluster, T0)
    assert Advice.objects.get().rule == "node_local"


def test_settled_advice_is_not_judged_again_when_later_evidence_arrives(cluster) -> None:
    anomaly = anomaly_on(running_attempt(cluster))
    services.advise_cluster(cluster, T0)
    Advice.objects.update(state=AdviceState.EXECUTED)
    # Evidence keeps arriving for the attempt after the advice was carried out.
    type(anomaly).objects.filter(pk=anomaly.pk).update(updated_at=T0 + timedelta(minutes=5))
    assert services.advise_cluster(cluster, T0 + timedelta(minutes=6)) == 0


def drained(cluster, *names, at):
    for name in names:
        NodeHealth.objects.create(
            cluster=cluster, name=name, state="drained", drained_at=at, drain_reason="earlier"
        )


def test_nodes_drained_hours_ago_do_not_hold_the_circuit_breaker_shut(cluster) -> None:
    # 20 nodes, at most 10% taken out per hour: two drained long ago leave room for n2.
    drained(cluster, "n5", "n6", at=T0 - timedelta(hours=3))
    anomaly_on(running_attempt(cluster))
    services.advise_cluster(cluster, T0)
    advice = Advice.objects.get()
    # Drained nodes stay excluded; n2 joins them.
    assert advice.exclude_nodes == ["n2", "n5", "n6"]
    assert not any("circuit breaker" in reason for reason in advice.reasons)


def test_nodes_taken_out_within_the_window_still_count_against_the_circuit_breaker(
    cluster,
) -> None:
    drained(cluster, "n5", "n6", at=T0 - timedelta(minutes=10))
    anomaly_on(running_attempt(cluster))
    services.advise_cluster(cluster, T0)
    advice = Advice.objects.get()
    assert advice.exclude_nodes == ["n5", "n6"]
    assert any(reason.startswith("circuit breaker") for reason in advice.reasons)


def test_a_node_released_after_repair_is_no_longer_excluded_from_the_workload(cluster) -> None:
    action_mode(cluster)
    anomaly_on(running_attempt(cluster, nodes=("n1", "n2", "n3")))
    services.advise_cluster(cluster, T0)
    assert Advice.objects.get().exclude_nodes == ["n2"]
    services.release_node("user:bob", cluster, "n2", "GPU replaced", now=T0 + timedelta(minutes=30))
    # The next attempt fails on n4: n2, repaired since it was excluded, may run the job again.
    retry = running_attempt(cluster, nodes=("n1", "n2", "n4"), restart=1)
    anomaly_on(retry, hosts=("n4",), root_cause="nvrm_xid:n4", at=T0 + timedelta(hours=1))
    services.advise_cluster(cluster, T0 + timedelta(hours=1))
    assert Advice.objects.get(attempt=retry).exclude_nodes == ["n4"]


def slowdown_on(attempt, host="n2"):
    anomaly, _ = record_interruption(
        attempt,
        Interruption(
            kind=Kind.STRAGGLER,
            category=Category.STRAGGLER,
            attribution=Attribution.HARDWARE,
            confidence=Confidence(0.9, ConfidenceLabel.SUPPORTED),
            hosts=(host,),
            root_cause=f"lagging_member:{host}",
            summary=f"{host} is a third slower than its peers",
            evidence=(Evidence(text=f"{host} 38% slower", source="metrics"),),
            first_evidence_at=T0,
            signature="lagging_member",
            node_local=True,
        ),
        T0,
    )
    return anomaly


TEARDOWN = (
    "slurmstepd: error: *** STEP 100.0 ON n1 CANCELLED AT 2026-11-29T12:00:10 ***",
    "srun: error: n1: task 3: Terminated",
    "torch.distributed.elastic.multiprocessing.api.SignalException: Process 4242 got signal: 15",
)


def test_what_an_attempt_prints_after_our_requeue_is_its_teardown_not_a_new_failure(
    cluster,
) -> None:
    action_mode(cluster)
    attempt = running_attempt(cluster)
    slowdown_on(attempt)
    services.advise_cluster(cluster, T0)
    advice = Advice.objects.get()
    controller = services.issue_controller_token("user:alice", cluster, "ctl").token
    requeued = T0 + timedelta(seconds=10)
    services.record_milestone(controller, advice.pk, "k1", "requeue_hold", requeued, {})

    # The lines the dying step prints, each one alone as a later scan may read it.
    for line in TEARDOWN[1:]:
        found = replace(
            diagnose_lines([line], DiagnosisContext(nodes=("n1", "n2"))),
            first_evidence_at=requeued + timedelta(seconds=2),
        )
        assert found.is_failure, line  # on its own, each looks like a failure
        assert record_interruption(attempt, found, requeued + timedelta(seconds=3)) == (
            None,
            Recorded.OUR_TEARDOWN,
        )
    services.advise_cluster(cluster, requeued + timedelta(seconds=5))
    assert Anomaly.objects.count() == 1
    assert list(Advice.objects.values_list("action", "exclude_nodes")) == [
        (advice.action, advice.exclude_nodes)
    ]
    assert not NodeHealth.objects.filter(name="n1").exists()


def test_evidence_from_before_our_requeue_still_counts(cluster) -> None:
    action_mode(cluster)
    attempt = running_attempt(cluster)
    slowdown_on(attempt)
    services.advise_cluster(cluster, T0)
    controller = services.issue_controller_token("user:alice", cluster, "ctl").token
    requeued = T0 + timedelta(seconds=10)
    services.record_milestone(
        controller, Advice.objects.get().pk, "k1", "requeue_hold", requeued, {}
    )
    xid = replace(
        diagnose_lines(["n2: NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus."]),
        first_evidence_at=T0 + timedelta(seconds=4),
    )
    anomaly, recorded = record_interruption(attempt, xid, requeued + timedelta(seconds=1))
    assert recorded is Recorded.NEW and anomaly is not None
