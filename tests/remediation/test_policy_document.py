"""The policy document: pure parsing and validation, no Django."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

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
