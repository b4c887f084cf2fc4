"""VictoriaLogs as a log source: ``/select/logsql/query`` read forward by time.

API facts relied on (VictoriaLogs "Querying" docs): the answer is JSON Lines, one object per
entry, all values strings: ``{"_msg": "...", "_stream": "{host=\\"a\\"}", "_stream_id": "...",
"_time": "2023-01-01T13:32:13.123456789Z", ...}``; lines come unsorted unless the query sorts,
and the ``limit`` *argument* returns the newest entries, so paging forward needs the query's own
``| sort by (_time) | limit N`` pipes. ``start`` is inclusive and ``end`` exclusive. A tenant is
chosen by the ``AccountID`` and ``ProjectID`` headers.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from detection.sources.base import TextCleaner
from detection.sources.httpclient import excerpt
from detection.sources.paging import Entry, LabelNames, Page, ns_to_datetime
from detection.sources.remote import RemoteLogConfig, RemoteLogSource

QUERY_PATH = "/select/logsql/query"
_RFC3339 = re.compile(
    r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d)$", re.IGNORECASE
)
_STREAM_PAIR = re.compile(r'\s*([^=,{}"\s]+)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(?:,|$)')


@dataclass(frozen=True)
class VictoriaLogsConfig(RemoteLogConfig):
    """How to reach VictoriaLogs and which entries to read.

    ``query`` is a LogsQL filter without pipes (``{job="slurm"}``, ``slurm_job_id:="$job_id"``).
    ``account_id`` and ``project_id`` choose the tenant.
    """

    account_id: str | None = None
    project_id: str | None = None


class VictoriaLogsSource(RemoteLogSource):
    config: VictoriaLogsConfig
    kind = "victorialogs"

    def __init__(self, config: VictoriaLogsConfig) -> None:
        super().__init__(config)
        self.headers = {
            name: value
            for name, value in (("AccountID", config.account_id), ("ProjectID", config.project_id))
            if value
        }

    def request(
        self, start_ns: int, end_ns: int, limit: int
    ) -> tuple[str, list[tuple[str, str]], dict[str, str]]:
        params = [
            # The limit *argument* would return the newest entries: page with pipes instead.
            ("query", f"{self.query} | sort by (_time) | limit {limit}"),
            ("start", ns_to_rfc3339(start_ns)),
            ("end", ns_to_rfc3339(end_ns)),
        ]
        return QUERY_PATH, params, self.headers

    def parse(self, body: bytes) -> Page:
        return parse_jsonl(body, self.config.labels, TextCleaner())


def parse_jsonl(body: bytes, labels: LabelNames, cleaner: TextCleaner) -> Page:
    """Entries of a ``/select/logsql/query`` answer; ``ValueError`` on any malformed line."""
    entries = []
    for number, raw in enumerate(body.split(b"\n"), start=1):
        if raw.strip():
            entries.append(_entry(raw, number, labels, cleaner))
    return Page(entries)


def _entry(raw: bytes, number: int, labels: LabelNames, cleaner: TextCleaner) -> Entry:
    try:
        row = json.loads(raw)
    except ValueError as exc:
        raise ValueError(f"line {number} is not JSON: {excerpt(raw, 80)!r}") from exc
    if not isinstance(row, dict) or not isinstance(row.get("_time"), str):
        raise ValueError(f"line {number} is not a log entry with _time: {excerpt(raw, 80)!r}")
    stream_text = row.get("_stream", "{}")
    # Entry fields win over stream labels: they are the more specific place for job and host.
    fields = {**parse_stream(str(stream_text)), **_string_fields(row)}
    # The stream's identity for de-duplication; the labels text when no _stream_id is sent.
    stream = str(row.get("_stream_id") or stream_text)
    message = row.get("_msg", "")  # an empty message is left out of the answer
    text, cut = cleaner.cut(message if isinstance(message, str) else str(message))
    time_ns = rfc3339_to_ns(row["_time"])
    return Entry(time_ns, stream, text, labels.job_of(fields), labels.host_of(fields), cut)


def _string_fields(row: dict[str, Any]) -> dict[str, str]:
    return {k: v for k, v in row.items() if isinstance(v, str) and not k.startswith("_")}


def parse_stream(text: str) -> dict[str, str]:
    """Labels of a ``_stream`` string such as ``{host="gpu-node-02",job="slurm"}``."""
    inner = text.strip()
    if not (inner.startswith("{") and inner.endswith("}")):
        raise ValueError(f"_stream is not {{...}}: {text!r:.80}")
    inner = inner[1:-1]
    labels: dict[str, str] = {}
    pos = 0
    while pos < len(inner.rstrip()):
        match = _STREAM_PAIR.match(inner, pos)
        if match is None:
            raise ValueError(f"_stream is not a label set: {text!r:.80}")
        labels[match.group(1)] = _unquote(match.group(2))
        pos = match.end()
    return labels


def _unquote(quoted: str) -> str:
    try:
        value = json.loads(f'"{quoted}"')
    except ValueError:
        # Not a valid JSON escape: undo only the quote and backslash escapes.
        return quoted.replace('\\"', '"').replace("\\\\", "\\")
    return value if isinstance(value, str) else quoted


def rfc3339_to_ns(text: str) -> int:
    """Nanoseconds since the epoch of an RFC3339 time with up to 9 fraction digits."""
    match = _RFC3339.match(text.strip())
    if match is None:
        raise ValueError(f"_time is not RFC3339: {text!r:.40}")
    base, fraction, zone = match.groups()
    whole = datetime.fromisoformat(base + ("+00:00" if zone.upper() == "Z" else zone))
    # By hand: datetime keeps microseconds only, and the cursor needs every nanosecond.
    return int(whole.timestamp()) * 1_000_000_000 + int((fraction or "").ljust(9, "0"))


def ns_to_rfc3339(ns: int) -> str:
    # Whole seconds through datetime, nanoseconds appended: exact, unlike a float timestamp.
    seconds = ns_to_datetime(ns - ns % 1_000_000_000).astimezone(UTC)
    return f"{seconds:%Y-%m-%dT%H:%M:%S}.{ns % 1_000_000_000:09d}Z"
