"""The batched ingest path records exactly what the straightforward one did: the same simulated
output, scanned once through the scan as it is and once through a reference that loads, feeds
and saves each attempt's monitor on its own and parses progress with the stock ``re2`` wrapper,
leaves the same detector state, evidence and cursors."""

from datetime import UTC, datetime
from typing import Any

import pytest
import re2

from detection import monitors, scan
from detection.core import progress
from detection.models import Anomaly, AttemptMonitor, PendingLines, SourceCursor
from detection.monitors import observing
from detection.scan import diagnosis, reading, routing
from detection.sources.config import ClusterSources
from detection.sources.memory import MemoryLogSource, MemoryMetrics
from fleet import services
from lab.demo.runner import SimulationRunner
from lab.simulator import SimulatedCluster, SimulationConfig

pytestmark = pytest.mark.django_db
T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
SIMULATION = {
    "seed": 5,
    "nodes": 16,
    "workloads": 6,
    "nodes_per_job": [2, 3],
    "fault_rate": 2.0,
    "progress_interval_s": 2.0,
    "checkpoint_interval_s": 300.0,
    "manual_recovery": {"notice_s": 60.0, "act_s": 30.0},
}
# Small batches, so a scan reads several and attempts span batches.
BATCH_LINES = 300
STEP_S = 20.0
STEPS = 90


def reference_parse_progress(text: str, custom: Any | None = None) -> progress.Progress | None:
    """Progress parsing as it was: every style in order through the stock wrapper."""
    if len(text) > progress.MAX_PROGRESS_LINE:
        return None
    if custom is not None:
        found = custom.search(text)
        if found:
            return progress._from_custom(found)
    for style, pattern, _ in progress._STYLES:
        found = re2.compile(pattern.pattern).search(text)
        if found:
            return progress._from_match(style, found.groupdict())
    return None


def reference_process_lines(cluster, lines, now, config, summary, part=scan.WHOLE) -> None:
    """One load and one save of each attempt's monitor per batch, as the scan did."""
    by_attempt, orphans = routing._route_lines(cluster, lines, now, part)
    for job_id, job_lines in orphans.items():
        PendingLines.hold(cluster, job_id, job_lines)
    for attempt, attempt_lines in by_attempt:
        monitor = monitors.load(attempt)
        update = monitors.observe(monitor, attempt_lines, config)
        monitor.save()
        if update.new_matches:
            diagnosis._diagnose_from_logs(attempt, monitor, now, config, summary)


def run(name: str) -> None:
    cluster = services.create_cluster(
        "test", name, scheduler={"backend": "simulated", "simulation": SIMULATION}
    )
    runner = SimulationRunner(cluster, start=T0, in_process=True)
    runner.sources = ClusterSources({"memory": MemoryLogSource(batch=BATCH_LINES)}, MemoryMetrics())
    for _ in range(STEPS):
        runner.step(STEP_S)
        scan.scan_cluster(cluster, runner.now, runner.sources)


def recorded(name: str) -> dict[str, Any]:
    """What the scans stored for the cluster, keyed by job and attempt, without row ids."""
    key = ("attempt__job_id", "attempt__attempt_index")
    # Every field the detectors keep, so one added later cannot be dropped by the bulk write.
    kept = [
        f.attname
        for f in AttemptMonitor._meta.concrete_fields
        if f.attname not in {"id", "attempt_id", "updated_at", "created_at"}
    ]
    state = AttemptMonitor.objects.filter(attempt__cluster__name=name).values_list(*key, *kept)
    anomalies = Anomaly.objects.filter(cluster__name=name).values_list(
        *key,
        "family",
        "kind",
        "category",
        "root_cause",
        "implicated_hosts",
        "evidence",
        "occurrences",
        "first_evidence_at",
        "detected_at",
    )
    cursors = SourceCursor.objects.filter(cluster__name=name).values_list(
        "source", "cursor", "newest_line_at"
    )
    return {
        "monitors": sorted(state, key=repr),
        "anomalies": sorted(anomalies, key=repr),
        "cursors": sorted(cursors, key=repr),
    }


def test_the_batched_ingest_records_what_the_straightforward_one_did(monkeypatch) -> None:
    run("fast")
    with monkeypatch.context() as patched:
        patched.setattr(reading, "_process_lines", reference_process_lines)
        patched.setattr(observing, "parse_progress", reference_parse_progress)
        run("reference")
    fast, reference = recorded("fast"), recorded("reference")
    assert len(fast["anomalies"]) >= 3, "the run should record enough anomalies to mean something"
    assert sum(m[5] for m in fast["monitors"]) > 10 * BATCH_LINES
    assert fast == reference


def test_progress_parsing_agrees_with_the_stock_wrapper_on_simulated_output() -> None:
    simulator = SimulatedCluster(SimulationConfig(seed=3, nodes=32, workloads=16, fault_rate=0.5))
    texts = [line.text for _ in range(40) for line in simulator.advance(60.0)]
    texts += [
        "iteration 7/10 | lm loss: nan | 進捗",
        "steps: 12 loss: 0.5 samples/sec: 3.2 é",
        "  3%|▎ | 30/1000 [00:10<05:00,  2.99s/it, loss=1.5]",
        "{'loss': inf, 'grad_norm': 1.0, 'epoch': 0.01}",
        "[Rank 3] step=99, skipped=0, lr=[0.1]",
        "it/s but no bar",
    ]
    assert len(texts) > 1000
    # Compared as text: a NaN loss is never equal to itself.
    assert [repr(progress.parse_progress(t)) for t in texts] == [
        repr(reference_parse_progress(t)) for t in texts
    ]
