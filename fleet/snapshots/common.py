"""What the parts of snapshot recording share: a column's length, and rows that exist written
back in bulk."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import connection

from ..models import Attempt, Node, Workload


def _max_length(model: type[Attempt] | type[Node] | type[Workload], field: str) -> int:
    return int(getattr(model._meta.get_field(field), "max_length", 0) or 0)


def _save_existing(
    model: type[Attempt] | type[Node], rows: Sequence[Any], fields: Sequence[str]
) -> None:
    """Rows that exist, written in one INSERT .. ON DUPLICATE KEY UPDATE (ON CONFLICT on
    SQLite) per chunk: ``bulk_update`` builds a CASE per row and field, which for a few
    thousand rows costs tens of seconds of Python."""
    if not rows:
        return
    target = ["id"] if connection.features.supports_update_conflicts_with_target else None
    model.objects.bulk_create(
        rows, update_conflicts=True, update_fields=list(fields), unique_fields=target
    )
