"""``manage.py bench``: one JSON document with the stable keys, figures computed from what happened
on the simulated cluster, and the HTML report. No speed is asserted."""

import json
import os
import subprocess
from datetime import UTC, datetime, timedelta
from io import StringIO
from numbers import Real
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection

from detection.core.signatures import default_library
from lab.bench import ingest, scoring
from lab.bench.throughput import to_ere

T0 = datetime(2026, 1, 5, 8, 0, tzinfo=UTC)
SUMMARY = ("p50", "p95", "max")


def bench(django_db_blocker: Any, *args: str) -> dict[str, Any]:
    """Run the command; it creates and drops its own database, so no test transaction."""
    out = StringIO()
    with django_db_blocker.unblock():
        call_command("bench", *args, stdout=out, stderr=StringIO())
    result: dict[str, Any] = json.loads(out.getvalue())
    return result


@pytest.fixture(scope="module")
def quick(django_db_blocker: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path]:
    html = tmp_path_factory.mktemp("bench") / "bench.html"
    return bench(django_db_blocker, "--quick", "--html", str(html)), html


@pytest.fixture(scope="module")
def blind(django_db_blocker: Any) -> dict[str, Any]:
    return bench(django_db_blocker, "--quick", "--no-detection", "--hours", "0.5",
                 "--workloads", "20")  # fmt: skip


def number(value: object) -> bool:
    return isinstance(value, Real) and not isinstance(value, bool)


def test_it_prints_one_document_with_the_stable_keys(quick: tuple[dict, Path]) -> None:
    result, _ = quick
    for kind in ("crash", "hang", "straggler"):
        assert set(SUMMARY) <= set(result["detection_latency_s"][kind])
    assert all(number(result["detection_latency_s"]["crash"][k]) for k in SUMMARY)
    for key in ("action_latency_s", "time_to_resume_s"):
        assert all(number(result[key][k]) for k in ("p50", "p95"))
    assert all(number(result["detection"][k]) for k in ("precision", "recall", "f1"))
    assert number(result["attribution_accuracy"])
    assert all(number(result["hosts"][k]) for k in ("precision", "recall"))
    assert isinstance(result["false_stops"], int) and isinstance(result["missed_stops"], int)
    signatures = result["signatures"]
    assert all(number(signatures[k]) for k in ("lines_per_s", "grep_lines_per_s", "ratio_vs_grep"))
    assert "ERE" in signatures["grep_patterns"]
    assert all(number(result["cycle"][k]) for k in ("workloads", "seconds", "queries"))
    assert result["cycle"]["workloads"] == 200 and result["cycle"]["queries"] > 0
    # The controller's side at that scale: its snapshot posts and its polls of the advice list.
    snapshot = result["cycle"]["parts"]["snapshot"]
    assert number(snapshot["seconds_p95"]) and snapshot["seconds_p95"] >= snapshot["seconds"]
    reads = result["cycle"]["advice_reads"]
    assert reads["reads"] > 0 and number(reads["seconds_p95"]) and number(reads["active_advice"])
    assert number(result["peak_rss_mb"]) and result["peak_rss_mb"] > 0
    # Ingest at scale runs only when asked for, so --quick stays quick.
    assert result["ingest"] is None
    assert result["targets"]["ingest_at_scale_lines_per_s"]["met"] is None
    effective = result["effective_training_time"]
    assert all(0 <= effective[k] <= 1 for k in ("with_loop", "manual_baseline"))
    assert set(result["pages_ms"]) >= {"overview", "workloads", "workload", "nodes", "audit"}
    assert all(number(ms) for ms in result["pages_ms"].values())
    # Each page's p95 beside its median, and the slowest one against DESIGN.md's 200 ms.
    p95 = result["pages_p95_ms"]
    assert set(p95) == set(result["pages_ms"])
    assert all(p95[page] >= ms for page, ms in result["pages_ms"].items())
    pages_target = result["targets"]["pages_p95_ms"]
    assert pages_target["target"] == 200.0 and pages_target["measured"] == max(p95.values())
    runs = result["runs"]
    assert (runs["seed"], runs["nodes"], runs["simulated_hours"]) == (1, 16, 1.0)
    assert sum(runs["faults_injected"]["by_kind"].values()) == runs["faults_injected"]["total"]


