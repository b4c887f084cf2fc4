"""Numerical divergence from the loss values progress lines report, not only from NaN strings.

A loss that jumps well above where it was and does not come back is a run that diverged: a
restart from the last checkpoint replays the same data with the same settings and usually
diverges again, so the policy stops it. A spike that comes back down is the optimiser recovering
by itself and is nothing to act on. ``LossTrend`` is a frozen value updated one reading at a
time, so the loop can keep one per attempt and an excerpt can be read in one pass.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
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
        rules = settings or DEFAULT_SETTINGS
        if not math.isfinite(loss) or (step is not None and step < rules.warmup_steps):
            return self  # NaN and Inf are the signatures' to report
        trend = replace(self, readings=self.readings + 1, last=loss)
        if self.spiking:
            if loss < rules.recovered_ratio * self.baseline:
                # Back where it was: the spike is over; the run recovered by itself.
                return replace(
                    trend,
                    baseline=math.inf,
                    peak=-math.inf,
                    peak_at=None,
                    since_spike=0,
                    lowest=min(self.lowest, loss),
                )
            trend = replace(trend, since_spike=self.since_spike + 1)
            return replace(trend, peak=loss, peak_at=at) if loss > self.peak else trend
        low = self.lowest
        if (
            math.isfinite(low)
            and low >= rules.min_baseline
            and loss >= rules.spike_ratio * low
            and loss - low >= rules.min_jump
        ):
            return replace(trend, baseline=low, peak=loss, peak_at=at, since_spike=0)
        return replace(trend, lowest=min(low, loss))


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
