"""A scan hands the detectors all of an attempt's new lines at once; what they conclude must be
what they would conclude taking the same lines one at a time, whatever the lines are."""

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from detection.core.checkpoints import CheckpointEvent, Phase
from detection.core.detectors.divergence import LossTrend
from detection.core.detectors.hang import ProgressTracker
from detection.core.detectors.straggler import StragglerSettings, ThroughputHistory
from detection.core.progress import Progress

T0 = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
SMOOTHING = 0.2

progress_reports = st.builds(
    Progress,
    step=st.one_of(st.none(), st.integers(0, 30)),
    throughput=st.one_of(st.none(), st.floats(1, 500)),
    loss=st.one_of(st.none(), st.floats(0, 20), st.just(float("nan"))),
)
checkpoint_events = st.builds(CheckpointEvent, phase=st.sampled_from(list(Phase)))
# Times may repeat or go back a little, as lines of several ranks and nodes do.
events = st.lists(
    st.tuples(st.integers(-5, 120), st.one_of(progress_reports, checkpoint_events)), max_size=40
)


def one_at_a_time(tracker: ProgressTracker, timed_events) -> tuple[ProgressTracker, list[bool]]:
    current = []
    for at, event in timed_events:
        if isinstance(event, Progress):
            tracker = tracker.observe(at, event, f"line at {at}", SMOOTHING)
        else:
            tracker = tracker.observe_checkpoint(at, event)
        current.append(tracker.last_progress_at == at)
    return tracker, current


@given(events)
def test_the_tracker_takes_a_batch_as_it_takes_its_lines_one_by_one(drawn) -> None:
    timed = [(T0 + timedelta(seconds=s), event) for s, event in drawn]
    start = ProgressTracker(started_at=T0, last_step=3, last_progress_at=T0, reports=1)
    batch = [(at, event, f"line at {at}") for at, event in timed]
    assert start.observe_batch(batch, SMOOTHING) == one_at_a_time(start, timed)


@given(
    st.lists(st.tuples(st.floats(0, 20) | st.just(float("inf")), st.none() | st.integers(0, 500)))
)
def test_the_loss_trend_takes_a_batch_as_it_takes_its_readings_one_by_one(readings) -> None:
    trend, moved = LossTrend().add_many(readings)
    step_by_step, last_moved = LossTrend(), None
    for index, (loss, step) in enumerate(readings):
        before = step_by_step.peak_at
        at = step if step is not None else step_by_step.readings + 1
        step_by_step = step_by_step.add(loss, at, step)
        if step_by_step.peak_at != before:
            last_moved = index
    assert (trend, moved) == (step_by_step, last_moved)


@given(st.lists(st.floats(1, 500), max_size=60))
def test_the_throughput_history_keeps_the_same_window_from_a_batch(values) -> None:
    settings = StragglerSettings(baseline_samples=20, window_samples=5)
    points = [(T0 + timedelta(seconds=n), value) for n, value in enumerate(values)]
    one_by_one = ThroughputHistory()
    for at, value in points:
        one_by_one = one_by_one.add(at, value, settings)
    assert ThroughputHistory().add_many(points, settings) == one_by_one
