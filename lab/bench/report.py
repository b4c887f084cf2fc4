"""The benchmark's one-page HTML report: Plotly charts and tables from the JSON document and the
samples behind it. Plain data in, one self-contained file out (Plotly's JS inlined)."""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import plotly.graph_objects as go
from plotly.offline import get_plotlyjs
from plotly.subplots import make_subplots

if TYPE_CHECKING:
    from .runs import Details

VENDORED_PLOTLY = Path(__file__).resolve().parents[2] / "static" / "vendor" / "plotly.min.js"
FONT = {"family": "system-ui, -apple-system, Segoe UI, sans-serif", "size": 12}
COLOURS = {"ours": "#2457c5", "grep": "#98a2b3", "target": "#d64545", "good": "#2f9e5b"}
# The vendor's published means (seconds), for comparison.
REFERENCE = {"detection": 69.0, "action": 94.0}


def write(path: Path, result: dict[str, Any], details: Details) -> None:
    path.write_text(render(result, details), encoding="utf-8")


def render(result: dict[str, Any], details: Details) -> str:
    figures = [
        ("Detection latency by kind (fault start → anomaly stored)", _detection(details)),
        ("Action latency and time to resumed training", _action(result, details)),
        ("Categories: injected (rows) against detected (columns)", _confusion(result)),
        ("Signature matching throughput, one core", _throughput(result)),
        ("One cycle at scale, by part (median)", _cycle(result)),
        ("Hang latency by step time (last progress → anomaly stored)", _hangs(result)),
        ("Console pages (median and p95 response)", _pages(result)),
        ("Effective training time", _effective(result)),
    ]
    sections = "\n".join(
        f"<section><h2>{html.escape(title)}</h2>{_div(fig, n)}</section>"
        for n, (title, fig) in enumerate(figures)
    )
    raw = html.escape(json.dumps(result, indent=2))
    return PAGE.format(
        plotly=_plotly_js(),
        runs=_runs_table(result["runs"]),
        targets=_targets_table(result),
        sections=sections,
        raw=raw,
    )


def _plotly_js() -> str:
    """The console's vendored copy when it is there, else the one plotly ships."""
    if VENDORED_PLOTLY.exists():
        return VENDORED_PLOTLY.read_text(encoding="utf-8")
    return str(get_plotlyjs())


def _div(fig: go.Figure, n: int) -> str:
    fig.update_layout(font=FONT, margin={"l": 60, "r": 20, "t": 60, "b": 60}, height=400)
    return str(fig.to_html(full_html=False, include_plotlyjs=False, div_id=f"chart-{n}"))


def _box(name: str, values: Sequence[float], colour: str) -> go.Box:
    return go.Box(y=list(values), name=f"{name} (n={len(values)})", boxpoints="all",
                  jitter=0.4, pointpos=0, marker={"color": colour, "size": 4})  # fmt: skip


def _detection(details: Details) -> go.Figure:
    kinds = list(details.detection_latencies)
    fig = make_subplots(rows=1, cols=len(kinds), subplot_titles=kinds)
    for column, kind in enumerate(kinds, start=1):
        values = details.detection_latencies[kind]
        fig.add_trace(_box(kind, values, COLOURS["ours"]), 1, column)
        if kind == "crash":
            fig.add_hline(y=15, line={"color": COLOURS["target"], "dash": "dash"}, row=1,
                          col=column, annotation_text="target p95 ≤ 15 s")  # fmt: skip
        fig.add_hline(y=REFERENCE["detection"], line={"color": COLOURS["grep"]}, row=1,
                      col=column, annotation_text="vendor: mean 69 s")  # fmt: skip
    fig.update_yaxes(title="seconds", rangemode="tozero")
    fig.update_layout(showlegend=False)
    return fig


