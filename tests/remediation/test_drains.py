"""Our drain reason in Slurm, built from text that quotes job logs (hostile), and how a node's
reason tells our drain from a person's. Pure: no Django."""

from hypothesis import given
from hypothesis import strategies as st

from remediation.core.drains import (
    MAX_DRAIN_REASON,
    drain_reason,
    drained_by_someone_else,
)


def test_the_reason_names_the_advice_and_the_fault() -> None:
    reason = drain_reason(42, "gpu_hardware", "Xid 79 on node2: GPU has fallen off the bus")
    assert reason == (
        "recovery-console advice 42: gpu_hardware: Xid 79 on node2: GPU has fallen off the bus"
    )


@given(st.text(), st.integers(min_value=1, max_value=2**31))
def test_any_summary_becomes_one_short_line_of_plain_ascii_that_is_still_ours(
    summary: str, advice_id: int
) -> None:
    reason = drain_reason(advice_id, "node_or_process_failure", summary)
    assert reason.startswith(f"recovery-console advice {advice_id}: node_or_process_failure")
    assert len(reason) <= MAX_DRAIN_REASON and reason == reason.strip()
    assert all(" " <= ch <= "~" for ch in reason) and '"' not in reason and "  " not in reason
    assert not drained_by_someone_else(reason)


def test_a_reason_not_ours_is_a_persons_except_slurms_own_for_a_lost_node() -> None:
    assert drained_by_someone_else("swapping the HCA, ticket 4411")
    assert not drained_by_someone_else("Not responding")
    assert not drained_by_someone_else("")