def test_a_run_detects_the_faults_it_injected(quick: tuple[dict, Path]) -> None:
    result, _ = quick
    detection = result["detection"]
    assert result["runs"]["faults_injected"]["total"] > 0
    assert detection["recall"] > 0 and 0 <= detection["precision"] <= 1
    assert detection["detected_faults"] <= detection["faults"] == result["runs"]["faults_scored"]
    crash = result["detection_latency_s"]["crash"]
    assert crash["n"] > 0 and 0 <= crash["p50"] <= crash["p95"] <= crash["max"]
    assert result["advice"]["by_state"], "in action mode the controller carried advice out"
    assert result["action_latency_s"]["n"] > 0
    # The pages had the data they were asked to show.
    assert result["pages"]["audit_entries"] >= 10_000 and result["pages"]["workloads"] >= 200


def test_the_html_report_holds_plotly_charts(quick: tuple[dict, Path]) -> None:
    _, html = quick
    page = html.read_text()
    assert 'class="plotly-graph-div"' in page and "Plotly.newPlot" in page


def test_without_detection_nothing_is_detected_or_recovered(blind: dict[str, Any]) -> None:
    assert blind["runs"]["faults_injected"]["total"] > 0
    assert blind["detection"]["recall"] == 0 and blind["detection"]["anomalies"] == 0
    assert blind["detection_latency_s"]["crash"]["n"] == 0
    assert blind["action_latency_s"]["n"] == 0 and blind["advice"]["by_action"] == {}
    # With nothing detected the loop does nothing: the cluster fares as with no recovery at all.
    effective = blind["effective_training_time"]
    assert effective["with_loop"] == effective["no_recovery"]


# Worker processes read only committed rows: the test's data must be committed.
@pytest.mark.django_db(transaction=True)
def test_ingest_by_two_worker_processes_stores_what_one_stores() -> None:
    # Faults often enough that a few simulated minutes hold anomalies to compare, and not so
    # often that every job has failed (nothing restarts them here).
    figures = ingest.measure_ingest(6000, 50, seed=3, tick=lambda _: None, fault_rate=0.5)
    one, two = figures["one_worker"], figures["two_workers"]
    assert one["worker_processes"] == 1 and two["worker_processes"] == 2
    # Both setups were fed the same rounds, and each read all of them.
    assert one["lines"] == two["lines"] == figures["lines"] >= 6000 and figures["scans"] >= 1
    for setup in (one, two):
        assert all(number(setup[k]) for k in ("lines_per_s", "queries_per_1000_lines"))
        # One load and one bulk write per batch, not one per attempt.
        assert setup["queries_per_1000_lines"] < 100
        assert len(setup["peak_rss_mb_per_process"]) == setup["worker_processes"]
        assert all(number(mb) for mb in setup["peak_rss_mb_per_process"])
        assert number(setup["cores_used"])
    # Both shards did their part of every round.
    assert all(seconds > 0 for seconds in two["scan_seconds_per_process"])
    assert number(figures["two_over_one"]) and number(figures["two_over_one_from_cpu_time"])
    same = figures["same_evidence"]
    assert same["match"] and same["monitors_match"] and same["anomalies_match"]
    assert same["lines"][0] == same["lines"][1] >= figures["lines"]
    assert same["anomalies"][0] == same["anomalies"][1] > 0, "some anomalies to compare"
    assert same["progress_reports"][0] == same["progress_reports"][1] > 0
    assert figures["parallelism"]["meaningful"] == (connection.vendor != "sqlite")


# --- the parts, without a database -----------------------------------------------------------


def fault(job: str, attempt: int, kind: str = "crash", **extra: Any) -> scoring.Fault:
    values = {"category": "gpu_hardware", "attribution": "hardware", "hosts": ("n1",)} | extra
    return scoring.Fault(
        fault_id=f"F-{job}-{attempt}-{kind}",
        job_id=job,
        attempt=attempt,
        kind=kind,
        at=values.pop("at", T0),
        entry="xid79_fallen_off_bus",
        **values,
    )


def anomaly(job: str, attempt: int, family: str = "interruption", **extra: Any) -> scoring.Detected:
    values = {"category": "gpu_hardware", "attribution": "hardware", "hosts": ("n1",)} | extra
    return scoring.Detected(
        anomaly_id=hash((job, attempt, family)),
        job_id=job,
        attempt=attempt,
        family=family,
        kind="crash",
        first_evidence_at=T0,
        detected_at=T0 + timedelta(seconds=3),
        **values,
    )


