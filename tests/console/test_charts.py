"""Plotly figures from plain data: no database, no Django."""

import json
from datetime import UTC, date, datetime, timedelta

from recovery_console.console import charts

T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
FAILED = frozenset({"FAILED", "NODE_FAIL", "REQUEUED"})


def span(label: str, start_min: float, end_min: float | None, **kwargs) -> charts.AttemptSpan:
    end = T0 + timedelta(minutes=end_min) if end_min is not None else None
    defaults = {"state": "FAILED", "nodes": ("n1", "n2"), "gpus": 16}
    return charts.AttemptSpan(
        label, start=T0 + timedelta(minutes=start_min), end=end, **(defaults | kwargs)
    )


def traces(fig) -> dict[str, dict]:
    return {trace["name"]: trace for trace in json.loads(fig.to_json())["data"]}


def test_attempts_are_bars_from_start_to_end_with_their_nodes() -> None:
    attempts = [span("job 1#0", 0, 30), span("job 1#1", 32, None, state="RUNNING")]
    fig = charts.workload_timeline(charts.Timeline(attempts, now=T0 + timedelta(minutes=40)))
    bars = traces(fig)["attempts"]
    assert bars["y"] == ["job 1#0", "job 1#1"]
    assert bars["x"] == [30 * 60_000, 8 * 60_000]  # milliseconds; a running one ends now
    assert bars["text"] == ["n1, n2", "n1, n2"]
    assert bars["marker"]["color"] == [charts.FAILED_COLOUR, charts.STATE_COLOURS["RUNNING"]]


def test_anomalies_advice_and_milestones_are_markers_on_their_attempts_row() -> None:
    markers = [
        charts.Marker("anomaly", T0 + timedelta(minutes=29), "job 1#0", "Xid 79 on n2"),
        charts.Marker("advice", T0 + timedelta(minutes=29.5), "job 1#0", "restart excluding n2"),
        charts.Marker("milestone", T0 + timedelta(minutes=31), "job 1#0", "requeue_hold"),
    ]
    fig = charts.workload_timeline(charts.Timeline([span("job 1#0", 0, 30)], markers))
    found = traces(fig)
    assert found["anomaly"]["y"] == ["job 1#0"] and found["anomaly"]["marker"]["symbol"] == "x"
    assert found["advice"]["hovertext"] == ["restart excluding n2"]
    assert found["milestone"]["x"] == [(T0 + timedelta(minutes=31)).isoformat()]


def test_throughput_lines_break_between_attempts() -> None:
    first = span("a", 0, 10, throughput=((T0, 400.0), (T0 + timedelta(minutes=1), 410.0)))
    second = span("b", 12, None, throughput=((T0 + timedelta(minutes=13), 395.0),))
    found = traces(charts.workload_timeline(charts.Timeline([first, second], now=T0)))
    assert found["throughput"]["y"] == [400.0, 410.0, None, 395.0, None]


def test_losses_count_the_wait_to_resume_and_the_hung_time_in_gpu_hours() -> None:
    hung = span("a", 0, 60, last_progress_at=T0 + timedelta(minutes=30))
    resumed = span("b", 65, None, state="RUNNING", time_to_resume_s=300.0)
    losses = charts.losses([hung, resumed], FAILED)
    # 16 GPUs hung for 30 minutes (8 GPU-hours) and waited 5 minutes (16/12 GPU-hours).
    assert round(losses.gpu_hours_lost, 3) == round(8 + 16 / 12, 3)
    assert (losses.interruptions, losses.median_time_to_resume_s) == (1, 300.0)


def test_no_resume_means_no_median() -> None:
    assert charts.losses([], FAILED).median_time_to_resume_s is None


def test_the_agreement_chart_shows_a_rolling_rate_and_the_threshold() -> None:
    days = [
        (date(2026, 11, d), agreed, labelled)
        for d, agreed, labelled in [(1, 9, 10), (2, 0, 0), (3, 1, 10)]
    ]
    fig = charts.agreement_chart([charts.AgreementSeries("research", days, 0.9)], window=2)
    found = traces(fig)
    assert found["research: agreement (2 d)"]["y"] == [0.9, 0.9, 0.1]
    assert found["research: labelled"]["y"] == [10, 0, 10]
    layout = json.loads(fig.to_json())["layout"]
    assert layout["shapes"][0]["y0"] == 0.9


def test_the_rolling_rate_is_none_before_any_label() -> None:
    days = [(date(2026, 11, 1), 0, 0), (date(2026, 11, 2), 3, 4)]
    assert charts.rolling_rate(days, window=28) == [None, 0.75]


def test_figure_json_cannot_close_its_script_element() -> None:
    marker = charts.Marker("anomaly", T0, "a", "</script><script>alert(1)</script>")
    text = charts.figure_json(
        charts.workload_timeline(charts.Timeline([span("a", 0, 1)], [marker]))
    )
    assert "</script>" not in text and "<" not in text
    anomalies = next(t for t in json.loads(text)["data"] if t["name"] == "anomaly")
    assert anomalies["hovertext"] == ["</script><script>alert(1)</script>"]
