"""Rule-table edits proposed by reviewers' corrections (library tests: no Django)."""

from __future__ import annotations

from remediation.core.proposals import MIN_ADVICE, LabelledAdvice, propose


def labelled(n: int, key: str, action: str, *preferred: str) -> list[LabelledAdvice]:
    return [LabelledAdvice(100 + i, key, action, tuple(preferred)) for i in range(n)]


def test_corrections_that_agree_on_another_action_propose_a_rule_with_the_labels_behind_it():
    advice = [
        *labelled(3, "c10d_store_error", "restart", "stop", "stop"),
        *labelled(4, "nvrm_xid", "restart_excluding_node", "restart_excluding_node"),
    ]
    [proposal] = propose(advice)
    assert (proposal.key, proposal.action, proposal.chose, proposal.labels) == (
        "c10d_store_error",
        "stop",
        6,
        6,
    )
    assert (
        proposal.summary
        == "stop on c10d_store_error: 6 of 6 reviewers chose stop (advised: restart)"
    )
    assert proposal.advice_ids == (100, 101, 102)
    # 4 of 7 agreed; with the rule all 7 would have.
    assert proposal.agreement_now == 4 / 7
    assert proposal.agreement_with_rule == 1.0


def test_too_few_corrections_or_split_reviewers_propose_nothing():
    assert not propose(labelled(MIN_ADVICE - 1, "cuda_oom", "restart", "stop"))
    split = [
        *labelled(2, "c10d_store_error", "restart", "stop"),
        *labelled(2, "c10d_store_error", "restart", "restart_excluding_node"),
    ]
    assert not propose(split)


def test_reviewers_who_agree_with_the_advice_propose_nothing():
    assert not propose(labelled(10, "fs_no_space", "stop", "stop"))


def test_a_minority_that_agreed_keeps_the_share_of_the_majority_honest():
    advice = [
        *labelled(4, "nccl_remote_error", "restart", "stop"),
        *labelled(1, "nccl_remote_error", "restart", "restart"),
    ]
    [proposal] = propose(advice)
    assert (proposal.chose, proposal.labels) == (4, 5)
    assert proposal.agreement_now == 1 / 5 and proposal.agreement_with_rule == 4 / 5
