"""Real logs written by other people, diagnosed as expected.

Each case of tests/fixtures/logs/expected.json names a log excerpt collected from a public issue
thread (SOURCES.md says which) and the diagnosis it must get.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from detection.core.context import DiagnosisContext
from detection.core.diagnosis import diagnose_bytes

LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "logs"
CASES: list[dict[str, Any]] = json.loads((LOGS / "expected.json").read_text())["cases"]


def case_id(case: dict[str, Any]) -> str:
    suffix = "-with-host" if case.get("context") else ""
    return str(case["file"]).removesuffix(".log") + suffix


def test_every_fixture_has_an_expected_diagnosis_and_a_source() -> None:
    files = {path.name for path in LOGS.glob("*.log")}
    assert files == {case["file"] for case in CASES}
    sources = (LOGS / "SOURCES.md").read_text()
    assert all(f"`{name}`" in sources for name in files)


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_real_log_gets_the_expected_diagnosis(case: dict[str, Any]) -> None:
    context = DiagnosisContext(**case.get("context", {}))
    diagnosis, report = diagnose_bytes((LOGS / case["file"]).read_bytes(), context)
    got = diagnosis.to_dict()
    expected = case["expected"]
    assert {key: got[key] for key in expected} == expected, got["explanation"]
    assert report.lines > 0
    if got["kind"] != "none":
        assert got["evidence"], "a failure diagnosis must show its evidence"
        assert got["explanation"]
