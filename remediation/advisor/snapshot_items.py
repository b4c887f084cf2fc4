"""Checking the jobs and nodes of a posted snapshot one by one, fast enough for 10,000 jobs and
25,000 nodes a poll.

Each item is checked by itself (a bad one is rejected, not the request), with one serializer
instance per kind: DRF deep-copies a serializer's fields for every new instance, which cost more
than the check. And a controller posts every job and node each cycle, most of them as they were:
an item whose JSON is the same as in the cluster's previous snapshot gets the verdict it got
then. Only the previous snapshot's items are remembered, per cluster, so memory stays that of
one snapshot."""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, Literal

from rest_framework import serializers

from fleet.services import Rejection

Kind = Literal["job", "node"]
# A verdict: the record built from the checked item, or the field and problem of its rejection.
Verdict = tuple[Any, None] | tuple[None, tuple[str, str]]
# Clusters whose previous snapshot is remembered in one process; the least recent is forgotten.
MAX_CLUSTERS = 32
# An item this large is checked every time: remembering it would cost more than checking it.
MAX_REMEMBERED_CHARS = 20_000

_previous: OrderedDict[tuple[str, Kind], dict[str, Verdict]] = OrderedDict()
_lock = threading.Lock()


def check_items(
    cluster: str,
    kind: Kind,
    items: Sequence[Any],
    serializer: type[serializers.Serializer],  # type: ignore[type-arg]
    build: Callable[[dict[str, Any]], Any],
) -> tuple[list[tuple[int, Any]], list[Rejection]]:
    """The records of the items that pass, with their index in the request, and a rejection
    (field and problem) for each one that does not."""
    checker = serializer()
    with _lock:
        before = _previous.get((cluster, kind), {})
    now: dict[str, Verdict] = {}
    records: list[tuple[int, Any]] = []
    rejected: list[Rejection] = []
    id_field = "job_id" if kind == "job" else "name"
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            rejected.append(Rejection(kind, "", index, "", "is not a JSON object"))
            continue
        key = json.dumps(item, separators=(",", ":"), ensure_ascii=False)
        verdict = before.get(key) or now.get(key) or _check(checker, item, build)
        if len(key) <= MAX_REMEMBERED_CHARS:
            now[key] = verdict
        record, problem = verdict
        if problem is None:
            records.append((index, record))
        else:
            rejected.append(Rejection(kind, str(item.get(id_field, ""))[:64], index, *problem))
    with _lock:
        _previous[(cluster, kind)] = now
        _previous.move_to_end((cluster, kind))
        while len(_previous) > 2 * MAX_CLUSTERS:
            _previous.popitem(last=False)
    return records, rejected


def _check(
    checker: serializers.Serializer,  # type: ignore[type-arg]
    item: dict[str, Any],
    build: Callable[[dict[str, Any]], Any],
) -> Verdict:
    try:
        # What ``is_valid`` runs, on the one instance.
        return build(checker.run_validation(item)), None
    except serializers.ValidationError as exc:
        return None, _first_error(exc.detail)


def _first_error(errors: Any) -> tuple[str, str]:
    if not isinstance(errors, dict):
        return "", str(errors[0] if isinstance(errors, list) and errors else errors)
    field, detail = next(iter(errors.items()))
    while isinstance(detail, dict | list):  # a list field's errors are keyed by position
        detail = next(iter(detail.values())) if isinstance(detail, dict) else detail[0]
    return str(field), str(detail)
