"""Plotly figures for the console, built from plain data (no models, no queries).

Views turn rows into the dataclasses below; templates embed ``figure_json(fig)`` and
``static/console/charts.js`` draws it with the vendored plotly.min.js. Keeping the figures pure
lets them be tested without a database and keeps each page's queries in one place.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta

import plotly.graph_objects as go

from detection.core.losses import AttemptCostInput, GpuHoursLost, gpu_hours_lost

# Colours follow static/console/console.css, so a chart reads like the tables beside it.
STATE_COLOURS = {
    "RUNNING": "#2f9e5b",
    "COMPLETING": "#2f9e5b",
    "COMPLETED": "#5b7bb5",
    "PENDING": "#c9a227",
    "REQUEUED": "#c9a227",
    "CANCELLED": "#98a2b3",
}
FAILED_COLOUR = "#d64545"
MARKER_STYLES = {
    "anomaly": ("x", "#d64545", 12),
    "advice": ("diamond", "#2457c5", 11),
    "milestone": ("triangle-up", "#7a3fc0", 11),
}
FONT = {"family": "system-ui, -apple-system, Segoe UI, sans-serif", "size": 12}
TIME_TITLE = "time (UTC)"
GRID = "#eef1f6"
PROGRESS_PX = 200
GAP_PX = 50


@dataclass(frozen=True)
class AttemptSpan:
    """One attempt as the timeline draws it: a bar from start to end on its own row."""

    label: str
    state: str
    nodes: tuple[str, ...]
    start: datetime
    end: datetime | None
    gpus: int = 0
    time_to_resume_s: float | None = None
    last_step: int | None = None
    last_progress_at: datetime | None = None
    throughput: tuple[tuple[datetime, float], ...] = ()
    failed_at: datetime | None = None
    checkpoint_step: int | None = None
    checkpoint_at: datetime | None = None


@dataclass(frozen=True)
class Marker:
    """A point event on an attempt's row: an anomaly, an advice or a controller milestone."""

    kind: str  # "anomaly" | "advice" | "milestone"
    at: datetime
    attempt_label: str
    text: str


@dataclass(frozen=True)
class Timeline:
    """Everything a workload's timeline shows; ``now`` closes the bars of running attempts."""

    attempts: Sequence[AttemptSpan]
    markers: Sequence[Marker] = ()
    now: datetime | None = None


@dataclass(frozen=True)
class Losses:
    """What the workload's interruptions cost: waiting for the next attempt, hung time and the
    work done again since the last checkpoint (``detection.core.losses``)."""

    interruptions: int = 0
    resumes: list[float] = field(default_factory=list)
    lost: GpuHoursLost = GpuHoursLost()
    # None when no attempt's log showed a checkpoint: recomputation is then unknown.
    last_checkpoint_step: int | None = None
    last_checkpoint_at: datetime | None = None

    @property
    def gpu_hours_lost(self) -> float:
        return self.lost.total

    @property
    def median_time_to_resume_s(self) -> float | None:
        if not self.resumes:
            return None
        ordered = sorted(self.resumes)
        middle = len(ordered) // 2
        if len(ordered) % 2:
            return ordered[middle]
        return (ordered[middle - 1] + ordered[middle]) / 2

    @property
    def total_time_to_resume_s(self) -> float:
        return sum(self.resumes)


def losses(attempts: Sequence[AttemptSpan], failed_states: frozenset[str]) -> Losses:
    """The interruptions, times to resume and GPU-hours lost of the attempts shown."""
    resumes = [a.time_to_resume_s for a in attempts if a.time_to_resume_s is not None]
    failed = [a for a in attempts if a.state in failed_states]
    saved = [a for a in attempts if a.checkpoint_at is not None]
    newest = max(saved, key=lambda a: a.checkpoint_at or a.start, default=None)
    lost = gpu_hours_lost(
        [_cost_input(a, failed_states) for a in attempts], checkpoints_known=newest is not None
    )
    return Losses(
        interruptions=len(failed),
        resumes=resumes,
        lost=lost,
        last_checkpoint_step=newest.checkpoint_step if newest else None,
        last_checkpoint_at=newest.checkpoint_at if newest else None,
    )


def _cost_input(attempt: AttemptSpan, failed_states: frozenset[str]) -> AttemptCostInput:
    return AttemptCostInput(
        gpus=attempt.gpus,
        failed=attempt.state in failed_states,
        started_at=attempt.start,
        ended_at=attempt.end,
        failed_at=attempt.failed_at,
        last_progress_at=attempt.last_progress_at,
        checkpoint_at=attempt.checkpoint_at,
        time_to_resume_s=attempt.time_to_resume_s,
    )


