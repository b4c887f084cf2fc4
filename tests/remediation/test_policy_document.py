"""The policy document and its rule table: pure parsing and validation, no Django."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from detection.core.findings import KNOWN_FINDINGS
from fleet.core.taxonomy import Action
from remediation.core.policy import InvalidPolicy, Limits, Policy, parse_policy


def test_an_empty_document_gives_the_defaults() -> None:
    policy = parse_policy({})
    assert policy == Policy()
    assert policy.limits.max_restarts_per_workload == 10
    assert policy.approval_min_agreement == 0.9
    assert policy.approval_min_labelled == 50


def test_a_partition_overrides_only_what_it_names() -> None:
    policy = parse_policy(
        {
            "max_retries_per_root_cause": 5,
            "partitions": {"canary": {"max_restarts_per_workload": 1}},
        }
    )
    assert policy.limits_for("canary") == Limits(
        max_restarts_per_workload=1, max_retries_per_root_cause=5
    )
    assert policy.limits_for("gpu") == Limits(max_retries_per_root_cause=5)


def test_the_document_round_trips() -> None:
    document = {"drain_after_strikes": 2, "partitions": {"canary": {"enabled": False}}}
    policy = parse_policy(document)
    assert parse_policy(policy.to_document()) == policy
    assert policy.to_document()["partitions"] == {"canary": {"enabled": False}}


@pytest.mark.parametrize(
    ("document", "problem"),
    [
        ([], "the policy must be a JSON object"),
        ({"drain_after_strikes": True}, "drain_after_strikes must be an integer"),
        ({"drain_after_strikes": 2.5}, "drain_after_strikes must be an integer"),
        ({"circuit_breaker_max_share": 1.5}, "circuit_breaker_max_share must be between 0 and 1"),
        ({"enabled": "yes"}, "enabled must be true or false"),
        ({"retries": 3}, "retries is not a policy setting"),
        ({"partitions": ["canary"]}, "partitions must be an object of partition name to overrides"),
        (
            {"partitions": {"canary": {"drain_after_strikes": 1}}},
            "partitions.canary.drain_after_strikes is not a policy setting",
        ),
        ({"partitions": {"canary": 3}}, "partitions.canary must be an object"),
    ],
)
def test_a_bad_document_is_refused_with_the_reason(document: object, problem: str) -> None:
    with pytest.raises(InvalidPolicy) as refused:
        parse_policy(document)
    assert problem in refused.value.problems


@given(st.dictionaries(st.text(max_size=30), st.none() | st.booleans() | st.integers() | st.text()))
def test_any_document_is_either_parsed_or_refused_with_reasons(document: dict[str, object]) -> None:
    try:
        parse_policy(document)
    except InvalidPolicy as refused:
        assert refused.problems


# --- the rule table ---------------------------------------------------------------------------


def test_the_default_rules_stop_what_a_retry_repeats_and_exclude_on_node_local_evidence() -> None:
    rules = Policy().rules_for("gpu")
    assert rules["node_local"] is Action.RESTART_EXCLUDING_NODE
    for stopped in ("cuda_oom", "application_error", "numerical_divergence", "fs_no_space"):
        assert rules[stopped] is Action.STOP, stopped
    for restarted in ("nccl_timeout_hang", "interconnect_network", "filesystem_io"):
        assert rules[restarted] is Action.RESTART, restarted
    assert rules["straggler"] is Action.NONE and rules["slurm_cancelled"] is Action.NONE


def test_cluster_rules_lay_over_the_defaults_and_partition_rules_over_those() -> None:
    policy = parse_policy(
        {
            "rules": {"cuda_oom": "restart", "fs_io_error": "stop"},
            "partitions": {"canary": {"rules": {"cuda_oom": "none"}}},
        }
    )
    assert policy.rules_for("gpu")["cuda_oom"] is Action.RESTART
    assert policy.rules_for("gpu")["fs_io_error"] is Action.STOP
    assert policy.rules_for("canary")["cuda_oom"] is Action.NONE
    assert policy.rules_for("canary")["fs_io_error"] is Action.STOP
    assert parse_policy(policy.to_document()) == policy


@pytest.mark.parametrize(
    ("rules", "problem"),
    [
        ({"cuda_oom": "reboot"}, "rules.cuda_oom must be one of none, restart, "),
        ({"Bad Key!": "stop"}, "rules.Bad Key! is not a category, a signature name or node_local"),
        ({"no_such_signature": "stop"}, "rules.no_such_signature names no category and no"),
        (["cuda_oom"], "rules must be an object of category or signature to action"),
    ],
)
def test_a_bad_rule_is_refused_with_every_problem_named(rules: object, problem: str) -> None:
    with pytest.raises(InvalidPolicy) as refused:
        parse_policy({"rules": rules, "drain_after_strikes": 0}, KNOWN_FINDINGS)
    assert any(p.startswith(problem) for p in refused.value.problems), refused.value.problems
    # Every problem, not the first: the bad setting beside the rules is named too.
    assert any("drain_after_strikes" in p for p in refused.value.problems)


def test_rules_may_name_any_finding_the_cluster_can_produce() -> None:
    names = {"nvrm_xid_application", "loss_divergence", "slurm_out_of_memory", "gpus_idle"}
    assert names <= KNOWN_FINDINGS
    parse_policy({"rules": dict.fromkeys(names, "stop")}, KNOWN_FINDINGS)


def test_a_document_from_before_the_rule_table_keeps_its_meaning() -> None:
    old = parse_policy({"stop_on_established_application_error": False})
    assert old.rules_for("gpu")["application_error"] is Action.RESTART