def _action(result: dict[str, Any], details: Details) -> go.Figure:
    fig = make_subplots(rows=1, cols=2, subplot_titles=("anomaly → action", "failure → resumed"))
    fig.add_trace(_box("simulated clock", details.action_latencies, COLOURS["ours"]), 1, 1)
    fig.add_trace(_box("processing (wall)", details.action_wall, COLOURS["grep"]), 1, 1)
    fig.add_trace(_box("time to resume", details.resume_times, COLOURS["good"]), 1, 2)
    fig.add_hline(y=30, line={"color": COLOURS["target"], "dash": "dash"}, row=1, col=1,
                  annotation_text="target p95 ≤ 30 s")  # fmt: skip
    fig.add_hline(y=REFERENCE["action"], line={"color": COLOURS["grep"]}, row=1, col=1,
                  annotation_text="vendor: mean 94 s")  # fmt: skip
    fig.update_yaxes(title="seconds")
    fig.update_layout(showlegend=False)
    return fig


def _confusion(result: dict[str, Any]) -> go.Figure:
    matrix = result["confusion"]
    counts = matrix["counts"]
    fig = go.Figure(
        go.Heatmap(
            z=counts,
            x=matrix["detected"],
            y=matrix["truth"],
            colorscale="Blues",
            text=counts,
            texttemplate="%{text}",
            hovertemplate="injected %{y}<br>detected %{x}<br>%{z}<extra></extra>",
        )
    )
    # First category at the top, as the matrix reads in the JSON document.
    fig.update_yaxes(autorange="reversed", title="injected")
    fig.update_xaxes(title="detected", tickangle=-25)
    return fig


def _throughput(result: dict[str, Any]) -> go.Figure:
    s = result["signatures"]
    names = ["signature library (RE2)", "grep -E (bounds dropped)", "grep -E (exact bounds)"]
    values = [s["lines_per_s"], s["grep_lines_per_s"], s["grep_exact_bounds_lines_per_s"]]
    colours = [COLOURS["ours"], COLOURS["grep"], COLOURS["grep"]]
    fig = go.Figure(go.Bar(x=names, y=values, marker={"color": colours}, text=values))
    fig.add_hline(y=300_000, line={"color": COLOURS["target"], "dash": "dash"},
                  annotation_text="target ≥ 300k lines/s")  # fmt: skip
    fig.update_yaxes(title="lines per second")
    return fig


def _hangs(result: dict[str, Any]) -> go.Figure:
    rows = result["hang_latency"]["by_step_time"]
    steps = [row["step_s"] for row in rows]
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=steps, y=[row["latency_s"] for row in rows], mode="lines+markers",
                             name="measured", marker={"color": COLOURS["ours"]}))  # fmt: skip
    fig.add_trace(go.Scatter(x=steps, y=[row["target_s"] for row in rows], mode="lines",
                             name="target: max(5 × step, 60 s) + one poll",
                             line={"color": COLOURS["target"], "dash": "dash"}))  # fmt: skip
    saving = [(row["step_s"], row["during_checkpoint_save_s"])
              for row in rows if "during_checkpoint_save_s" in row]  # fmt: skip
    if saving:
        fig.add_trace(go.Scatter(x=[x for x, _ in saving], y=[y for _, y in saving],
                                 mode="markers", name="silent during a visible checkpoint save",
                                 marker={"symbol": "diamond", "size": 9}))  # fmt: skip
    fig.update_xaxes(title="step time (s)", type="log")
    fig.update_yaxes(title="seconds", type="log")
    return fig


def _cycle(result: dict[str, Any]) -> go.Figure:
    cycle = result["cycle"]
    fig = go.Figure()
    for name, part in cycle["parts"].items():
        fig.add_trace(
            go.Bar(
                x=[f"{cycle['workloads']} workloads, {cycle['gpus']} GPUs"],
                y=[part["seconds"]],
                name=f"{name} ({part['queries']} queries)",
            )
        )
    fig.add_hline(y=cycle["poll_interval_s"], line={"color": COLOURS["target"], "dash": "dash"},
                  annotation_text="poll interval")  # fmt: skip
    fig.update_layout(barmode="stack")
    fig.update_yaxes(title="seconds")
    return fig


