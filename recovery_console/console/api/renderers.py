"""CSV for REST clients and spreadsheets: the audit trail streams through ``csv_rows``; the
renderer covers everything else a CSV request can get back (an error, a single object)."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from rest_framework.renderers import BaseRenderer


class CSVRenderer(BaseRenderer):
    media_type = "text/csv"
    format = "csv"
    charset = "utf-8"

    def render(
        self,
        data: Any,
        accepted_media_type: str | None = None,
        renderer_context: Mapping[str, Any] | None = None,
    ) -> bytes:
        if data is None:
            return b""
        if isinstance(data, Mapping) and "results" in data:
            data = data["results"]
        rows = data if isinstance(data, list) else [data]
        columns = list(rows[0]) if rows and isinstance(rows[0], Mapping) else ["value"]
        return "".join(csv_rows(columns, rows)).encode()


def csv_rows(columns: Sequence[str], rows: Iterable[Any]) -> Iterator[str]:
    """The header, then one CSV line per row (a mapping); nested values are written as JSON."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)

    def line(values: Iterable[Any]) -> str:
        buffer.seek(0)
        buffer.truncate()
        writer.writerow([_cell(v) for v in values])
        return buffer.getvalue()

    yield line(columns)
    for row in rows:
        yield line(row.get(c) for c in columns) if isinstance(row, Mapping) else line([row])


def _cell(value: Any) -> Any:
    if isinstance(value, dict | list):
        return json.dumps(value, sort_keys=True, separators=(",", ":"))
    if value is None:
        return ""
    # Text starting with these is a formula to a spreadsheet: never let log text run as one.
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + value
    return value
