"""Every JSON request body is held to two limits before any view runs: no larger than
``MAX_UPLOAD_BYTES`` (413) and nested no deeper than ``MAX_JSON_DEPTH`` (400), each refusal
naming its limit. Python's JSON parser recurses once per level of nesting, so a body a few
thousand levels deep ends in ``RecursionError`` (a 500) wherever it is parsed; the forms that
take a JSON document use ``loads_bounded`` for the same reason.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from itertools import accumulate
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse

# A JSON string, escapes and all: what is inside one does not nest.
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_NOT_A_BRACKET = bytes(b for b in range(256) if b not in b"[]{}")
# +1 for an opening bracket, -1 for a closing one; indexed by the byte.
_DELTA = [1 if b in b"[{" else -1 if b in b"]}" else 0 for b in range(256)]
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


class JsonTooDeep(ValueError):
    """A JSON document nests deeper than the limit; the message names it."""


def nesting_depth(data: bytes) -> int:
    """How deeply ``data`` nests arrays and objects, in linear time and without recursion."""
    brackets = _STRING.sub(b"", data).translate(None, _NOT_A_BRACKET)
    return max(accumulate(map(_DELTA.__getitem__, brackets)), default=0)


def too_deep_message(limit: int) -> str:
    return f"the JSON document nests deeper than {limit} levels (MAX_JSON_DEPTH)"


def loads_bounded(text: str | bytes) -> Any:
    """``json.loads`` for documents people and programs send: refused when too deep."""
    raw = text.encode() if isinstance(text, str) else text
    if nesting_depth(raw) > settings.MAX_JSON_DEPTH:
        raise JsonTooDeep(too_deep_message(settings.MAX_JSON_DEPTH))
    return json.loads(raw)


def _is_json(request: HttpRequest) -> bool:
    kind = (request.content_type or "").lower()
    return kind == "application/json" or kind.endswith("+json")


class JsonBodyLimits:
    """Refuse a JSON body over the size or depth limit before it reaches a view or a parser."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.method in _BODY_METHODS and _is_json(request):
            refusal = self._refusal(request)
            if refusal is not None:
                return refusal
        return self.get_response(request)

    def _refusal(self, request: HttpRequest) -> HttpResponse | None:
        limit = settings.MAX_UPLOAD_BYTES
        try:
            declared = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            declared = 0
        # The declared length first: a body that says it is too large is never read.
        if declared > limit or len(request.body) > limit:
            return _refuse(413, f"the body is larger than {limit} bytes (MAX_UPLOAD_BYTES)")
        if nesting_depth(request.body) > settings.MAX_JSON_DEPTH:
            return _refuse(400, too_deep_message(settings.MAX_JSON_DEPTH))
        return None


def _refuse(status: int, detail: str) -> JsonResponse:
    return JsonResponse({"detail": detail}, status=status)
