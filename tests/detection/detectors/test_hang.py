from datetime import UTC, datetime, timedelta

from detection.core.detectors.hang import (
    HangSettings,
    ProgressTracker,
    allowed_silence,
    check_hang,
)
from detection.core.progress import Progress

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
SETTINGS = HangSettings(interval_multiple=6, floor_seconds=120, startup_grace_seconds=600)


def steady(reports: int, every: float) -> ProgressTracker:
    tracker = ProgressTracker(started_at=T0)
    for n in range(reports):
        at = T0 + timedelta(seconds=60 + n * every)
        tracker = tracker.observe(at, Progress(step=n * 10), f"iteration {n * 10}", 0.2)
    return tracker


def test_a_job_reporting_on_time_is_not_hung() -> None:
    tracker = steady(20, every=30)
    now = tracker.last_progress_at + timedelta(seconds=150)  # type: ignore[operator]
    assert check_hang("1", tracker, now, SETTINGS) is None


def test_silence_past_k_times_the_smoothed_interval_is_a_hang() -> None:
    tracker = steady(20, every=30)
    assert allowed_silence(tracker, SETTINGS) == 180
    last = tracker.last_progress_at
    finding = check_hang("1", tracker, last + timedelta(seconds=181), SETTINGS)  # type: ignore[operator]
    assert finding is not None
    assert (finding.kind, finding.root_cause, finding.first_evidence_at) == (
        "hang",
        "hang:no-progress",
        last,
    )
    assert "since step 190" in finding.summary


def test_the_floor_protects_fast_jobs_from_short_pauses() -> None:
    tracker = steady(20, every=2)
    assert allowed_silence(tracker, SETTINGS) == 120


def test_repeated_lines_of_one_step_from_many_ranks_are_not_new_progress() -> None:
    tracker = steady(3, every=30)
    again = tracker.observe(T0 + timedelta(hours=1), Progress(step=20), "iteration 20", 0.2)
    assert again == tracker


def test_a_checkpoint_save_extends_the_allowed_silence() -> None:
    tracker = steady(20, every=30).observe_line(
        T0 + timedelta(minutes=12), "saving checkpoint at iteration 190"
    )
    assert allowed_silence(tracker, SETTINGS) == SETTINGS.checkpoint_grace_seconds


def test_a_job_that_never_reports_hangs_after_the_startup_grace() -> None:
    tracker = ProgressTracker(started_at=T0)
    assert check_hang("1", tracker, T0 + timedelta(seconds=599), SETTINGS) is None
    finding = check_hang("1", tracker, T0 + timedelta(seconds=601), SETTINGS)
    assert finding is not None and "within 600 s of the start" in finding.summary


def test_all_gpus_idle_while_running_is_a_hang_even_with_recent_progress() -> None:
    tracker = steady(5, every=30)
    at = tracker.last_progress_at
    tracker = tracker.observe_gpus(at, [0.0, 1.0, 0.5], SETTINGS)  # type: ignore[arg-type]
    assert check_hang("1", tracker, at + timedelta(seconds=100), SETTINGS) is None  # type: ignore[operator]
    tracker = tracker.observe_gpus(at + timedelta(seconds=100), [2.0, 0.0], SETTINGS)  # type: ignore[operator]
    finding = check_hang(
        "1",
        tracker,
        at + timedelta(seconds=179),
        HangSettings(idle_gpu_seconds=170, floor_seconds=1000),
    )  # type: ignore[operator]
    assert finding is not None and finding.root_cause == "hang:idle-gpus"


def test_one_busy_gpu_resets_the_idle_clock() -> None:
    tracker = ProgressTracker(started_at=T0).observe_gpus(T0, [0.0, 0.0], SETTINGS)
    tracker = tracker.observe_gpus(T0 + timedelta(seconds=60), [0.0, 95.0], SETTINGS)
    assert tracker.gpus_idle_since is None
