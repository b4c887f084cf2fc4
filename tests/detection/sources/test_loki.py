"""The Loki client against a replay of Loki's documented ``query_range`` answers."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from detection.sources.base import LogBatch, SourceUnavailable
from detection.sources.httpclient import HttpAuth
from detection.sources.loki import LokiConfig, LokiSource
from detection.sources.paging import LabelNames, PageLimits, ns_to_datetime
from tests.detection.sources.replay import (
    LokiEntry,
    LokiReplay,
    ReplayServer,
    Reply,
    fixture_bytes,
    loki_entries_from_push,
    text_reply,
)

JOB_QUERY = '{job="slurm"} | slurm_job_id="$job_id"'
T0 = 1795950000000000000  # the dataset's first line, ns
AFTER_DATASET = ns_to_datetime(T0) + timedelta(minutes=30)


def dataset() -> list[LokiEntry]:
    return loki_entries_from_push(json.loads(fixture_bytes("loki/push_slurm_jobs.json")))


def loki(server: ReplayServer, **options: Any) -> LokiSource:
    options.setdefault("limits", PageLimits(initial_lookback=timedelta(hours=1)))
    return LokiSource(LokiConfig(base_url=server.url, **options))


def drain(source: LokiSource, cursor: dict[str, Any] | None, now: datetime) -> list[str]:
    """Every line from ``cursor`` on, fetching until nothing more waits."""
    texts: list[str] = []
    while True:
        batch = source.fetch(cursor, now)
        texts += [line.text for line in batch.lines]
        cursor = json.loads(json.dumps(batch.cursor))
        if not batch.more:
            return texts


def job_1234_in_order() -> list[str]:
    chosen = [e for e in dataset() if e.metadata.get("slurm_job_id") == "1234"]
    return [e.line for e in sorted(chosen, key=lambda e: (e.ts, e.line))]


def test_the_documented_answer_becomes_lines_oldest_first(replay_server: ReplayServer) -> None:
    replay_server.app = lambda request: Reply(body=fixture_bytes("loki/query_range_streams.json"))
    start = ns_to_datetime(1569266492548155000)

    batch = loki(replay_server).fetch(None, start + timedelta(minutes=5))

    assert [(line.at, line.text) for line in batch.lines] == [
        (start, "bar"),
        (ns_to_datetime(1569266497240578000), "foo"),
    ]
    assert batch.lines[0].job_id is None and batch.lines[0].host is None
    assert batch.more is False


def test_three_element_values_carry_structured_metadata(replay_server: ReplayServer) -> None:
    body = fixture_bytes("loki/query_range_categorize_labels.json")
    replay_server.app = lambda request: Reply(body=body)
    labels = LabelNames(job_id=("foo",), host=("msg",))

    batch = loki(replay_server, labels=labels, categorize_labels=True).fetch(
        None, ns_to_datetime(123456789012347) + timedelta(seconds=1)
    )

    assert [(line.text, line.job_id, line.host) for line in batch.lines] == [
        ("super line", None, None),
        ("super line with labels", "a", None),
        ("super line with labels msg=text", "a", "text"),
    ]
    assert batch.notes == ("loki warning: this is a warning",)
    request = replay_server.requests[0]
    assert request.headers["X-Loki-Response-Encoding-Flags"] == "categorize-labels"


def test_the_request_is_a_forward_nanosecond_query_of_the_job(replay_server: ReplayServer) -> None:
    replay_server.app = LokiReplay(dataset(), '{job="slurm"} | slurm_job_id="1234"')

    loki(replay_server, query=JOB_QUERY, job_id="1234").fetch(None, AFTER_DATASET)

    request = replay_server.requests[0]
    assert request.path == "/loki/api/v1/query_range"
    assert request.param("query") == '{job="slurm"} | slurm_job_id="1234"'
    assert request.param("direction") == "forward"
    assert request.param("end") == str(T0 + 30 * 60 * 10**9)
    assert request.param("start") == str(T0 + 30 * 60 * 10**9 - 3600 * 10**9)
    assert request.param("limit") == "1000"


@pytest.mark.parametrize("categorize", [False, True])
def test_lines_carry_job_and_host_from_labels_or_metadata(
    replay_server: ReplayServer, categorize: bool
) -> None:
    replay_server.app = LokiReplay(dataset(), '{job="slurm"} | slurm_job_id="1234"')

    batch = loki(replay_server, query=JOB_QUERY, job_id="1234", categorize_labels=categorize).fetch(
        None, AFTER_DATASET
    )

    assert [line.text for line in batch.lines] == job_1234_in_order()
    assert {line.job_id for line in batch.lines} == {"1234"}
    assert {line.host for line in batch.lines} == {"gpu-node-01", "gpu-node-02"}


def test_the_job_id_falls_back_to_the_file_name_and_labels_are_configurable(
    replay_server: ReplayServer,
) -> None:
    entries = [
        LokiEntry(T0, {"job": "slurm", "node": "n1", "filename": "/x/slurm-88_3.out"}, "a"),
        LokiEntry(T0 + 1, {"job": "slurm", "jobid": "99", "hostname": "n2"}, "b"),
    ]
    replay_server.app = LokiReplay(entries, '{job="slurm"}')
    labels = LabelNames(job_id=("jobid",), host=("node", "hostname"))

    batch = loki(replay_server, labels=labels).fetch(None, AFTER_DATASET)

    assert [(line.job_id, line.host) for line in batch.lines] == [("88_3", "n1"), ("99", "n2")]


def test_paging_neither_loses_nor_repeats_lines_sharing_a_timestamp(
    replay_server: ReplayServer,
) -> None:
    replay_server.app = LokiReplay(dataset(), '{job="slurm"} | slurm_job_id="1234"')
    limits = PageLimits(page_limit=2, max_pages=2)
    source = loki(replay_server, query=JOB_QUERY, job_id="1234", limits=limits)

    read = drain(source, None, AFTER_DATASET)

    assert sorted(read) == sorted(job_1234_in_order())
    assert len(read) == len(set(read)) == 15
    assert len(replay_server.requests) > 7  # it really paged


def test_a_restart_neither_loses_nor_repeats_lines(replay_server: ReplayServer) -> None:
    replay_server.app = LokiReplay(dataset(), '{job="slurm"} | slurm_job_id="1234"')
    limits = PageLimits(page_limit=3, max_pages=1)
    source = loki(replay_server, query=JOB_QUERY, job_id="1234", limits=limits)
    first = source.fetch(None, AFTER_DATASET)
    stored = json.loads(json.dumps(first.cursor))

    # A crash before the lines were saved: fetching with the old cursor returns them again.
    repeated = source.fetch(None, AFTER_DATASET)
    # A fresh process resumes from the stored cursor.
    rest = drain(
        loki(replay_server, query=JOB_QUERY, job_id="1234", limits=limits), stored, AFTER_DATASET
    )

    assert first.more is True
    assert repeated == first
    assert sorted([line.text for line in first.lines] + rest) == sorted(job_1234_in_order())


def test_more_lines_at_one_nanosecond_than_a_page_are_all_read(
    replay_server: ReplayServer,
) -> None:
    entries = [
        LokiEntry(T0, {"job": "slurm", "rank": str(r)}, f"rank {r} timeout") for r in range(9)
    ]
    entries.append(LokiEntry(T0 + 1, {"job": "slurm", "rank": "0"}, "after"))
    replay_server.app = LokiReplay(entries, '{job="slurm"}')

    read = drain(loki(replay_server, limits=PageLimits(page_limit=2)), None, AFTER_DATASET)

    assert sorted(read[:-1]) == sorted(f"rank {r} timeout" for r in range(9))
    assert read[-1] == "after"


def test_ties_beyond_the_server_cap_are_skipped_and_reported(replay_server: ReplayServer) -> None:
    entries = [LokiEntry(T0, {"job": "slurm"}, f"tie {i}") for i in range(6)]
    entries.append(LokiEntry(T0 + 1, {"job": "slurm"}, "after"))
    replay_server.app = LokiReplay(entries, '{job="slurm"}', shuffle_ties=False)
    limits = PageLimits(page_limit=2, server_cap=4, max_pages=10)

    batch = loki(replay_server, limits=limits).fetch(None, AFTER_DATASET)

    assert [line.text for line in batch.lines] == ["tie 0", "tie 1", "tie 2", "tie 3", "after"]
    assert any("skipped" in note for note in batch.notes)


def test_a_quiet_stream_moves_the_cursor_past_the_late_arrival_window(
    replay_server: ReplayServer,
) -> None:
    replay_server.app = LokiReplay([], '{job="slurm"}')
    limits = PageLimits(late_arrival=timedelta(minutes=2))

    batch = loki(replay_server, limits=limits).fetch(None, AFTER_DATASET)
    late = LokiEntry(T0 + 29 * 60 * 10**9, {"job": "slurm"}, "shipped late")
    replay_server.app = LokiReplay([late], '{job="slurm"}')
    again = loki(replay_server, limits=limits).fetch(batch.cursor, AFTER_DATASET)

    assert int(batch.cursor["start_ns"]) == T0 + 28 * 60 * 10**9
    assert [line.text for line in again.lines] == ["shipped late"]


def test_a_long_outage_is_read_back_in_bounded_windows(replay_server: ReplayServer) -> None:
    entries = [LokiEntry(T0 + h * 3600 * 10**9, {"job": "slurm"}, f"hour {h}") for h in range(5)]
    replay_server.app = LokiReplay(entries, '{job="slurm"}')
    limits = PageLimits(max_window=timedelta(hours=2))
    cursor = {"v": 1, "start_ns": str(T0), "seen": {}}

    read = drain(loki(replay_server, limits=limits), cursor, ns_to_datetime(T0 + 5 * 3600 * 10**9))

    assert read == [f"hour {h}" for h in range(5)]
    windows = [
        int(r.param("end") or 0) - int(r.param("start") or 0) for r in replay_server.requests
    ]
    assert max(windows) <= 2 * 3600 * 10**9


def test_tenant_and_credentials_are_sent(replay_server: ReplayServer) -> None:
    required = {"X-Scope-OrgID": "hpc", "Authorization": "Basic cmM6czNjcmV0"}
    replay_server.app = LokiReplay(dataset(), '{job="slurm"}', headers=required)
    auth = HttpAuth(username="rc", password="s3cret")

    batch = loki(replay_server, tenant="hpc", auth=auth).fetch(None, AFTER_DATASET)
    bearer = LokiReplay(dataset(), '{job="slurm"}', headers={"Authorization": "Bearer t0k"})
    replay_server.app = bearer
    with_token = loki(replay_server, auth=HttpAuth(bearer_token="t0k")).fetch(None, AFTER_DATASET)

    assert len(batch.lines) == len(with_token.lines) == len(dataset()) - 1  # all but the kernel


def test_a_long_line_is_cut_at_the_cap_and_counted(replay_server: ReplayServer) -> None:
    huge = "x" * (200 * 1024) + "\x00"
    replay_server.app = LokiReplay([LokiEntry(T0, {"job": "slurm"}, huge)], '{job="slurm"}')

    batch = loki(replay_server).fetch(None, AFTER_DATASET)

    assert batch.lines[0].text == "x" * 64 * 1024
    assert batch.truncated == 1


def test_a_502_names_the_server_and_the_status(replay_server: ReplayServer) -> None:
    replay_server.app = lambda request: Reply(502, b"<html>Bad Gateway</html>", "text/html")

    with pytest.raises(SourceUnavailable) as caught:
        loki(replay_server).fetch(None, AFTER_DATASET)

    assert str(caught.value).startswith(f"loki at {replay_server.url}: HTTP 502 Bad Gateway")
    assert caught.value.source == f"loki at {replay_server.url}"


def test_a_query_error_carries_lokis_message(replay_server: ReplayServer) -> None:
    replay_server.app = lambda request: text_reply(
        400, "parse error : syntax error: unexpected IDENTIFIER\n"
    )

    with pytest.raises(SourceUnavailable, match="HTTP 400 Bad Request: parse error"):
        loki(replay_server).fetch(None, AFTER_DATASET)


def test_a_server_slower_than_the_timeout_is_unavailable(replay_server: ReplayServer) -> None:
    replay_server.app = lambda request: Reply(body=b"{}", delay=1.5)

    with pytest.raises(SourceUnavailable, match=r"no answer within 0.3 s"):
        loki(replay_server, timeout=0.3).fetch(None, AFTER_DATASET)


def test_a_dropped_connection_is_unavailable(replay_server: ReplayServer) -> None:
    replay_server.app = lambda request: Reply(drop=True)

    with pytest.raises(SourceUnavailable, match="broken response"):
        loki(replay_server).fetch(None, AFTER_DATASET)


def test_a_refused_connection_is_unavailable(replay_server: ReplayServer) -> None:
    url = replay_server.url
    replay_server.close()

    with pytest.raises(SourceUnavailable, match="connection refused"):
        LokiSource(LokiConfig(base_url=url)).fetch(None, AFTER_DATASET)


GARBAGE = {
    "html": b"<html><body>Welcome to nginx!</body></html>",
    "truncated JSON": fixture_bytes("loki/query_range_streams.json")[:100],
    "error status": b'{"status":"error","error":"too many outstanding requests"}',
    "result not a list": b'{"status":"success","data":{"resultType":"streams","result":{}}}',
    "metric query": fixture_bytes("loki/query_range_matrix.json"),
    "numeric timestamp": b'{"status":"success","data":{"resultType":"streams","result":'
    b'[{"stream":{},"values":[[1569266497,"foo"]]}]}}',
    "one-element value": b'{"status":"success","data":{"resultType":"streams","result":'
    b'[{"stream":{},"values":[["1569266497240578000"]]}]}}',
    "labels not strings": b'{"status":"success","data":{"resultType":"streams","result":'
    b'[{"stream":{"a":1},"values":[]}]}}',
}


@pytest.mark.parametrize("body", GARBAGE.values(), ids=GARBAGE.keys())
def test_a_garbled_answer_is_unavailable_and_returns_nothing(
    replay_server: ReplayServer, body: bytes
) -> None:
    replay_server.app = lambda request: Reply(body=body)

    with pytest.raises(SourceUnavailable, match=f"loki at {replay_server.url}: answered"):
        loki(replay_server).fetch(None, AFTER_DATASET)


def test_a_failed_fetch_leaves_the_cursor_usable(replay_server: ReplayServer) -> None:
    good = LokiReplay(dataset(), '{job="slurm"} | slurm_job_id="1234"')
    replay_server.app = good
    limits = PageLimits(page_limit=4, max_pages=1)
    source = loki(replay_server, query=JOB_QUERY, job_id="1234", limits=limits)
    first = source.fetch(None, AFTER_DATASET)

    replay_server.app = lambda request: Reply(503, b"Service Unavailable")
    with pytest.raises(SourceUnavailable):
        source.fetch(first.cursor, AFTER_DATASET)
    replay_server.app = good
    rest = drain(source, first.cursor, AFTER_DATASET)

    assert sorted([line.text for line in first.lines] + rest) == sorted(job_1234_in_order())


# --- property: any data with ties, any page size: every line exactly once ------------------


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    stamps=st.lists(st.integers(0, 6), max_size=40),
    page_limit=st.integers(1, 5),
    max_pages=st.integers(1, 3),
    streams=st.integers(1, 3),
    texts=st.integers(1, 8),
)
def test_any_page_size_reads_every_line_exactly_once(
    replay_server: ReplayServer,
    stamps: list[int],
    page_limit: int,
    max_pages: int,
    streams: int,
    texts: int,
) -> None:
    # Few distinct texts and streams: many entries share (time, stream, line) exactly.
    entries = [
        LokiEntry(T0 + ts * 1000, {"job": "slurm", "s": str(i % streams)}, f"line {i % texts}")
        for i, ts in enumerate(stamps)
    ]
    replay_server.app = LokiReplay(entries, '{job="slurm"}')
    source = loki(replay_server, limits=PageLimits(page_limit=page_limit, max_pages=max_pages))
    read: list[tuple[datetime, str]] = []
    cursor: dict[str, Any] | None = None
    while True:
        batch = source.fetch(cursor, AFTER_DATASET)
        read += [(line.at, line.text) for line in batch.lines]
        cursor = json.loads(json.dumps(batch.cursor))
        if not batch.more:
            break

    assert sorted(read) == sorted((ns_to_datetime(e.ts), e.line) for e in entries)
    assert [at for at, _ in read] == sorted(at for at, _ in read)


def test_batch_times_are_utc(replay_server: ReplayServer) -> None:
    replay_server.app = LokiReplay(dataset(), '{job="slurm"}')
    batch: LogBatch = loki(replay_server).fetch(None, AFTER_DATASET)
    assert all(line.at.tzinfo == UTC for line in batch.lines)