def _pages(result: dict[str, Any]) -> go.Figure:
    medians = {k: v for k, v in result["pages_ms"].items() if v is not None}
    # Reports written before the p95 was measured have only the medians.
    p95s = result.get("pages_p95_ms") or {}
    fig = go.Figure()
    values = list(medians.values())
    fig.add_trace(go.Bar(x=list(medians), y=values, name="median", text=values,
                         marker={"color": COLOURS["ours"]}))  # fmt: skip
    if p95s:
        shown = [p95s.get(page) for page in medians]
        fig.add_trace(go.Bar(x=list(medians), y=shown, name="p95", text=shown,
                             marker={"color": COLOURS["grep"]}))  # fmt: skip
    target = result.get("targets", {}).get("pages_p95_ms", {}).get("target")
    if target is not None:
        fig.add_hline(y=target, line={"color": COLOURS["target"], "dash": "dash"},
                      annotation_text=f"target p95 ≤ {target:g} ms")  # fmt: skip
    audit = result["pages"]["audit_entries"]
    fig.update_layout(barmode="group")
    fig.update_yaxes(title=f"ms ({audit} audit entries, {result['pages']['workloads']} workloads)")
    return fig


def _effective(result: dict[str, Any]) -> go.Figure:
    e = result["effective_training_time"]
    names = ["with the loop", "manual recovery (30 + 15 min)", "no recovery"]
    values = [e["with_loop"], e["manual_baseline"], e["no_recovery"]]
    colours = [COLOURS["ours"], COLOURS["grep"], COLOURS["grep"]]
    fig = go.Figure(go.Bar(x=names, y=values, text=values, marker={"color": colours}))
    fig.update_yaxes(title="productive ÷ wall GPU time", range=[0, 1])
    return fig


def _runs_table(runs: dict[str, Any]) -> str:
    shown = {
        "seed": runs["seed"],
        "cluster": f"{runs['nodes']} nodes, {runs['workloads']} workloads",
        "simulated": f"{runs['simulated_hours']} h at a {runs['poll_interval_s']:g} s poll",
        "faults injected": runs["faults_injected"]["total"],
        "faults scored": runs["faults_scored"],
        "database": runs["vendor"],
        "wall": f"{runs['wall_seconds']} s",
    }
    return _table([], [[k, v] for k, v in shown.items()])


def _targets_table(result: dict[str, Any]) -> str:
    rows = []
    for name, target in result["targets"].items():
        met = {True: "✓", False: "✗ short", None: "—"}[target["met"]]
        rows.append([name, target["target"], target["measured"], met])
    rows.append(["vendor reference", "mean 69 s detect, 94 s act", "", ""])
    return _table(["DESIGN.md §5", "target", "measured", ""], rows)


def _table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows
    )
    thead = f"<thead><tr>{head}</tr></thead>" if header else ""
    return f"<table>{thead}<tbody>{body}</tbody></table>"


PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Recovery Console benchmark</title>
<script>{plotly}</script>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2rem; color: #1d2433; max-width: 1200px; }}
table {{ border-collapse: collapse; margin: 1rem 0; }}
td, th {{ border: 1px solid #d0d5dd; padding: .3rem .6rem; text-align: left; }}
section {{ margin: 2rem 0; }}
.grid {{ display: flex; gap: 2rem; flex-wrap: wrap; }}
pre {{ background: #f4f5f7; padding: 1rem; overflow: auto; font-size: 11px; }}
</style></head>
<body>
<h1>Recovery Console benchmark</h1>
<div class="grid">{runs}{targets}</div>
{sections}
<details><summary>The JSON document</summary><pre>{raw}</pre></details>
</body></html>
"""
