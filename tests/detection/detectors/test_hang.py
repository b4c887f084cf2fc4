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


# The defaults: the silence allowed follows each job's own step time, with a one-minute floor.
DEFAULTS = HangSettings()


def silence_until_hang(tracker: ProgressTracker, settings: HangSettings = DEFAULTS) -> int:
    """The first whole second of silence after the last progress at which a hang is found."""
    last = tracker.last_progress_at
    assert last is not None
    for second in range(1, 4 * 3600):
        if check_hang("1", tracker, last + timedelta(seconds=second), settings):
            return second
    raise AssertionError("no hang within four hours of silence")


def test_the_allowed_silence_follows_each_jobs_own_step_time() -> None:
    # Five smoothed intervals, at least a minute: 2 s steps → 60 s, 30 s → 150 s, 5 min → 25 min.
    found = {every: silence_until_hang(steady(40, every=every)) for every in (2, 30, 300)}
    assert found == {2: 61, 30: 151, 300: 1501}


def test_a_faster_job_is_called_hung_sooner_than_a_slower_one() -> None:
    fast, slow = steady(40, every=10), steady(40, every=40)
    assert silence_until_hang(fast) == 61 < silence_until_hang(slow) == 201


def test_the_smoothed_interval_follows_a_job_that_slows_down() -> None:
    tracker = steady(40, every=10)
    last = tracker.last_progress_at
    assert last is not None
    for n in range(1, 30):  # the job now steps every 60 s
        at = last + timedelta(seconds=60 * n)
        tracker = tracker.observe(at, Progress(step=1000 + n), f"iteration {1000 + n}", 0.2)
    assert 290 < allowed_silence(tracker, DEFAULTS) <= 300


def test_a_visible_checkpoint_save_extends_the_silence_until_it_ends() -> None:
    tracker = steady(40, every=2)
    last = tracker.last_progress_at
    assert last is not None
    saving = tracker.observe_line(
        last + timedelta(seconds=1), "saving checkpoint at iteration 390 to /ckpt in torch format"
    )
    # Ten minutes into the save: far past the job's 60 s, still no hang.
    assert check_hang("1", saving, last + timedelta(minutes=10), DEFAULTS) is None
    assert silence_until_hang(saving) == DEFAULTS.checkpoint_grace_seconds + 1
    saved_at = last + timedelta(minutes=12)
    saved = saving.observe_line(
        saved_at, "  successfully saved checkpoint from iteration     390 to /ckpt"
    )
    # Once written, the job's own allowance counts again, from the end of the save.
    assert check_hang("1", saved, saved_at + timedelta(seconds=59), DEFAULTS) is None
    finding = check_hang("1", saved, saved_at + timedelta(seconds=61), DEFAULTS)
    assert finding is not None and finding.root_cause == "hang:no-progress"


def test_an_evaluation_running_gets_its_own_grace() -> None:
    tracker = steady(40, every=2)
    last = tracker.last_progress_at
    assert last is not None
    evaluating = tracker.observe_line(last + timedelta(seconds=1), "***** Running Evaluation *****")
    settings = HangSettings(evaluation_grace_seconds=600)
    assert check_hang("1", evaluating, last + timedelta(seconds=599), settings) is None
    assert check_hang("1", evaluating, last + timedelta(seconds=601), settings) is not None


def test_idle_gpus_during_a_visible_save_are_not_a_hang() -> None:
    tracker = steady(5, every=30).observe_line(
        T0, "[Rank 0] [Torch] Checkpoint global_step40 is about to be saved!"
    )
    tracker = tracker.observe_gpus(T0, [0.0, 0.0], DEFAULTS)
    assert check_hang("1", tracker, T0 + timedelta(seconds=300), DEFAULTS) is None


def test_a_line_that_only_mentions_a_checkpoint_does_not_pause_anything() -> None:
    tracker = steady(40, every=2).observe_line(T0, "checkpoint dir is /ckpt, save interval 1000")
    assert allowed_silence(tracker, DEFAULTS) == 60


def test_a_restart_gets_a_multiple_of_its_workloads_earlier_start_up() -> None:
    # The earlier attempt reached its first step 40 s after it started: 3 x 40 s = 120 s here.
    tracker = ProgressTracker(started_at=T0, earlier_startup_seconds=40)
    settings = HangSettings(floor_seconds=60, startup_grace_seconds=1800, startup_multiple=3)
    assert check_hang("1", tracker, T0 + timedelta(seconds=119), settings) is None
    finding = check_hang("1", tracker, T0 + timedelta(seconds=121), settings)
    assert finding is not None and "within 120 s of the start" in finding.summary
    assert "earlier attempts reached their first step within 40 s" in finding.summary


