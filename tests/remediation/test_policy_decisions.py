"""The recovery policy's decisions: the rule table's action, the bounds around it and isolation
within the circuit breaker. Pure, no Django."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fleet.core.taxonomy import Action
from remediation.core.decisions import decide, job_options, retries_without_progress
from remediation.core.incident import History, Incident, restarts_since_progress
from remediation.core.isolation import breaker_limit
from remediation.core.policy import Policy, parse_policy

POLICY = parse_policy({"drain_after_strikes": 3, "circuit_breaker_max_share": 0.1})
XID = Incident(
    "crash",
    "gpu_hardware",
    "hardware",
    "established",
    ("n7",),
    "nvrm_xid:n7",
    "gpu",
    900,
    signature="nvrm_xid",
    node_local=True,
)


def incident(**changes: object) -> Incident:
    return Incident(**{**XID.__dict__, **changes})  # type: ignore[arg-type]


def test_hardware_evidence_naming_a_node_restarts_without_it() -> None:
    decision = decide(POLICY, XID, History(cluster_nodes=100))
    assert decision.action is Action.RESTART_EXCLUDING_NODE
    assert decision.exclude == ("n7",)
    assert decision.drain == ()
    assert "implicates n7" in decision.reasons[0]


def test_nodes_excluded_before_stay_excluded() -> None:
    decision = decide(POLICY, XID, History(excluded=("n2",), isolated=("n2",), cluster_nodes=100))
    assert decision.exclude == ("n2", "n7")


def test_a_node_is_drained_when_it_reaches_its_strikes() -> None:
    decision = decide(POLICY, XID, History(strikes={"n7": 2}, cluster_nodes=100))
    assert decision.drain == ("n7",)
    assert any("reached 3 strikes" in reason for reason in decision.reasons)


def test_a_mere_hypothesis_excludes_nobody() -> None:  # and names no stop either
    decision = decide(POLICY, incident(confidence_label="hypothesis"), History(cluster_nodes=100))
    assert decision.action is Action.RESTART
    assert decision.exclude == ()
    assert "only suspected" in decision.reasons[-1]


def app_error(**changes: object) -> Incident:
    defaults = {
        "category": "application_error",
        "attribution": "application",
        "hosts": (),
        "signature": "python_exception",
        "node_local": False,
        "root_cause": "python_exception",
    }
    return incident(**{**defaults, **changes})


def test_an_application_error_stops_at_once_saying_what_to_fix() -> None:
    detail = "KeyError: 'lr', raised in build at train.py:12"
    decision = decide(POLICY, app_error(detail=detail), History())
    assert (decision.action, decision.rule) == (Action.STOP, "application_error")
    assert "repeats on a retry" in decision.reasons[0]
    assert decision.fix.startswith("fix the error in the code or the configuration")
    assert detail in decision.fix


@pytest.mark.parametrize(
    ("signature", "category", "action"),
    [
        ("fs_no_space", "filesystem_io", Action.STOP),
        ("fs_io_error", "filesystem_io", Action.RESTART),
        ("host_oom_killer", "node_or_process_failure", Action.STOP),
        ("process_sigkill", "node_or_process_failure", Action.RESTART),
        ("cuda_illegal_memory_access", "application_error", Action.RESTART),
        ("slurm_cancelled", "node_or_process_failure", Action.NONE),
        ("loss_divergence", "numerical_divergence", Action.STOP),
    ],
)
def test_a_signature_rule_says_more_than_its_category(
    signature: str, category: str, action: Action
) -> None:
    found = app_error(signature=signature, category=category)
    assert decide(POLICY, found, History()).action is action


def test_node_local_evidence_beats_the_category_and_a_signature_rule_beats_both() -> None:
    nvlink = incident(category="interconnect_network", signature="ib_link_down")
    assert decide(POLICY, nvlink, History(cluster_nodes=100)).action is (
        Action.RESTART_EXCLUDING_NODE
    )
    policy = parse_policy({"rules": {"ib_link_down": "restart"}})
    assert decide(policy, nvlink, History(cluster_nodes=100)).action is Action.RESTART


def test_a_partition_rule_overrides_the_cluster_rule_for_its_jobs_only() -> None:
    policy = parse_policy(
        {
            "rules": {"cuda_oom": "restart"},
            "partitions": {"debug": {"rules": {"cuda_oom": "none"}}},
        }
    )
    oom = app_error(category="cuda_oom", signature="cuda_oom")
    assert decide(policy, oom, History()).action is Action.RESTART
    assert decide(policy, incident(**{**oom.__dict__, "partition": "debug"}), History()).action is (
        Action.NONE
    )
    assert decide(POLICY, oom, History()).action is Action.STOP


def test_nothing_failed_is_never_acted_on() -> None:
    logged = incident(kind="none", signature="nvrm_xid", node_local=False)
    decision = decide(POLICY, logged, History())
    assert decision.action is Action.NONE and "nothing failed" in decision.reasons[0]


def test_node_local_evidence_without_a_host_says_which_line_to_follow() -> None:
    anonymous = incident(hosts=())
    decision = decide(POLICY, anonymous, History(cluster_nodes=100))
    assert (decision.action, decision.exclude) == (Action.RESTART_EXCLUDING_NODE, ())
    assert "does not say which node" in decision.reasons[0]


def test_repeating_the_same_failure_without_progress_stops_after_the_limit() -> None:
    oom = incident(
        category="filesystem_io",
        attribution="system_software",
        hosts=(),
        root_cause="oom",
        step=500,
        signature="fs_io_error",
        node_local=False,
    )
    past = (("oom", 500), ("oom", 500))
    assert decide(POLICY, oom, History(root_causes=past)).action is Action.RESTART
    decision = decide(POLICY, oom, History(root_causes=(("oom", 500),) * 3))
    assert decision.action is Action.STOP
    assert "made no progress" in decision.reasons[0]


def test_progress_between_failures_resets_the_retry_count() -> None:
    assert retries_without_progress([("oom", 100), ("oom", 200), ("oom", 300)], "oom", 400) == 0
    assert retries_without_progress([("oom", 300), ("oom", 300)], "oom", 300) == 2
    assert retries_without_progress([("oom", 100), ("xid", 300), ("oom", 300)], "oom", 300) == 1


def test_the_restart_cap_per_workload_stops_the_loop() -> None:
    decision = decide(POLICY, XID, History(restarts=10, cluster_nodes=100))
    assert decision.action is Action.STOP
    assert "restarted 10 times without getting further (limit 10)" in decision.reasons[0]


def test_the_circuit_breaker_refuses_to_isolate_too_much_of_the_cluster() -> None:
    history = History(isolated=("n1",), cluster_nodes=10, strikes={"n7": 5})
    decision = decide(POLICY, XID, history)
    assert decision.action is Action.RESTART
    assert decision.exclude == () and decision.drain == ()
    refusal = next(r for r in decision.reasons if r.startswith("circuit breaker"))
    assert refusal.startswith("circuit breaker: isolating n7 would take 2 of the cluster's 10")
    assert "limit 1" in refusal and refusal.endswith("n7 stays in service")
    # The restart says which node it could not take out, not that there was none to blame.
    assert "implicates n7, but it cannot be taken out" in decision.reasons[0]


@pytest.mark.parametrize(
    ("nodes", "limit"), [(1, 0), (2, 1), (4, 1), (9, 1), (10, 1), (12, 2), (40, 4), (1000, 10)]
)
def test_the_breaker_lets_a_small_cluster_lose_one_node_and_caps_a_large_one(
    nodes: int, limit: int
) -> None:
    assert breaker_limit(Policy().isolation_rules, nodes) == limit


def test_the_absolute_cap_is_a_policy_setting() -> None:
    rules = parse_policy({"circuit_breaker_max_nodes": 2}).isolation_rules
    assert breaker_limit(rules, 1000) == 2
    assert breaker_limit(parse_policy({"circuit_breaker_max_share": 0}).isolation_rules, 50) == 0


def test_a_four_node_cluster_excludes_a_failed_node_with_the_default_policy() -> None:
    decision = decide(Policy(), XID, History(cluster_nodes=4))
    assert (decision.action, decision.exclude) == (Action.RESTART_EXCLUDING_NODE, ("n7",))
    second = decide(Policy(), incident(hosts=("n3",)), History(isolated=("n7",), cluster_nodes=4))
    assert second.exclude == () and "n3 stays in service" in second.reasons[-1]


def test_a_slow_node_the_breaker_keeps_in_is_reported_not_restarted() -> None:
    slow = incident(kind="straggler", category="straggler", signature="throughput_drop")
    decision = decide(POLICY, slow, History(isolated=("n1",), cluster_nodes=10))
    assert decision.action is Action.NONE
    assert decision.reasons[0].startswith("a slowdown on n7, which cannot be taken out")
    assert not any("no node to blame" in r for r in decision.reasons)


def test_a_job_can_opt_out_or_lower_its_limits_but_not_raise_them() -> None:
    assert decide(POLICY, XID, History(), comment='{"recovery": false}').action is Action.NONE
    lowered = '{"recovery": {"max_restarts_per_workload": 1}}'
    assert decide(POLICY, XID, History(restarts=1), comment=lowered).action is Action.STOP
    raised = '{"recovery": {"max_restarts_per_workload": 99}}'
    assert decide(POLICY, XID, History(restarts=10), comment=raised).action is Action.STOP


def test_a_disabled_partition_gets_no_action() -> None:
    policy = parse_policy({"partitions": {"interactive": {"enabled": False}}})
    assert decide(policy, incident(partition="interactive"), History()).action is Action.NONE


def test_a_slowdown_with_no_node_to_blame_is_only_reported() -> None:
    slow = incident(
        kind="straggler",
        category="straggler",
        hosts=(),
        confidence_label="supported",
        signature="throughput_drop",
        node_local=False,
    )
    assert decide(POLICY, slow, History()).action is Action.NONE


def test_a_hang_restarts_from_the_checkpoint() -> None:
    hang = incident(
        kind="hang",
        category="nccl_timeout_hang",
        attribution="none",
        hosts=(),
        confidence_label="supported",
        signature="progress",
        node_local=False,
    )
    decision = decide(POLICY, hang, History())
    assert decision.action is Action.RESTART and "stopped making progress" in decision.reasons[0]


def test_garbage_comments_are_ignored() -> None:
    assert job_options("not json") == {}
    assert job_options('{"recovery": "yes"}') == {}
    assert job_options('{"workload": "x", "recovery": {"enabled": false}}') == {"enabled": False}


@given(
    st.sampled_from(["gpu_hardware", "application_error", "cuda_oom", "interconnect_network"]),
    st.booleans(),
    st.sampled_from(["established", "supported", "hypothesis"]),
    st.lists(st.sampled_from(["n1", "n2", "n3"]), max_size=3, unique=True),
    st.integers(0, 20),
    st.integers(1, 50),
)
def test_every_decision_has_reasons_and_never_isolates_past_the_breaker(
    category: str,
    node_local: bool,
    label: str,
    hosts: list[str],
    restarts: int,
    cluster_nodes: int,
) -> None:
    decision = decide(
        POLICY,
        incident(
            category=category, node_local=node_local, confidence_label=label, hosts=tuple(hosts)
        ),
        History(restarts=restarts, cluster_nodes=cluster_nodes),
    )
    assert decision.reasons and decision.rule
    if decision.action is Action.STOP:
        assert decision.fix
    isolated = set(decision.exclude) | set(decision.drain)
    assert len(isolated) <= breaker_limit(POLICY.isolation_rules, cluster_nodes)
    if decision.action is Action.STOP:
        assert decision.exclude == ()


def test_a_node_that_keeps_failing_the_job_is_named_in_the_stop_not_the_job() -> None:
    # The breaker (or a weak suspicion) kept n2 in service, and the job failed on it again.
    xid = incident(hosts=("n2",), root_cause="nvrm_xid:n2", step=500)
    decision = decide(POLICY, xid, History(root_causes=(("nvrm_xid:n2", 500),) * 3))
    assert (decision.action, decision.rule) == (Action.STOP, "limits")
    assert "come from n2, which stayed in service" in decision.fix
    assert "repair or drain it" in decision.fix


def test_only_restarts_that_got_nowhere_count_toward_the_workload_cap() -> None:
    # A long run meets many unrelated failures and gets further after each one.
    assert restarts_since_progress([100, 200, 300], 400) == 0
    assert restarts_since_progress([100, 300, 200, 250], 290) == 3
    # The failing attempt got further than all before it: the count starts again.
    assert restarts_since_progress([500, 100, 100], 600) == 0
    # No step ever seen: every restart counts.
    assert restarts_since_progress([None, None, None], None) == 3
    assert restarts_since_progress([], None) == 0
