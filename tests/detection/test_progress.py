"""Progress lines of the common trainers, as they print them."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from detection.core.progress import (
    InvalidProgressPattern,
    compile_progress_pattern,
    parse_progress,
)

MEGATRON = (
    " [2024-05-01 12:00:00] iteration      100/  500000 | consumed samples:        51200 | "
    "elapsed time per iteration (ms): 1234.5 | throughput per GPU (TFLOP/s/GPU): 180.3 | "
    "learning rate: 1.500000E-04 | global batch size:   512 | lm loss: 2.345678E+00 | "
    "loss scale: 1.0 | grad norm: 0.812 | number of skipped iterations:   0 | "
    "number of nan iterations:   0 |"
)


def test_megatron_iteration_lines_give_step_throughput_and_loss() -> None:
    progress = parse_progress(MEGATRON)
    assert progress is not None
    assert (progress.step, progress.throughput, progress.style) == (100, 180.3, "megatron")
    assert progress.loss == pytest.approx(2.345678)


def test_megatron_without_tflops_uses_the_iteration_time() -> None:
    line = " iteration       20/    1000 | elapsed time per iteration (ms): 500.0 | lm loss: 3.1 |"
    progress = parse_progress(line)
    assert progress is not None and progress.throughput == pytest.approx(2.0)


def test_a_nan_loss_is_kept_as_nan() -> None:
    progress = parse_progress(" iteration 7/100 | lm loss: nan | loss scale: 1.0 |")
    assert progress is not None and progress.loss is not None and progress.loss != progress.loss


def test_deepspeed_lines() -> None:
    steps = parse_progress("steps: 100 loss: 2.3456 iter time (s): 1.234 samples/sec: 414.9")
    log_dist = parse_progress(
        "[2025-05-01 12:00:00,123] [INFO] [logging.py:96:log_dist] [Rank 0] step=200, skipped=0,"
        " lr=[0.0001], mom=[(0.9, 0.999)]"
    )
    assert steps is not None and (steps.step, steps.throughput) == (100, 414.9)
    assert log_dist is not None and log_dist.step == 200


def test_hf_trainer_loss_dicts_count_as_progress_without_a_step() -> None:
    progress = parse_progress(
        "{'loss': 2.3456, 'grad_norm': 0.81, 'learning_rate': 4.99e-05, 'epoch': 0.01}"
    )
    assert progress is not None and progress.step is None and progress.loss == 2.3456


@pytest.mark.parametrize(
    ("line", "step", "throughput"),
    [
        ("  1%|▏         | 100/10000 [02:03<3:23:10,  1.23s/it]", 100, 1 / 1.23),
        (
            "Epoch 0:  45%|████▌     | 450/1000 [01:23<01:42,  5.39it/s, v_num=0, train_loss=2.31]",
            450,
            5.39,
        ),
        (
            "Epoch 0: : 100%|██████████| 50/50 [00:30<00:00, 1.66it/s, reduced_train_loss=2.5, "
            "global_step=49.0, consumed_samples=400.0, train_step_timing in s=0.6]",
            50,
            1.66,
        ),
    ],
)
def test_tqdm_bars_of_hf_lightning_and_nemo(line: str, step: int, throughput: float) -> None:
    progress = parse_progress(line)
    assert progress is not None
    assert progress.step == step
    assert progress.throughput == pytest.approx(throughput)


@pytest.mark.parametrize(
    "line",
    [
        "NCCL INFO Channel 00/32 :    0   1   2   3",
        "[rank3]: UserWarning: TypedStorage is deprecated.",
        "Traceback (most recent call last):",
        "saving checkpoint at iteration    1000 to /ckpt",
        "",
    ],
)
def test_other_lines_are_not_progress(line: str) -> None:
    assert parse_progress(line) is None


def test_a_custom_pattern_needs_a_step_group_and_valid_syntax() -> None:
    custom = compile_progress_pattern(r"global_step (?P<step>\d+) tok/s (?P<throughput>[0-9.]+)")
    progress = parse_progress("global_step 42 tok/s 1234.5", custom)
    assert progress is not None and (progress.step, progress.throughput) == (42, 1234.5)
    with pytest.raises(InvalidProgressPattern, match="named group"):
        compile_progress_pattern(r"step (\d+)")
    with pytest.raises(InvalidProgressPattern, match="not a valid RE2 pattern"):
        compile_progress_pattern(r"(?P<step>\d+)(?=x)")
    with pytest.raises(InvalidProgressPattern, match="empty"):
        compile_progress_pattern("  ")


@given(st.text(max_size=300))
def test_any_text_is_parsed_or_ignored_without_error(text: str) -> None:
    parse_progress(text)


@given(st.integers(0, 10**9), st.integers(1, 10**9), st.floats(0.1, 1e5))
def test_every_megatron_line_is_read_back(step: int, total: int, ms: float) -> None:
    line = f" iteration {step:>8d}/{total:>8d} | elapsed time per iteration (ms): {ms:.1f} |"
    progress = parse_progress(line)
    assert progress is not None and progress.step == step