def test_the_learned_start_up_is_bounded_by_the_floor_and_the_grace() -> None:
    settings = HangSettings(floor_seconds=60, startup_grace_seconds=600, startup_multiple=3)
    quick = ProgressTracker(started_at=T0, earlier_startup_seconds=5)
    slow = ProgressTracker(started_at=T0, earlier_startup_seconds=400)
    assert (allowed_silence(quick, settings), allowed_silence(slow, settings)) == (60, 600)


def test_a_visible_checkpoint_load_gets_the_whole_start_up_grace() -> None:
    tracker = ProgressTracker(started_at=T0, earlier_startup_seconds=40).observe_line(
        T0 + timedelta(seconds=10), " loading checkpoint from /ckpt/llama at iteration 4000"
    )
    assert allowed_silence(tracker, SETTINGS) == SETTINGS.startup_grace_seconds
    # Its idle GPUs are the load too.
    tracker = tracker.observe_gpus(T0 + timedelta(seconds=10), [0.0], SETTINGS)
    assert check_hang("1", tracker, T0 + timedelta(seconds=500), SETTINGS) is None
    # Once loaded, the learned allowance counts from the load's end.
    loaded = tracker.observe_line(
        T0 + timedelta(seconds=300),
        "  successfully loaded checkpoint from /ckpt/llama [ t 1/8, p 1/1 ] at iteration 4000",
    )
    assert check_hang("1", loaded, T0 + timedelta(seconds=300 + 119), SETTINGS) is None
    assert check_hang("1", loaded, T0 + timedelta(seconds=300 + 121), SETTINGS) is not None


def test_the_first_progress_is_remembered() -> None:
    tracker = steady(3, every=30)
    assert tracker.first_progress_at == T0 + timedelta(seconds=60)


def test_a_job_starting_up_when_its_nodes_link_went_down_hangs_a_floor_after_the_event() -> None:
    settings = HangSettings(floor_seconds=60, startup_grace_seconds=1800)
    tracker = ProgressTracker(started_at=T0).observe_node_event(T0 + timedelta(seconds=40))
    assert check_hang("1", tracker, T0 + timedelta(seconds=99), settings) is None
    finding = check_hang("1", tracker, T0 + timedelta(seconds=101), settings)
    assert finding is not None and finding.first_evidence_at == T0
    assert "within 100 s of the start (60 s after an event on one of its nodes)" in finding.summary


def test_a_running_job_silent_since_its_nodes_link_went_down_hangs_two_steps_after() -> None:
    settings = HangSettings(floor_seconds=60, interval_multiple=5, after_node_event_multiple=2)
    running = steady(20, every=40)
    last = running.last_progress_at
    assert last is not None
    event = last + timedelta(seconds=10)
    running = running.observe_node_event(event)
    # Silence alone would wait 5 x 40 s; with the link down, 2 x 40 s after the event.
    assert check_hang("1", running, event + timedelta(seconds=79), settings) is None
    finding = check_hang("1", running, event + timedelta(seconds=81), settings)
    assert finding is not None and finding.first_evidence_at == last
    assert "for more than 90 s (80 s after an event on one of its nodes)" in finding.summary


def test_a_link_event_followed_by_progress_shortens_nothing() -> None:
    """A link that flapped and came back: the job stepped on, so only silence counts."""
    settings = HangSettings(floor_seconds=60, interval_multiple=5)
    tracker = steady(20, every=40)
    last = tracker.last_progress_at
    assert last is not None
    tracker = tracker.observe_node_event(last + timedelta(seconds=5))
    tracker = tracker.observe(
        last + timedelta(seconds=70), Progress(step=200), "iteration 200", 0.2
    )
    after = tracker.last_progress_at
    assert after is not None
    assert check_hang("1", tracker, after + timedelta(seconds=150), settings) is None


def test_a_node_event_does_not_shorten_a_visible_pause() -> None:
    settings = HangSettings(floor_seconds=60, startup_grace_seconds=1800)
    loading = (
        ProgressTracker(started_at=T0)
        .observe_line(T0, " loading checkpoint from /ckpt/llama at iteration 4000")
        .observe_node_event(T0 + timedelta(seconds=5))
    )
    assert check_hang("1", loading, T0 + timedelta(seconds=600), settings) is None
    saving = steady(20, every=30)
    last = saving.last_progress_at
    assert last is not None
    saving = saving.observe_line(
        last + timedelta(seconds=1), "saving checkpoint at iteration 20 to /ckpt/llama"
    ).observe_node_event(last + timedelta(seconds=2))
    assert check_hang("1", saving, last + timedelta(seconds=600), settings) is None