def test_faults_and_anomalies_match_on_job_attempt_and_family() -> None:
    faults = [fault("1", 0), fault("1", 1), fault("2", 0, "straggler", category="straggler")]
    found = [anomaly("1", 0), anomaly("2", 0), anomaly("3", 0, hosts=("n2",))]
    scored = scoring.score(faults, found, cutoff=T0 + timedelta(hours=1))
    figures = scoring.detection(scored)
    # ("1", 1) is missed; the straggler on job 2 was reported as an interruption: a miss and a
    # false positive; job 3 had no fault at all.
    assert (figures["detected_faults"], figures["faults"]) == (1, 3)
    assert (figures["anomalies"], figures["false_positives"]) == (3, 2)
    assert scoring.latencies_by_kind(scored)["crash"] == [3.0]


def test_faults_too_late_to_judge_are_left_out_with_their_anomalies() -> None:
    late = T0 + timedelta(hours=2)
    faults = [fault("1", 0), fault("2", 0, at=late)]
    found = [anomaly("1", 0), anomaly("2", 0)]
    scored = scoring.score(faults, found, cutoff=T0 + timedelta(hours=1))
    assert scoring.detection(scored)["precision"] == 1.0
    assert len(scored.pairs) == 1


def test_a_stop_for_a_hardware_fault_is_false_and_an_unfixable_error_needs_one() -> None:
    faults = [fault("1", 0), fault("2", 0, category="application_error", unfixable=True)]
    found = [anomaly("1", 0, action="stop"), anomaly("2", 0, action="restart")]
    stops = scoring.stops(scoring.score(faults, found, cutoff=T0 + timedelta(hours=1)))
    assert (stops["false"], stops["missed"]) == (1, 1)


def test_percentiles_interpolate_between_ranks() -> None:
    assert scoring.summary([1.0, 2.0, 3.0, 4.0, 5.0]) | {"n": 5} == {
        "p50": 3.0,
        "p95": 4.8,
        "max": 5.0,
        "mean": 3.0,
        "n": 5,
    }
    assert scoring.summary([])["p95"] is None


def grep_matches(pattern: str, lines: list[str], tmp_path: Path) -> list[str]:
    log = tmp_path / "lines.log"
    log.write_text("\n".join(lines) + "\n")
    result = subprocess.run(
        ["grep", "-E", "-e", to_ere(pattern, bounded=False), str(log)],
        capture_output=True,
        text=True,
        env={**os.environ, "LC_ALL": "C"},
        check=False,
    )
    assert result.returncode in (0, 1), result.stderr
    return result.stdout.splitlines()


def test_signature_patterns_become_grep_patterns_matching_the_same_lines(tmp_path: Path) -> None:
    library = default_library()
    lines = [
        "[12.3] NVRM: Xid (PCI:0000:ab:00): 79, pid=1, GPU has fallen off the bus.",
        "[rank3]: torch.OutOfMemoryError: CUDA Out Of Memory. Tried to allocate 2.00 GiB",
        "socket: Connection reset by peer",
        " iteration      100/  1000 | lm loss: 2.1E+00 |",
    ]
    for signature in library.signatures:
        expected = [line for line in lines if signature.regex.search(line) is not None]
        assert grep_matches(signature.pattern, lines, tmp_path) == expected, signature.name


def test_the_hang_latency_follows_each_jobs_step_time(quick: tuple[dict, Path]) -> None:
    result, _ = quick
    rows = result["hang_latency"]["by_step_time"]
    assert [row["step_s"] for row in rows] == [2.0, 30.0, 120.0]
    # Simulated time, so these are the detector's decisions, not the machine's speed.
    assert all(row["met"] and row["latency_s"] <= row["target_s"] for row in rows)
    assert rows[0]["latency_s"] < rows[1]["latency_s"] < rows[2]["latency_s"]
    # A save begun and never finished waits for the checkpoint grace, not the job's minute.
    assert rows[0]["during_checkpoint_save_s"] > 1200
    assert result["targets"]["hang_latency_over_target"]["met"] is True
