"""What all sources share: safe line text, the one error, health, job ids, cursors."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from detection.sources.base import (
    SourceHealth,
    SourceUnavailable,
    TextCleaner,
    check_job_id,
    job_id_from_filename,
)
from detection.sources.httpclient import HttpAuth, HttpClient
from detection.sources.paging import (
    Entry,
    PageLimits,
    datetime_to_ns,
    fetch_forward,
    ns_to_datetime,
    render_query,
)
from tests.detection.sources.listener import serving

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


@given(st.binary(max_size=2000))
def test_any_bytes_become_text_without_nuls_within_the_cap(raw: bytes) -> None:
    cleaner = TextCleaner(max_bytes=256)

    text = cleaner.from_bytes(raw)

    assert "\x00" not in text
    assert len(text.encode("utf-8")) <= 256 * 3  # a bad byte becomes U+FFFD (3 bytes)
    assert cleaner.truncated == (1 if len(raw) > 256 else 0)


@given(st.text(max_size=500))
def test_any_text_is_capped_in_utf8_bytes(text: str) -> None:
    cleaner = TextCleaner(max_bytes=100)

    cleaned, cut = cleaner.cut(text)

    assert len(cleaned.encode("utf-8")) <= 100
    assert cut == (len(text.encode("utf-8", "replace")) > 100)


def test_a_lone_surrogate_from_a_garbled_escape_is_replaced() -> None:
    assert TextCleaner().from_text("ok \ud800 \x00end\r") == "ok ? end"


def test_source_unavailable_reads_as_source_then_reason_and_survives_pickling() -> None:
    error = SourceUnavailable("loki at http://127.0.0.1:3100", "HTTP 502 Bad Gateway")

    copy = pickle.loads(pickle.dumps(error))  # noqa: S301 - our own object

    assert str(error) == "loki at http://127.0.0.1:3100: HTTP 502 Bad Gateway"
    assert (copy.source, copy.reason) == (error.source, error.reason)


def test_source_health_tracks_failures_and_recovery() -> None:
    health = SourceHealth("loki at http://x")
    untried = SourceHealth("loki at http://x")

    health.record_failure(SourceUnavailable("loki at http://x", "HTTP 502"), NOW)
    health.record_failure("timeout", NOW + timedelta(seconds=5))
    failing = SourceHealth.from_json(json.loads(json.dumps(health.to_json())))
    health.record_success(NOW + timedelta(seconds=10))

    assert failing == SourceHealth(
        "loki at http://x", False, "timeout", NOW + timedelta(seconds=5), None, 2
    )
    assert untried.ok is None
    assert (health.ok, health.consecutive_failures) == (True, 0)
    assert health.last_success == NOW + timedelta(seconds=10)
    assert health.last_error == "timeout"  # kept for the record


@pytest.mark.parametrize(
    ("path", "job"),
    [
        ("/shared/slurm-1234.out", "1234"),
        ("slurm-1234_7.out", "1234_7"),
        ("slurm-1234.out.1", None),
        ("slurm-abc.out", None),
    ],
)
def test_job_ids_come_from_slurm_output_names(path: str, job: str | None) -> None:
    assert job_id_from_filename(path) == job


def test_a_name_regex_without_a_job_group_is_refused() -> None:
    with pytest.raises(ValueError, match="job"):
        job_id_from_filename("x.out", r"^(\d+)\.out$")


@pytest.mark.parametrize("job", ['1"} or {a="', "12\n", "", "a b"])
def test_a_job_id_that_could_break_a_query_is_refused(job: str) -> None:
    with pytest.raises(ValueError, match="not a Slurm job id"):
        check_job_id(job)


def test_the_job_id_fills_the_template_and_leaves_other_dollars_alone() -> None:
    template = '{job="slurm"} | slurm_job_id="$job_id" |~ "loss=nan$"'

    assert render_query(template, "1234_7") == (
        '{job="slurm"} | slurm_job_id="1234_7" |~ "loss=nan$"'
    )
    assert render_query(template, None) == template


def test_nanosecond_times_round_trip_to_microseconds() -> None:
    assert ns_to_datetime(datetime_to_ns(NOW)) == NOW
    assert ns_to_datetime(1795950000123456789) == datetime(
        2026, 11, 29, 11, 0, 0, 123456, tzinfo=UTC
    )
    with pytest.raises(ValueError, match="naive"):
        datetime_to_ns(datetime(2026, 11, 29))  # noqa: DTZ001 - the point of the test


@pytest.mark.parametrize(
    "cursor",
    [
        {"v": 2, "start_ns": "1"},
        {"v": 1},
        {"v": 1, "start_ns": "x"},
        {"v": 1, "start_ns": "1", "seen": 3},
    ],
)
def test_a_malformed_log_cursor_is_refused(cursor: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="malformed log cursor"):
        fetch_forward(lambda start, end, limit: pytest.fail("queried"), cursor, NOW, PageLimits())


def test_page_limits_refuse_more_than_the_server_cap() -> None:
    with pytest.raises(ValueError, match="page_limit"):
        PageLimits(page_limit=5001)


def test_entries_at_the_same_time_differ_by_stream_and_text() -> None:
    a = Entry(1, '{"host":"a"}', "x")
    assert (
        len({a.digest(), Entry(1, '{"host":"b"}', "x").digest(), Entry(1, a.stream, "y").digest()})
        == 3
    )
    assert a.digest() == Entry(1, a.stream, "x", job_id="9").digest()


def test_an_http_client_accepts_only_http_urls_and_builds_auth_headers() -> None:
    with pytest.raises(ValueError, match="http"):
        HttpClient("loki", "file:///etc/passwd")
    client = HttpClient("loki", "https://loki.example/prefix/", auth=HttpAuth("u", "p"))

    assert client.name == "loki at https://loki.example/prefix"
    assert client.headers == {"Authorization": "Basic dTpw"}
    assert HttpAuth(bearer_token="t", headers={"X-Scope-OrgID": "a"}).as_headers() == {
        "X-Scope-OrgID": "a",
        "Authorization": "Bearer t",
    }


def test_a_redirect_is_not_followed_with_the_credentials() -> None:
    first, second = serving(), serving()
    redirecting, elsewhere = next(first), next(second)
    try:
        redirecting.redirect_to = elsewhere.url
        client = HttpClient("loki", redirecting.url, auth=HttpAuth(bearer_token="t0ken"))
        with pytest.raises(SourceUnavailable, match="redirects are not followed"):
            client.get("/loki/api/v1/query_range", [])
        assert redirecting.authorizations == ["Bearer t0ken"]
        assert elsewhere.authorizations == []
    finally:
        for server in (first, second):
            next(server, None)


def test_a_now_before_the_cursor_asks_nothing_and_keeps_the_cursor() -> None:
    cursor = {"v": 1, "start_ns": str(datetime_to_ns(NOW)), "seen": {"abc": 1}}

    batch = fetch_forward(
        lambda start, end, limit: pytest.fail("queried"), cursor, NOW, PageLimits()
    )

    assert (batch.lines, batch.cursor, batch.more) == ((), cursor, False)


def test_the_sources_import_nothing_from_django() -> None:
    code = (
        "import sys, detection.sources; "
        "sys.exit(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('django', 'rest_framework', 'celery', 'channels')) or 0)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False
    )

    assert result.returncode == 0, result.stderr
