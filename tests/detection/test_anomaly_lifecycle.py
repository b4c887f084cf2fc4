"""When an interruption is over (``detection.core.lifecycle``). Pure, no Django."""

from datetime import UTC, datetime, timedelta

from detection.core.lifecycle import HEALTHY_RUN, Successor, healthy_because

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def successor(**changes: object) -> Successor:
    fields = {
        "label": "job 1#1",
        "state": "RUNNING",
        "started_at": T0,
        "last_step": None,
        "interrupted": False,
    }
    return Successor(**{**fields, **changes})  # type: ignore[arg-type]


def test_a_successor_is_healthy_once_past_the_failed_step_or_after_a_healthy_run() -> None:
    assert healthy_because(successor(last_step=850), 900, T0) == ""
    assert healthy_because(successor(last_step=1200), 900, T0) == (
        "job 1#1 reached step 1,200, past step 900 where it failed"
    )
    # The failed attempt logged no step (it died starting up): any progress is past it.
    assert healthy_because(successor(last_step=3), None, T0) == "job 1#1 reached step 3"
    assert healthy_because(successor(), None, T0 + HEALTHY_RUN - timedelta(seconds=1)) == ""
    assert "ran 10 min without an interruption" in healthy_because(
        successor(), 900, T0 + HEALTHY_RUN
    )
    assert healthy_because(successor(state="COMPLETED"), 900, T0) == "job 1#1 completed"


def test_a_successor_that_failed_or_is_waiting_is_not_healthy() -> None:
    assert healthy_because(successor(last_step=5000, interrupted=True), 900, T0) == ""
    assert healthy_because(successor(state="PENDING"), 900, T0 + timedelta(hours=1)) == ""
    assert healthy_because(successor(state="FAILED", last_step=5000), 900, T0) == ""
