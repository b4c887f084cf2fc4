"""Grafana Loki as a log source: ``GET /loki/api/v1/query_range`` read forward by time.

API facts relied on (Loki HTTP API reference, ``query_range``): ``start`` is inclusive and
``end`` exclusive, both nanosecond epochs; ``direction=forward`` returns the oldest entries
first; ``limit`` defaults to 100 and is capped by the server (5000 by default). A log query
answers ``{"status": "success", "data": {"resultType": "streams", "result": [{"stream": {...},
"values": [["<ns>", "<line>"], ...]}], "stats": {...}}, "warnings": [...]}``; with the
``categorize-labels`` encoding flag each value is ``["<ns>", "<line>", {"structuredMetadata":
{...}, "parsed": {...}}]``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from detection.sources.base import TextCleaner
from detection.sources.paging import Entry, LabelNames, Page
from detection.sources.remote import RemoteLogConfig, RemoteLogSource

QUERY_RANGE = "/loki/api/v1/query_range"
# Loki 3: structured metadata comes back per entry instead of splitting streams by it.
CATEGORIZE_HEADER = "X-Loki-Response-Encoding-Flags"


@dataclass(frozen=True)
class LokiConfig(RemoteLogConfig):
    """How to reach Loki and which lines to read.

    ``query`` is a LogQL log query, e.g. ``{job="slurm"} | slurm_job_id="$job_id"`` (which
    matches a label or structured metadata). ``tenant`` is sent as ``X-Scope-OrgID``.
    ``categorize_labels`` asks Loki 3 to return structured metadata apart from the stream
    labels (so it does not split streams).
    """

    tenant: str | None = None
    categorize_labels: bool = False


class LokiSource(RemoteLogSource):
    config: LokiConfig
    kind = "loki"

    def __init__(self, config: LokiConfig) -> None:
        super().__init__(config)
        self.headers = {}
        if config.tenant:
            self.headers["X-Scope-OrgID"] = config.tenant
        if config.categorize_labels:
            self.headers[CATEGORIZE_HEADER] = "categorize-labels"

    def request(
        self, start_ns: int, end_ns: int, limit: int
    ) -> tuple[str, list[tuple[str, str]], dict[str, str]]:
        params = [
            ("query", self.query),
            ("start", str(start_ns)),
            ("end", str(end_ns)),
            # May exceed page_limit by the entries already seen at the boundary (see paging).
            ("limit", str(limit)),
            ("direction", "forward"),
        ]
        return QUERY_RANGE, params, self.headers

    def parse(self, body: bytes) -> Page:
        # A fresh cleaner per page: each entry carries its own cut flag, so no count is shared.
        return parse_query_range(body, self.config.labels, TextCleaner())


def parse_query_range(body: bytes, labels: LabelNames, cleaner: TextCleaner) -> Page:
    """Entries of a ``query_range`` log-query answer; ``ValueError`` for anything else."""
    try:
        doc = json.loads(body)
    except ValueError as exc:
        raise ValueError(f"not JSON ({exc})") from exc
    result = _streams_result(doc)
    entries = [e for stream in result for e in _stream_entries(stream, labels, cleaner)]
    # Warnings become notes rather than failing the fetch: the lines are still good.
    warnings = doc.get("warnings") or []
    if not isinstance(warnings, list):
        raise ValueError("'warnings' is not a list")
    return Page(entries, tuple(f"loki warning: {w}" for w in warnings))


def _streams_result(doc: Any) -> list[Any]:
    if not isinstance(doc, dict) or doc.get("status") != "success":
        status = doc.get("status") if isinstance(doc, dict) else type(doc).__name__
        raise ValueError(f"status is {status!r}, not 'success'")
    data = doc.get("data")
    if not isinstance(data, dict):
        raise ValueError("no 'data' object")
    if data.get("resultType") != "streams":
        raise ValueError(
            f"resultType is {data.get('resultType')!r}; the query must be a log query, "
            "not a metric query"
        )
    result = data.get("result")
    if not isinstance(result, list):
        raise ValueError("'data.result' is not a list")
    return result


def _stream_entries(stream: Any, labels: LabelNames, cleaner: TextCleaner) -> list[Entry]:
    if not isinstance(stream, dict):
        raise ValueError("a stream is not an object")
    stream_labels = _str_map(stream.get("stream"), "stream labels")
    values = stream.get("values")
    if not isinstance(values, list):
        raise ValueError("a stream's 'values' is not a list")
    # The stream's identity for de-duplication: its sorted labels, the same on every page.
    key = json.dumps(stream_labels, sort_keys=True)
    return [_entry(value, stream_labels, key, labels, cleaner) for value in values]


def _entry(
    value: Any, stream: dict[str, str], key: str, labels: LabelNames, cleaner: TextCleaner
) -> Entry:
    if not isinstance(value, list) or len(value) not in (2, 3):
        raise ValueError(f"a value is not [ts, line] or [ts, line, metadata]: {value!r:.80}")
    ts, line = value[0], value[1]
    # Nanoseconds as a string: a float would lose precision and break the cursor's ties.
    if not isinstance(ts, str) or not ts.isdigit() or not isinstance(line, str):
        raise ValueError(f"a value has no nanosecond timestamp string and line: {value!r:.80}")
    # Structured metadata may carry the job id or host when the stream labels do not.
    merged = {**stream, **_metadata(value[2])} if len(value) == 3 else stream
    text, cut = cleaner.cut(line)
    return Entry(int(ts), key, text, labels.job_of(merged), labels.host_of(merged), cut)


def _metadata(extra: Any) -> dict[str, str]:
    if not isinstance(extra, dict):
        raise ValueError("a value's third element is not an object")
    out: dict[str, str] = {}
    for part in ("structuredMetadata", "parsed"):
        if part in extra:
            out.update(_str_map(extra[part], part))
    return out


def _str_map(value: Any, what: str) -> dict[str, str]:
    if not isinstance(value, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise ValueError(f"{what} are not a string map")
    return dict(value)