def workload_timeline(timeline: Timeline) -> go.Figure:
    """Throughput and progress on top; below, one row per attempt (a bar coloured by how it
    ended, hover shows its nodes) with its anomalies, advice and milestones as markers."""
    attempts = sorted(timeline.attempts, key=lambda a: a.start)
    # Progress gets a fixed band on top; the attempts' rows grow with their number.
    rows_px = 40 + 22 * min(len(attempts), 40)
    plot_px = PROGRESS_PX + GAP_PX + rows_px
    # Axes laid out by hand: make_subplots costs more than the rest of the figure together.
    fig = go.Figure(
        layout={
            # The plot area plus the top and bottom margins.
            "height": plot_px + 70,
            "margin": {"l": 70, "r": 60, "t": 30, "b": 40},
            "font": FONT,
            "barmode": "overlay",
            "hovermode": "closest",
            "legend": {"orientation": "h", "y": 1.08, "x": 0},
            "plot_bgcolor": "#fff",
            "paper_bgcolor": "#fff",
            # The bare template: plotly's default one adds ~10 kB of JSON to every figure.
            "template": "none",
            # One shared time axis, drawn under the attempts' rows at the bottom.
            "xaxis": {"type": "date", "gridcolor": GRID, "anchor": "y3", "title": TIME_TITLE},
            "yaxis": {
                "domain": [1 - PROGRESS_PX / plot_px, 1],
                "title": "TFLOP/s per GPU",
                "rangemode": "tozero",
                "gridcolor": GRID,
            },
            "yaxis2": {
                "overlaying": "y",
                "side": "right",
                "title": "step",
                "showgrid": False,
                "rangemode": "tozero",
                "tickformat": ",d",
            },
            "yaxis3": {
                "domain": [0, rows_px / plot_px],
                "type": "category",
                "categoryorder": "array",
                "categoryarray": [a.label for a in attempts],
                # Reversed, so the first attempt is the top row and later ones stack below it.
                "autorange": "reversed",
                "gridcolor": GRID,
                "automargin": True,
            },
        }
    )
    _add_progress(fig, attempts)
    _add_attempt_bars(fig, attempts, timeline.now)
    for kind in MARKER_STYLES:
        _add_markers(fig, kind, [m for m in timeline.markers if m.kind == kind])
    return fig


def _add_progress(fig: go.Figure, attempts: Sequence[AttemptSpan]) -> None:
    times: list[str | None] = []
    values: list[float | None] = []
    for attempt in attempts:
        for at, value in attempt.throughput:
            times.append(_iso(at))
            values.append(value)
        # None breaks the line, so two attempts are never joined across their gap.
        times.append(None)
        values.append(None)
    fig.add_trace(
        go.Scatter(
            x=times,
            y=values,
            yaxis="y",
            mode="lines+markers",
            name="throughput",
            line={"color": "#2f9e5b", "width": 1.5},
            marker={"size": 4},
            connectgaps=False,
            hovertemplate="%{y:.1f} TFLOP/s/GPU<br>%{x}<extra></extra>",
        )
    )
    stepped = [a for a in attempts if a.last_step is not None and a.last_progress_at]
    fig.add_trace(
        go.Scatter(
            x=[_iso(a.last_progress_at) for a in stepped],
            y=[a.last_step for a in stepped],
            yaxis="y2",
            mode="markers",
            name="last step reached",
            marker={"size": 8, "symbol": "circle-open", "color": "#5b7bb5"},
            text=[a.label for a in stepped],
            hovertemplate="%{text}: step %{y}<br>%{x}<extra></extra>",
        )
    )


def _add_attempt_bars(
    fig: go.Figure, attempts: Sequence[AttemptSpan], now: datetime | None
) -> None:
    # A running attempt ends at ``now``; without one, a token minute keeps the bar visible.
    ends = [a.end or now or a.start + timedelta(minutes=1) for a in attempts]
    # Bar lengths on a date axis are milliseconds; at least a second, so none vanishes.
    durations_ms = [
        max((end - a.start).total_seconds(), 1.0) * 1000
        for a, end in zip(attempts, ends, strict=True)
    ]
    fig.add_trace(
        go.Bar(
            base=[_iso(a.start) for a in attempts],
            x=durations_ms,
            y=[a.label for a in attempts],
            yaxis="y3",
            orientation="h",
            name="attempts",
            # Any state not listed is a way of failing, so an unknown state shows as a failure.
            marker={"color": [STATE_COLOURS.get(a.state, FAILED_COLOUR) for a in attempts]},
            text=[", ".join(a.nodes) for a in attempts],
            textposition="inside",
            insidetextanchor="start",
            textfont={"color": "#fff", "size": 10},
            hovertext=[_attempt_hover(a) for a in attempts],
            hoverinfo="text",
            showlegend=False,
        )
    )


def _attempt_hover(attempt: AttemptSpan) -> str:
    parts = [f"<b>{attempt.label}</b> {attempt.state}", f"nodes: {', '.join(attempt.nodes)}"]
    if attempt.time_to_resume_s is not None:
        parts.append(f"resumed {attempt.time_to_resume_s:.0f} s after the failure")
    if attempt.last_step is not None:
        parts.append(f"last step {attempt.last_step}")
    if attempt.checkpoint_step is not None:
        parts.append(f"last checkpoint: step {attempt.checkpoint_step}")
    return "<br>".join(parts)


