"""Fixtures for the telemetry source tests.

``replay_server``: a loopback HTTP server replaying Loki / VictoriaLogs answers (``replay.py``).
``prometheus``: one real Prometheus (Debian's package) for the session, scraping two fake
dcgm-exporter nodes every second and started on a backfilled past job (``prom_support.py``).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.detection.sources.prom_support import (
    MISSING_BINARY,
    Backfill,
    FakeDcgmExporter,
    FakeGpuNode,
    PrometheusLab,
    PrometheusProcess,
    create_blocks,
    write_backfill,
)
from tests.detection.sources.replay import ReplayServer

FIRST_SCRAPE_TIMEOUT = 30.0  # the first scrape lands ~6 s after start (discovery batching)


@pytest.fixture
def replay_server() -> Iterator[ReplayServer]:
    server = ReplayServer()
    yield server
    server.close()


@pytest.fixture(scope="session")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusLab]:
    missing = [name for name in ("prometheus", "promtool") if shutil.which(name) is None]
    if missing:  # never skip: CI must install the package
        pytest.fail(MISSING_BINARY.format(name=missing[0]), pytrace=False)
    workdir = tmp_path_factory.mktemp("prometheus")
    nodes = {
        "gpu-node-01": FakeGpuNode("gpu-node-01", "Hostname"),
        "gpu-node-02": FakeGpuNode("gpu-node-02", "hostname"),
    }
    exporters = [FakeDcgmExporter(node) for node in nodes.values()]
    server = PrometheusProcess(workdir, [e.target for e in exporters])
    try:
        backfill = _backfill(workdir)
        failure = _start(server)
        if failure:
            pytest.fail(failure, pytrace=False)
        yield PrometheusLab(server.url, nodes, backfill, server)
    finally:
        server.stop()
        for exporter in exporters:
            exporter.close()


def _start(server: PrometheusProcess) -> str | None:
    """Start Prometheus and wait for its first scrape of both exporters; the reason if not."""
    try:
        server.start()
        server.wait_until(
            'count(DCGM_FI_DEV_GPU_UTIL{job="dcgm"})',
            lambda r: bool(r) and r[0]["value"][1] == "8",
            FIRST_SCRAPE_TIMEOUT,
            "8 GPU series from both exporters",
        )
    except RuntimeError as exc:
        return str(exc)
    return None


def _backfill(workdir: Path) -> Backfill:
    now = int(datetime.now(UTC).timestamp())
    start = now - 3 * 86400
    backfill = Backfill(start=start - start % 3600)
    source = workdir / "backfill.om"
    write_backfill(backfill, source)
    create_blocks(source, workdir / "data")  # before start, so the data is there at once
    return backfill
