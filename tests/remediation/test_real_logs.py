"""Real logs written by other people, judged as an experienced operator would.

Each case of tests/fixtures/logs/expected.json names a log excerpt collected from a public issue
thread, training log book or vendor document (SOURCES.md says which) and the verdict it must get:
category, attribution, action and implicated hosts. A case the product still gets wrong says so
in ``known_miss``; it is expected to fail (strictly: once it passes, the mark must go).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from lab.bench.corpus import case_from, judge_cases, load_cases, score

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs"
CASES: list[dict[str, Any]] = json.loads((LOGS / "expected.json").read_text())["cases"]
KEYS = ("category", "attribution", "action", "implicated_hosts")


def case_id(case: dict[str, Any]) -> str:
    suffix = "-with-context" if case.get("context") else ""
    return str(case["file"]).removesuffix(".log") + suffix


def _param(case: dict[str, Any]) -> Any:
    marks = (
        [pytest.mark.xfail(strict=True, reason=case["known_miss"])]
        if case.get("known_miss")
        else []
    )
    return pytest.param(case, id=case_id(case), marks=marks)


def test_every_fixture_has_an_expected_verdict_and_a_source() -> None:
    files = {path.name for path in LOGS.glob("*.log")}
    assert files == {case["file"] for case in CASES}
    sources = (LOGS / "SOURCES.md").read_text()
    assert all(f"`{name}`" in sources for name in files)


def test_the_corpus_is_big_and_varied_enough_to_measure_by() -> None:
    files = {case["file"] for case in CASES}
    per_category: dict[str, int] = {}
    for case in CASES:
        category = case["expected"]["category"]
        per_category[category] = per_category.get(category, 0) + 1
    assert len(files) >= 150
    assert per_category["benign"] >= 20
    assert min(per_category.values()) >= 8, per_category


@pytest.mark.parametrize("case", [_param(case) for case in CASES])
def test_real_log_gets_the_expected_verdict(case: dict[str, Any]) -> None:
    [judged] = judge_cases(LOGS, [case_from(case)])
    got = judged.got
    expected = {key: case["expected"][key] for key in KEYS}
    got_keys = {key: got[key] for key in KEYS}
    got_keys["implicated_hosts"] = sorted(got_keys["implicated_hosts"])
    expected["implicated_hosts"] = sorted(expected["implicated_hosts"])
    assert got_keys == expected, got["explanation"]
    if got["kind"] != "none":
        assert got["evidence"], "a failure verdict must show its evidence"
        assert got["explanation"]


def test_the_corpus_scores_meet_the_targets() -> None:
    """The issue's targets, on the whole corpus: what an operator reviewing this advice would
    agree with."""
    result = score(judge_cases(LOGS, load_cases(LOGS)))
    assert result["category_macro_f1"] >= 0.90
    assert result["action_agreement"] >= 0.90
    assert result["missed_failures"] <= 0.03
    assert result["benign_false_positives"] <= 0.05
    assert result["host_recall"] >= 0.90
