"""DCGM metrics from a real Prometheus (Debian's package) scraping a fake dcgm-exporter, plus
recorded Prometheus / VictoriaMetrics answers for what one server cannot show."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import pytest

from detection.core.telemetry import MetricSample
from detection.sources.base import SourceUnavailable
from detection.sources.prometheus import (
    XID_METRIC,
    MetricScrape,
    PrometheusConfig,
    PrometheusSource,
    vanished_series,
)
from tests.detection.sources.prom_support import PrometheusLab
from tests.detection.sources.replay import ReplayServer, Reply, fixture_bytes

T = TypeVar("T")
GAUGES = {
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_PROF_SM_ACTIVE",
    "DCGM_FI_DEV_SM_CLOCK",
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
    XID_METRIC,
}


def prom(lab: PrometheusLab, **options: Any) -> PrometheusSource:
    return PrometheusSource(PrometheusConfig(base_url=lab.url, **options))


def wait_for(produce: Callable[[], T], done: Callable[[T], bool], what: str) -> T:
    """Poll until the next scrapes (every 1 s) show the change; fail after 20 s."""
    deadline = time.monotonic() + 20
    while True:
        value = produce()
        if done(value):
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"{what} not seen within 20 s; last value {value!r}")
        time.sleep(0.2)


def of(scrape: MetricScrape, host: str, gpu: int, name: str) -> list[MetricSample]:
    return [s for s in scrape.samples if (s.host, s.gpu, s.name) == (host, gpu, name)]


@pytest.mark.prometheus
def test_a_scrape_reads_every_gauge_of_every_gpu(prometheus: PrometheusLab) -> None:
    scrape = prom(prometheus).scrape()

    for gpu in range(4):
        names = {s.name for s in scrape.samples if (s.host, s.gpu) == ("gpu-node-01", gpu)}
        assert names == GAUGES  # ECC is off by default in dcgm-exporter: absent, not an error
    assert of(scrape, "gpu-node-01", 2, "DCGM_FI_DEV_SM_CLOCK")[0].value == 1980
    assert of(scrape, "gpu-node-01", 2, "DCGM_FI_PROF_SM_ACTIVE")[0].value == 0.8
    assert scrape.dropped == 0


@pytest.mark.prometheus
def test_both_spellings_of_the_host_label_are_read(prometheus: PrometheusLab) -> None:
    # gpu-node-01 is labelled Hostname= (released dcgm-exporter), gpu-node-02 hostname= (main).
    scrape = prom(prometheus).scrape()

    assert {s.host for s in scrape.samples} == {"gpu-node-01", "gpu-node-02"}
    assert of(scrape, "gpu-node-02", 0, "DCGM_FI_DEV_GPU_UTIL")[0].value == 90


@pytest.mark.prometheus
def test_the_slurm_job_is_hpc_job_not_the_scrape_job(prometheus: PrometheusLab) -> None:
    source = prom(prometheus)

    everything = source.scrape()
    mine = source.scrape(job_id="4242")
    other = source.scrape(job_id="9999")

    assert {s.job_id for s in everything.samples} == {"4242"}  # never "dcgm"
    assert len(mine.samples) == len(everything.samples)
    assert other.samples == ()  # no series for a job is a normal answer


@pytest.mark.prometheus
def test_an_xid_reads_as_the_last_code_with_one_series_per_gpu(prometheus: PrometheusLab) -> None:
    source = prom(prometheus)
    server, node = prometheus.server, prometheus.nodes["gpu-node-02"]
    since = datetime.now(UTC)
    wait_for(
        lambda: server.query('timestamp(DCGM_FI_DEV_XID_ERRORS{hostname="gpu-node-02",gpu="1"})'),
        lambda r: bool(r) and float(r[0]["value"][1]) > since.timestamp(),
        "a scrape with Xid 0",
    )

    with node.lock:
        node.xid[1] = 79  # GPU has fallen off the bus: err_code/err_msg labels change too
    after = wait_for(
        source.scrape,
        lambda s: [x.value for x in of(s, "gpu-node-02", 1, XID_METRIC)] == [79],
        "Xid 79 on gpu-node-02 GPU 1",
    )
    # The 79 sample is stamped with its scrape's start, up to a step after the last step <= now.
    until = datetime.now(UTC) + timedelta(seconds=1)
    history = source.range_samples("4242", since, until, timedelta(seconds=0.5))
    raw = server.query(
        'count(last_over_time(DCGM_FI_DEV_XID_ERRORS{gpu="1",hostname="gpu-node-02"}[1m]))'
    )

    xids = [s for s in history if (s.host, s.gpu, s.name) == ("gpu-node-02", 1, XID_METRIC)]
    assert raw[0]["value"][1] == "2"  # two raw series: err_code="0" and err_code="79"
    assert len({s.at for s in xids}) == len(xids)  # but one value per step for the GPU
    assert (xids[0].value, xids[-1].value) == (0, 79)
    assert [x.value for x in of(after, "gpu-node-02", 2, XID_METRIC)] == [0]


@pytest.mark.prometheus
def test_a_gpu_that_stops_reporting_is_named_as_vanished(prometheus: PrometheusLab) -> None:
    source = prom(prometheus)
    node = prometheus.nodes["gpu-node-02"]
    before = source.scrape()
    try:
        with node.lock:
            node.gone.add(3)
        after = wait_for(
            source.scrape,
            lambda s: not [x for x in s.samples if (x.host, x.gpu) == ("gpu-node-02", 3)],
            "gpu-node-02 GPU 3 gone",
        )
    finally:
        with node.lock:
            node.gone.discard(3)

    assert vanished_series(before.samples, after.samples) == {("gpu-node-02", 3)}


@pytest.mark.prometheus
def test_a_past_jobs_history_comes_from_a_range_query(prometheus: PrometheusLab) -> None:
    backfill = prometheus.backfill
    start = datetime.fromtimestamp(backfill.start, UTC)
    end = start + timedelta(seconds=backfill.duration - 60)

    samples = prom(prometheus).range_samples(backfill.job, start, end, timedelta(minutes=1))

    xid = {(s.gpu, s.at): s.value for s in samples if s.name == XID_METRIC}
    util = {(s.gpu, s.at): s.value for s in samples if s.name == "DCGM_FI_DEV_GPU_UTIL"}
    fault = datetime.fromtimestamp(backfill.fault, UTC)
    first_48 = min(at for (gpu, at), value in xid.items() if value == 48)
    assert {(s.host, s.job_id) for s in samples} == {("gpu-node-07", "4100")}
    assert first_48 == fault and {gpu for gpu, _ in xid if xid[gpu, fault] == 48} == {1}
    assert Counter(gpu for gpu, _ in xid) == Counter({0: 120, 1: 120})  # one value per step
    assert util[1, fault] == 0 and util[1, fault - timedelta(minutes=1)] == 88


@pytest.mark.prometheus
def test_a_query_prometheus_refuses_is_unavailable_with_its_reason(
    prometheus: PrometheusLab,
) -> None:
    source = prom(prometheus, selector='cluster="a",,')

    with pytest.raises(SourceUnavailable, match=r"HTTP 400 Bad Request: bad_data: .*parse error"):
        source.scrape()


# --- recorded answers -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fixture", "at"),
    [
        ("prometheus/prometheus_instant_xid.json", 1795950248.874),
        ("prometheus/victoriametrics_instant_xid.json", 1795950912),
    ],
)
def test_float_and_integer_timestamps_are_both_read(
    replay_server: ReplayServer, fixture: str, at: float
) -> None:
    replay_server.app = lambda request: Reply(body=fixture_bytes(fixture))
    source = PrometheusSource(PrometheusConfig(base_url=replay_server.url, metrics=(XID_METRIC,)))

    scrape = source.scrape()

    assert scrape.samples == (
        MetricSample(
            datetime.fromtimestamp(at, UTC),
            "gpu-node-02",
            2,
            XID_METRIC,
            79.0,
            "4242",
            # dcgm-exporter's pci_bus_id: what ties the GPU to a kernel Xid line's address.
            "00000000:4C:00.0",
        ),
    )
    query = replay_server.requests[0].param("query") or ""
    assert "max without (err_code, err_msg)" in query


def test_an_error_answer_is_unavailable(replay_server: ReplayServer) -> None:
    replay_server.app = lambda request: Reply(400, fixture_bytes("prometheus/error_bad_data.json"))
    source = PrometheusSource(PrometheusConfig(base_url=replay_server.url))

    with pytest.raises(SourceUnavailable) as caught:
        source.scrape()

    assert str(caught.value) == (
        f"prometheus at {replay_server.url}: HTTP 400 Bad Request: bad_data: invalid parameter "
        '"query": 1:5: parse error: unexpected end of input inside braces'
    )


@pytest.mark.parametrize(
    "body",
    [
        b"<html>oops</html>",
        b'{"status":"success","data":{"resultType":"matrix","result":[]}}',
        b'{"status":"success","data":{"resultType":"vector","result":[{"metric":{"gpu":"0",'
        b'"Hostname":"h"},"value":[1,2]}]}}',
    ],
    ids=["html", "wrong result type", "numeric value"],
)
def test_a_garbled_answer_is_unavailable(replay_server: ReplayServer, body: bytes) -> None:
    replay_server.app = lambda request: Reply(body=body)
    source = PrometheusSource(PrometheusConfig(base_url=replay_server.url))

    with pytest.raises(SourceUnavailable, match="answered"):
        source.scrape()


def test_series_without_host_or_gpu_are_dropped_and_counted(replay_server: ReplayServer) -> None:
    body = (
        b'{"status":"success","data":{"resultType":"vector","result":['
        b'{"metric":{"__name__":"DCGM_FI_DEV_GPU_TEMP","nvswitch":"0","hostname":"h"},'
        b'"value":[1,"40"]},'
        b'{"metric":{"__name__":"DCGM_FI_DEV_GPU_TEMP","gpu":"1","hostname":"h"},'
        b'"value":[1,"NaN"]}]}}'
    )
    replay_server.app = lambda request: Reply(body=body)
    source = PrometheusSource(PrometheusConfig(base_url=replay_server.url, metrics=("X",)))

    scrape = source.scrape()

    assert scrape.dropped == 1
    assert [(s.host, s.gpu) for s in scrape.samples] == [("h", 1)]


def test_a_range_prometheus_would_refuse_is_refused_before_asking() -> None:
    source = PrometheusSource(PrometheusConfig(base_url="http://127.0.0.1:9"))
    start = datetime(2026, 11, 1, tzinfo=UTC)

    with pytest.raises(ValueError, match="11000 points"):
        source.range_samples("1", start, start + timedelta(days=1), timedelta(seconds=1))


def test_vanished_series_names_the_gpus_missing_from_the_second_scrape() -> None:
    at = datetime(2026, 11, 29, tzinfo=UTC)

    def sample(host: str, gpu: int, name: str = "DCGM_FI_DEV_GPU_UTIL") -> MetricSample:
        return MetricSample(at, host, gpu, name, 1.0)

    before = [sample("a", 0), sample("a", 1), sample("b", 0), sample("b", 1, XID_METRIC)]
    after = [sample("a", 0), sample("b", 0), sample("c", 0)]

    assert vanished_series(before, after) == {("a", 1), ("b", 1)}
    assert vanished_series(before, after, metric=XID_METRIC) == {("b", 1)}
    assert vanished_series(after, after) == frozenset()
