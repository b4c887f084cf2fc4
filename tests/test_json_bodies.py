"""Every JSON body is held to the size and depth limits before any view runs: a body nested
thousands of levels deep (which Python's parser would meet with RecursionError, a 500) answers
400 naming the limit on every URL the console serves, whoever sends it."""

from __future__ import annotations

import re

import pytest
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver

from recovery_console.jsonbodies import JsonTooDeep, loads_bounded, nesting_depth

pytestmark = pytest.mark.django_db
DEEP = ("[" * 5000 + "]" * 5000).encode()
# A sample value for each path converter, so every route can be addressed.
_SAMPLES = {
    "int": "1",
    "slug": "research",
    "str": "research",
    "path": "x",
    "uuid": "0" * 32,
    "drf_format_suffix": ".json",
}


def every_path(resolver: URLResolver | None = None, prefix: str = "") -> list[str]:
    paths = []
    for entry in (resolver or get_resolver()).url_patterns:
        route = prefix + str(entry.pattern)
        if isinstance(entry, URLResolver):
            paths.extend(every_path(entry, route))
        elif isinstance(entry, URLPattern):
            paths.append(_concrete(route))
    return sorted(set(paths))


def _concrete(route: str) -> str:
    route = re.sub(r"<(?:(\w+):)?\w+>", lambda m: _SAMPLES[m.group(1) or "str"], route)
    # Router regexes: drop anchors and optional format suffixes, fill named groups.
    route = route.lstrip("^").rstrip("$").replace("\\.(?P<format>[a-z0-9]+)/?", "")
    route = re.sub(r"\(\?P<\w+>[^)]*\)", "1", route)
    return "/" + route.replace("\\", "")


def test_every_url_refuses_a_body_nested_5000_deep_before_any_view() -> None:
    paths = every_path()
    assert len(paths) > 40, paths  # the console's pages, its API and the Advisor API
    client = Client(enforce_csrf_checks=True)
    for path in paths:
        for method in (client.post, client.put, client.patch):
            answer = method(path, DEEP, content_type="application/json")
            assert answer.status_code == 400, (path, answer.status_code)
            assert "nests deeper than 64 levels (MAX_JSON_DEPTH)" in answer.json()["detail"]


def test_a_json_body_over_the_upload_limit_is_refused_by_name(settings) -> None:
    settings.MAX_UPLOAD_BYTES = 1000
    answer = Client().post(
        "/api/v1/advisor/research/snapshots",
        b"[" + b"1," * 600 + b"1]",
        content_type="application/json",
    )
    assert answer.status_code == 413
    assert "larger than 1000 bytes (MAX_UPLOAD_BYTES)" in answer.json()["detail"]


def test_depth_is_counted_outside_strings_only() -> None:
    assert nesting_depth(b'{"a": [1, {"b": "[[[[{{{{"}]}') == 3
    assert nesting_depth(b'"\\"[[["') == 0
    assert nesting_depth(b"") == 0


def test_a_form_or_command_document_too_deep_is_refused_not_crashed(settings) -> None:
    with pytest.raises(JsonTooDeep, match="MAX_JSON_DEPTH"):
        loads_bounded("[" * 5000 + "]" * 5000)
    assert loads_bounded('{"rules": {"cuda_oom": "stop"}}') == {"rules": {"cuda_oom": "stop"}}
