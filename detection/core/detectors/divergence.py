"""Numerical divergence from the loss values progress lines report, not only from NaN strings.

A loss that jumps well above where it was and does not come back is a run that diverged: a
restart from the last checkpoint replays the same data with the same settings and usually
diverges again, so the policy stops it. A spike that comes back down is the optimiser recovering
by itself and is nothing to act on. ``LossTrend`` is a frozen value updated one reading at a
time, so the loop can keep one per attempt and an excerpt can be read in one pass.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from detection.core.interruption import Confidence, Evidence, Interruption
from fleet.core.taxonomy import Attribution, Category, ConfidenceLabel, Kind

# The name divergence findings go by (a rule key in the policy, like a signature's).
LOSS_DIVERGENCE = "loss_divergence"


@dataclass(frozen=True)
class DivergenceSettings:
    """``spike_ratio``: how far above the lowest loss before it a reading must jump;
    ``recovered_ratio``: within this factor of that low the loss has come back;
    ``settle_readings``: readings after the spike before it is judged (0 for a finished
    excerpt, which shows all there is); ``min_jump`` ignores tiny absolute changes of losses near
    zero, whose ratios mean little."""

    spike_ratio: float = 1.5
    recovered_ratio: float = 1.05
    settle_readings: int = 5
    min_readings: int = 3
    min_jump: float = 0.05
    min_baseline: float = 1e-3
    # The first steps of a run swing widely while the optimiser warms up.
    warmup_steps: int = 100


DEFAULT_SETTINGS = DivergenceSettings()


@dataclass(frozen=True)
class LossTrend:
    """The loss readings of one run so far, reduced to what the verdict needs: the lowest loss,
    and the spike under way (the low before it, its peak so far, readings since it began)."""

    readings: int = 0
    lowest: float = math.inf
    baseline: float = math.inf  # finite while a spike is under way
    peak: float = -math.inf
    peak_at: int | None = None
    since_spike: int = 0
    last: float | None = None

    @property
    def spiking(self) -> bool:
        return math.isfinite(self.baseline)

    def add(
        self,
        loss: float,
        at: int | None = None,
        step: int | None = None,
        settings: DivergenceSettings | None = None,
    ) -> LossTrend:
        """The trend after one more reading (``at``: a line number or a step, for evidence;
        ``step``: the training step, when the line shows it, so warm-up readings are left out)."""
        state = _next(self._state(), loss, at, step, settings or DEFAULT_SETTINGS)
        return self if state is None else LossTrend(*state)

    def add_many(
        self,
        readings: Iterable[tuple[float, int | None]],
        settings: DivergenceSettings | None = None,
    ) -> tuple[LossTrend, int | None]:
        """The trend after a scan's readings ``(loss, step)`` of one attempt, in order, with
        one copy however many there were; each reading is at its step, or at its number among
        the readings when the line shows no step. Also the index of the last reading that moved
        the peak (None: none did)."""
        rules = settings or DEFAULT_SETTINGS
        state = self._state()
        moved = None
        for index, (loss, step) in enumerate(readings):
            at = step if step is not None else state[0] + 1
            after = _next(state, loss, at, step, rules)
            if after is None:
                continue
            if after[4] != state[4]:
                moved = index
            state = after
        return (self if state == self._state() else LossTrend(*state)), moved

    def _state(self) -> _TrendState:
        return (
            self.readings,
            self.lowest,
            self.baseline,
            self.peak,
            self.peak_at,
            self.since_spike,
            self.last,
        )


# LossTrend's fields in order, as a plain tuple: a scan folds thousands of readings.
_TrendState = tuple[int, float, float, float, "int | None", int, "float | None"]


def _next(
    state: _TrendState, loss: float, at: int | None, step: int | None, rules: DivergenceSettings
) -> _TrendState | None:
    """The trend after one reading, or None when the reading does not count."""
    if not math.isfinite(loss) or (step is not None and step < rules.warmup_steps):
        return None  # NaN and Inf are the signatures' to report
    readings, lowest, baseline, peak, peak_at, since_spike, _ = state
    readings += 1
    if math.isfinite(baseline):  # a spike is under way
        if loss < rules.recovered_ratio * baseline:
            # Back where it was: the spike is over; the run recovered by itself.
            return (readings, min(lowest, loss), math.inf, -math.inf, None, 0, loss)
        if loss > peak:
            peak, peak_at = loss, at
        return (readings, lowest, baseline, peak, peak_at, since_spike + 1, loss)
    if (
        math.isfinite(lowest)
        and lowest >= rules.min_baseline
        and loss >= rules.spike_ratio * lowest
        and loss - lowest >= rules.min_jump
    ):
        return (readings, lowest, lowest, loss, at, 0, loss)
    return (readings, min(lowest, loss), baseline, peak, peak_at, since_spike, loss)


@dataclass(frozen=True)
class Divergence:
    baseline: float
    peak: float
    last: float
    peak_at: int | None

    def describe(self) -> str:
        return (
            f"the loss jumped from {self.baseline:.4g} to {self.peak:.4g} and did not come back"
            f" (last {self.last:.4g}, {self.last / self.baseline:.2f}x where it was)"
        )


def diverged(trend: LossTrend, settings: DivergenceSettings | None = None) -> Divergence | None:
    """The spike that did not recover, or None while the loss behaves (or is too short a
    series to say)."""
    rules = settings or DEFAULT_SETTINGS
    if not trend.spiking or trend.readings < rules.min_readings or trend.last is None:
        return None
    if trend.since_spike < rules.settle_readings:
        return None
    return Divergence(trend.baseline, trend.peak, trend.last, trend.peak_at)


def divergence_interruption(
    job_id: str, found: Divergence, at: datetime, line: str = ""
) -> Interruption:
    """The loop's interruption for a run whose loss diverged (``at``: when the peak was read)."""
    what = found.describe()
    summary = what[:1].upper() + what[1:]
    return Interruption(
        kind=Kind.CRASH,
        category=Category.NUMERICAL_DIVERGENCE,
        attribution=Attribution.APPLICATION,
        confidence=Confidence(0.75, ConfidenceLabel.SUPPORTED),
        root_cause=LOSS_DIVERGENCE,
        summary=summary,
        explanation=f"{summary}: the run diverged, and a restart from the same checkpoint with"
        " the same settings diverges again.",
        evidence=(Evidence(text=line or summary, signature=LOSS_DIVERGENCE, source="log", at=at),),
        first_evidence_at=at,
        signature=LOSS_DIVERGENCE,
        job_id=job_id,
    )
