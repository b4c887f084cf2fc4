"""The VictoriaLogs client against a replay of ``/select/logsql/query`` JSON Lines answers."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from detection.sources.base import SourceUnavailable
from detection.sources.httpclient import HttpAuth
from detection.sources.paging import LabelNames, PageLimits, ns_to_datetime
from detection.sources.victorialogs import (
    VictoriaLogsConfig,
    VictoriaLogsSource,
    ns_to_rfc3339,
    parse_stream,
    rfc3339_to_ns,
)
from tests.detection.sources.replay import (
    ReplayServer,
    Reply,
    VictoriaLogsReplay,
    fixture_bytes,
    rfc3339_ns,
    text_reply,
)

JOB_FILTER = '{job="slurm"} slurm_job_id:="$job_id"'
T0 = 1795950000000000000
AFTER_DATASET = ns_to_datetime(T0) + timedelta(minutes=30)


def rows() -> list[bytes]:
    return fixture_bytes("victorialogs/slurm_jobs.ndjson").splitlines()


def job_rows(job: str) -> list[dict[str, Any]]:
    chosen = [json.loads(row) for row in rows()]
    return [row for row in chosen if row.get("slurm_job_id") == job]


def vlogs(server: ReplayServer, **options: Any) -> VictoriaLogsSource:
    return VictoriaLogsSource(VictoriaLogsConfig(base_url=server.url, **options))


def drain(source: VictoriaLogsSource, cursor: dict[str, Any] | None) -> list[str]:
    texts: list[str] = []
    while True:
        batch = source.fetch(cursor, AFTER_DATASET)
        texts += [line.text for line in batch.lines]
        cursor = json.loads(json.dumps(batch.cursor))
        if not batch.more:
            return texts


def test_the_documented_answer_becomes_lines(replay_server: ReplayServer) -> None:
    body = fixture_bytes("victorialogs/query_doc_example.ndjson")
    replay_server.app = lambda request: Reply(body=body, content_type="application/stream+json")
    now = datetime(2023, 1, 1, 13, 40, tzinfo=UTC)

    batch = vlogs(replay_server).fetch(None, now)

    assert [(line.at, line.text) for line in batch.lines] == [
        (
            datetime(2023, 1, 1, 13, 32, 13, tzinfo=UTC),
            "error: disconnect from 19.54.37.22: Auth fail [preauth]",
        ),
        (datetime(2023, 1, 1, 13, 32, 15, tzinfo=UTC), "some other error"),
    ]


def test_the_stream_string_is_parsed_for_labels(replay_server: ReplayServer) -> None:
    body = fixture_bytes("victorialogs/query_datasource_example.ndjson")
    replay_server.app = lambda request: Reply(body=body)
    labels = LabelNames(job_id=("compose_project",), host=("compose_service",))

    batch = vlogs(replay_server, labels=labels).fetch(None, datetime(2024, 6, 26, 14, tzinfo=UTC))

    assert [(line.job_id, line.host) for line in batch.lines] == [("app", "gateway")]
    assert batch.lines[0].at == datetime(2024, 6, 26, 13, 15, 15, tzinfo=UTC)


def test_the_query_sorts_limits_and_bounds_by_nanosecond_time(replay_server: ReplayServer) -> None:
    replay_server.app = VictoriaLogsReplay(rows(), '{job="slurm"} slurm_job_id:="1234"')

    vlogs(replay_server, query=JOB_FILTER, job_id="1234").fetch(None, AFTER_DATASET)

    request = replay_server.requests[0]
    assert request.path == "/select/logsql/query"
    assert request.param("query") == (
        '{job="slurm"} slurm_job_id:="1234" | sort by (_time) | limit 1000'
    )
    assert request.param("end") == "2026-11-29T11:30:00.000000000Z"
    assert request.param("start") == "2026-11-29T10:30:00.000000000Z"


def test_lines_carry_job_and_host_from_fields_and_stream(replay_server: ReplayServer) -> None:
    replay_server.app = VictoriaLogsReplay(rows(), '{job="slurm"} slurm_job_id:="1234"')

    batch = vlogs(replay_server, query=JOB_FILTER, job_id="1234").fetch(None, AFTER_DATASET)

    expected = sorted(job_rows("1234"), key=lambda row: (row["_time"], row["_msg"]))
    assert sorted(line.text for line in batch.lines) == sorted(row["_msg"] for row in expected)
    assert [line.at for line in batch.lines] == sorted(line.at for line in batch.lines)
    assert {line.job_id for line in batch.lines} == {"1234"}
    assert {line.host for line in batch.lines} == {"gpu-node-01", "gpu-node-02"}


def test_paging_neither_loses_nor_repeats_lines_sharing_a_timestamp(
    replay_server: ReplayServer,
) -> None:
    replay_server.app = VictoriaLogsReplay(rows(), '{job="slurm"} slurm_job_id:="1234"')
    limits = PageLimits(page_limit=2, max_pages=2)
    source = vlogs(replay_server, query=JOB_FILTER, job_id="1234", limits=limits)

    read = drain(source, None)

    assert sorted(read) == sorted(row["_msg"] for row in job_rows("1234"))
    assert len(replay_server.requests) > 7


def test_a_restart_neither_loses_nor_repeats_lines(replay_server: ReplayServer) -> None:
    replay_server.app = VictoriaLogsReplay(rows(), '{job="slurm"}')
    limits = PageLimits(page_limit=3, max_pages=1)
    first = vlogs(replay_server, limits=limits).fetch(None, AFTER_DATASET)
    stored = json.loads(json.dumps(first.cursor))

    again = vlogs(replay_server, limits=limits).fetch(None, AFTER_DATASET)
    rest = drain(vlogs(replay_server, limits=limits), stored)

    everything = [json.loads(row) for row in rows()]
    slurm = [row["_msg"] for row in everything if 'job="slurm"' in row["_stream"]]
    assert again == first
    assert sorted([line.text for line in first.lines] + rest) == sorted(slurm)


def test_tenant_headers_and_a_token_are_sent(replay_server: ReplayServer) -> None:
    required = {"AccountID": "12", "ProjectID": "34", "Authorization": "Bearer t0k"}
    replay_server.app = VictoriaLogsReplay(rows(), '{job="kernel"}', headers=required)

    batch = vlogs(
        replay_server,
        query='{job="kernel"}',
        account_id="12",
        project_id="34",
        auth=HttpAuth(bearer_token="t0k"),
    ).fetch(None, AFTER_DATASET)

    assert [(line.host, line.job_id) for line in batch.lines] == [("gpu-node-02", None)]
    assert batch.lines[0].text.startswith("NVRM: Xid (PCI:0000:4c:00): 79")


def test_a_garbled_line_fails_the_whole_fetch(replay_server: ReplayServer) -> None:
    body = rows()[0] + b"\n{not json\n" + rows()[1] + b"\n"
    replay_server.app = lambda request: Reply(body=body)

    with pytest.raises(SourceUnavailable, match="line 2 is not JSON"):
        vlogs(replay_server).fetch(None, AFTER_DATASET)


@pytest.mark.parametrize(
    "body",
    [
        b'[{"_time":"2023-01-01T13:32:13Z","_msg":"a JSON array, not JSON lines"}]',
        b'{"_msg":"no time"}\n',
        b'{"_time":"yesterday","_msg":"x"}\n',
        b'{"_time":"2023-01-01T13:32:13Z","_stream":"host=a","_msg":"x"}\n',
        b"<html>502 Bad Gateway</html>",
    ],
    ids=["json array", "no _time", "bad _time", "bad _stream", "html"],
)
def test_a_garbled_answer_is_unavailable(replay_server: ReplayServer, body: bytes) -> None:
    replay_server.app = lambda request: Reply(body=body)

    with pytest.raises(SourceUnavailable, match=f"victorialogs at {replay_server.url}: answered"):
        vlogs(replay_server).fetch(None, AFTER_DATASET)


def test_http_errors_and_timeouts_are_unavailable(replay_server: ReplayServer) -> None:
    replay_server.app = lambda request: text_reply(400, "cannot parse query: unexpected token")
    with pytest.raises(SourceUnavailable, match="HTTP 400 Bad Request: cannot parse query"):
        vlogs(replay_server).fetch(None, AFTER_DATASET)

    replay_server.app = lambda request: Reply(502, b"bad gateway", "text/plain")
    with pytest.raises(SourceUnavailable, match="HTTP 502 Bad Gateway"):
        vlogs(replay_server).fetch(None, AFTER_DATASET)

    replay_server.app = lambda request: Reply(body=b"", delay=1.5)
    with pytest.raises(SourceUnavailable, match="no answer within 0.3 s"):
        vlogs(replay_server, timeout=0.3).fetch(None, AFTER_DATASET)


def test_an_oversized_answer_is_refused_not_buffered(replay_server: ReplayServer) -> None:
    replay_server.app = lambda request: Reply(body=b"x" * (2 * 1024 * 1024))

    with pytest.raises(SourceUnavailable, match="larger than 1048576 bytes"):
        vlogs(replay_server, max_response_bytes=1024 * 1024).fetch(None, AFTER_DATASET)


@pytest.mark.parametrize(
    ("text", "ns"),
    [
        ("2023-01-01T13:32:13Z", 1672579933 * 10**9),
        ("2023-01-01T13:32:13.5Z", 1672579933 * 10**9 + 500_000_000),
        ("2023-01-01T13:32:13.123456789Z", 1672579933 * 10**9 + 123456789),
        ("2023-01-01T15:32:13.000000001+02:00", 1672579933 * 10**9 + 1),
    ],
)
def test_rfc3339_times_keep_their_nanoseconds(text: str, ns: int) -> None:
    assert rfc3339_to_ns(text) == ns


def test_cursor_times_round_trip_through_rfc3339() -> None:
    for ns in (0, 1, T0 + 123456789, T0 + 999_999_999):
        assert rfc3339_ns(ns_to_rfc3339(ns)) == ns


@pytest.mark.parametrize(
    ("text", "labels"),
    [
        ("{}", {}),
        ('{host="gpu-node-02",job="slurm"}', {"host": "gpu-node-02", "job": "slurm"}),
        ('{a="x\\"y", b="c,d=e"}', {"a": 'x"y', "b": "c,d=e"}),
    ],
)
def test_stream_strings_parse_to_labels(text: str, labels: dict[str, str]) -> None:
    assert parse_stream(text) == labels
