"""Divergence from the loss values of progress lines: a spike that does not come back is a
divergence; one that recovers, or the swings of warm-up, is not."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from detection.core.detectors.divergence import DivergenceSettings, LossTrend, diverged
from detection.core.trends import lagging_member, loss_divergence

EXCERPT = DivergenceSettings(settle_readings=0)


def trend(*losses: float, first_step: int = 1000) -> LossTrend:
    result = LossTrend()
    for offset, loss in enumerate(losses):
        result = result.add(loss, at=offset + 1, step=first_step + offset)
    return result


def megatron(step: int, loss: float) -> str:
    return (
        f" iteration {step:8d}/  159576 | elapsed time per iteration (ms): 18706.1 |"
        f" lm loss: {loss:.6E} | loss scale: 2048.0 | grad norm: 9.8 |"
    )


def test_a_jump_that_stays_up_is_a_divergence() -> None:
    found = diverged(trend(6.44, 11.42, 7.16), EXCERPT)
    assert found is not None
    assert (found.baseline, found.peak, found.peak_at) == (6.44, 11.42, 2)
    assert "did not come back" in found.describe()


def test_a_loss_that_keeps_rising_is_a_divergence() -> None:
    assert diverged(trend(6.37, 6.60, 7.31, 9.12, 10.24), EXCERPT) is not None


def test_a_spike_that_recovers_is_not() -> None:
    recovered = trend(2.199, 2.220, 2.595, 2.242, 5.098, 3.492, 3.213, 2.805, 2.216)
    assert diverged(recovered, EXCERPT) is None


def test_warm_up_swings_are_left_out() -> None:
    early = LossTrend()
    for step, loss in enumerate((12.5, 40.8, 43.1, 39.0), start=2):
        early = early.add(loss, at=step, step=step)
    assert early.readings == 0 and diverged(early, EXCERPT) is None


def test_the_loop_waits_for_readings_after_the_spike_before_judging() -> None:
    spiked = trend(2.0, 2.0, 2.1, 5.0)
    assert diverged(spiked, EXCERPT) is not None
    assert diverged(spiked) is None  # the loop's default waits for 5 more readings
    assert diverged(trend(2.0, 2.0, 2.1, 5.0, 4.9, 4.8, 4.9, 5.1, 4.7)) is not None
    assert diverged(trend(2.0, 2.0, 2.1, 5.0, 3.0, 2.5, 2.1, 2.0, 2.0)) is None


def test_losses_near_zero_need_a_real_jump_not_only_a_ratio() -> None:
    assert diverged(trend(0.0002, 0.0004, 0.0009), EXCERPT) is None


@given(st.lists(st.floats(0.5, 20, allow_nan=False), min_size=1, max_size=60))
def test_a_loss_that_never_rises_never_diverges(values: list[float]) -> None:
    assert diverged(trend(*sorted(values, reverse=True)), EXCERPT) is None


def test_an_excerpt_is_read_per_process_so_interleaved_ranks_do_not_mix() -> None:
    lines = []
    for step in range(1000, 1010):
        lines.append("[rank0]: " + megatron(step, 2.0))
        lines.append("[rank1]: " + megatron(step, 3.4))
    assert loss_divergence(lines) is None
    found = loss_divergence([megatron(1000, 6.4), megatron(1010, 11.4), megatron(1020, 7.2)])
    assert found is not None and found.first_line == 2


def test_a_report_with_one_member_far_behind_is_a_straggler() -> None:
    report = [
        "The elapsed time of nodes are {2: 20.18, 3: 18.72, 0: 181.8, 1: 143.06}",
    ]
    found = lagging_member(report)
    assert found is not None and found.detail("lagging") == "0,1"
    even = ["The elapsed time of nodes are {2: 20.18, 3: 18.72, 0: 19.91, 1: 20.6}"]
    assert lagging_member(even) is None


def test_a_gpu_far_behind_its_neighbours_in_a_stress_test_is_the_gpus_own() -> None:
    lines = [f"GEMM [I] (ADAPTER#{gpu})  Ending with {19200.5} GFlops" for gpu in range(1, 8)]
    found = lagging_member(["GEMM [I] (ADAPTER#0)  Ending with 6698.4 GFlops", *lines])
    assert found is not None and found.signature == "lagging_gpu"


def test_numbers_without_a_performance_word_are_not_a_report() -> None:
    assert lagging_member(["epoch {0: 1, 1: 9, 2: 10, 3: 10}"]) is None