def _add_markers(fig: go.Figure, kind: str, markers: Sequence[Marker]) -> None:
    symbol, colour, size = MARKER_STYLES[kind]
    fig.add_trace(
        go.Scatter(
            x=[_iso(m.at) for m in markers],
            y=[m.attempt_label for m in markers],
            yaxis="y3",
            mode="markers",
            name=kind,
            marker={"symbol": symbol, "color": colour, "size": size, "line": {"width": 1}},
            hovertext=[m.text for m in markers],
            hoverinfo="text",
            # An empty kind stays in the legend, greyed, so every timeline has the same legend.
            visible=True if markers else "legendonly",
        )
    )


@dataclass(frozen=True)
class AgreementSeries:
    """One cluster's labels per day: (day, agreed, labelled)."""

    cluster: str
    days: Sequence[tuple[date, int, int]]
    min_agreement: float = 0.9


def rolling_rate(days: Sequence[tuple[date, int, int]], window: int) -> list[float | None]:
    """The agreement over the ``window`` days ending on each day (None before any label)."""
    rates: list[float | None] = []
    for index in range(len(days)):
        span = days[max(0, index - window + 1) : index + 1]
        agreed = sum(d[1] for d in span)
        labelled = sum(d[2] for d in span)
        rates.append(agreed / labelled if labelled else None)
    return rates


def agreement_chart(series: Sequence[AgreementSeries], window: int = 28) -> go.Figure:
    """Per cluster, the rolling agreement rate (line) and labels per day (bars), with the
    approval threshold as a dashed line."""
    fig = go.Figure(
        layout={
            "height": 300,
            "margin": {"l": 60, "r": 60, "t": 40, "b": 40},
            "font": FONT,
            "legend": {"orientation": "h", "y": 1.02, "yanchor": "bottom", "x": 0},
            "plot_bgcolor": "#fff",
            "paper_bgcolor": "#fff",
            # The bare template: plotly's default one adds ~10 kB of JSON to every figure.
            "template": "none",
            "barmode": "group",
            "xaxis": {"type": "date", "gridcolor": GRID},
            "yaxis": {
                "title": "agreement",
                "tickformat": ".0%",
                "range": [0, 1.05],
                "gridcolor": GRID,
            },
            "yaxis2": {
                "title": "labelled per day",
                "overlaying": "y",
                "side": "right",
                "showgrid": False,
                "rangemode": "tozero",
                "tickformat": ",d",
            },
        }
    )
    for item in series:
        days = [d[0].isoformat() for d in item.days]
        fig.add_trace(
            go.Bar(
                x=days,
                y=[d[2] for d in item.days],
                yaxis="y2",
                name=f"{item.cluster}: labelled",
                opacity=0.35,
                hovertemplate="%{x}: %{y} labelled<extra></extra>",
            )
        )
        fig.add_trace(
            go.Scatter(
                x=days,
                y=rolling_rate(item.days, window),
                yaxis="y",
                mode="lines+markers",
                name=f"{item.cluster}: agreement ({window} d)",
                # Days without labels have no rate: joining across them keeps one readable line.
                connectgaps=True,
                hovertemplate="%{x}: %{y:.0%}<extra></extra>",
            )
        )
    if series:
        # One line, at the first cluster's threshold: clusters with other policies get none.
        threshold = series[0].min_agreement
        fig.add_shape(
            type="line",
            xref="paper",
            x0=0,
            x1=1,
            yref="y",
            y0=threshold,
            y1=threshold,
            line={"dash": "dash", "color": FAILED_COLOUR, "width": 1},
        )
        fig.add_annotation(
            xref="paper",
            x=0,
            yref="y",
            y=threshold,
            text=f"threshold {threshold:.0%}",
            showarrow=False,
            xanchor="left",
            yanchor="bottom",
            font={"color": FAILED_COLOUR},
        )
    return fig


def _iso(value: datetime | None) -> str | None:
    # Plotly copies its input; strings copy and serialise faster than datetimes.
    return value.isoformat() if value else None


_JSON_ESCAPES = {ord("<"): "\\u003c", ord(">"): "\\u003e", ord("&"): "\\u0026"}


def figure_json(fig: go.Figure) -> str:
    """``fig.to_json()`` made safe inside a <script> element (log text may hold "</script>")."""
    return str(fig.to_json()).translate(_JSON_ESCAPES)


def _warm_up() -> None:
    """Plotly loads its validators on first use (a few hundred milliseconds): pay that when
    the views are imported, not on the first page someone opens."""
    at = datetime(2000, 1, 1, tzinfo=UTC)
    spans = [AttemptSpan("warm-up", "FAILED", ("n1",), at, at, throughput=((at, 1.0),))]
    markers = [Marker(kind, at, "warm-up", kind) for kind in MARKER_STYLES]
    figure_json(workload_timeline(Timeline(spans, markers, at)))
    figure_json(agreement_chart([AgreementSeries("warm-up", [(at.date(), 1, 1)])]))


_warm_up()
