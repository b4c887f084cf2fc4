"""GPU-hours lost: idle time plus recomputation since the last checkpoint (pure)."""

from datetime import UTC, datetime, timedelta

from detection.core.losses import AttemptCostInput, gpu_hours_lost

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


# 8 GPUs: ran from 0, checkpointed at 40, last progress at 60, first evidence of the hang at 60,
# ended at 70; the next attempt ran at 75 (15 minutes after the failure's first evidence).
FAILED = AttemptCostInput(
    gpus=8,
    failed=True,
    started_at=at(0),
    ended_at=at(70),
    failed_at=at(60),
    last_progress_at=at(60),
    checkpoint_at=at(40),
)
NEXT = AttemptCostInput(gpus=8, failed=False, started_at=at(75), time_to_resume_s=15 * 60)


def test_idle_is_the_hung_time_then_the_wait_each_counted_once() -> None:
    lost = gpu_hours_lost([NEXT, FAILED], checkpoints_known=True)
    # Hung 60→70 on the failed attempt, then waiting 70→75: 15 minutes × 8 GPUs.
    assert round(lost.idle, 6) == round(8 * 15 / 60, 6)


def test_recomputation_is_the_work_since_the_last_checkpoint() -> None:
    lost = gpu_hours_lost([FAILED, NEXT], checkpoints_known=True)
    assert round(lost.recompute, 6) == round(8 * 20 / 60, 6)  # 40 → 60
    assert round(lost.total, 6) == round(8 * 35 / 60, 6)


def test_an_attempt_that_wrote_no_checkpoint_redoes_all_its_work() -> None:
    bare = AttemptCostInput(**{**FAILED.__dict__, "checkpoint_at": None})
    assert round(gpu_hours_lost([bare], checkpoints_known=True).recompute, 6) == 8.0


def test_without_any_checkpoint_seen_recomputation_is_not_guessed() -> None:
    assert gpu_hours_lost([FAILED, NEXT], checkpoints_known=False).recompute == 0.0


def test_a_wait_counted_from_the_attempts_end_overlaps_nothing() -> None:
    # No first evidence noted: the time to resume started when the attempt ended (70 → 75).
    ended = AttemptCostInput(**{**FAILED.__dict__, "failed_at": None})
    waited = AttemptCostInput(**{**NEXT.__dict__, "time_to_resume_s": 5 * 60})
    assert round(gpu_hours_lost([ended, waited], checkpoints_known=True).idle, 6) == round(
        8 * 15 / 60, 6
    )


def test_a_clean_run_lost_nothing() -> None:
    done = AttemptCostInput(gpus=8, failed=False, started_at=at(0), ended_at=at(60))
    assert gpu_hours_lost([done], checkpoints_known=True).total == 0.0
