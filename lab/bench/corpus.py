"""Scoring advice on a labelled corpus of real log excerpts: each excerpt is judged as
``manage.py diagnose`` judges it (the default policy, or a cluster's) and compared with what an
experienced operator said it is and what they would do.

The corpus is a directory with the excerpts and an ``expected.json`` of ``{"cases": [{"file",
"source", "part", "expected": {"category", "attribution", "action", "implicated_hosts"},
"context"?}]}``; a case's ``context`` (``nodes``, ``tasks_per_node``, ``source_host``) is what
the caller knew. ``part`` splits the corpus by source thread (``source``): rules are written
against the ``development`` part, and the ``held_out`` part measures how they generalise.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from detection.core.context import DiagnosisContext
from detection.core.signatures import SignatureLibrary
from remediation.core.policy import Policy
from remediation.core.verdict import judge_excerpt

BENIGN = "benign"
DEVELOPMENT, HELD_OUT = "development", "held_out"
PARTS = (HELD_OUT, DEVELOPMENT)
MAX_EXCERPT_BYTES = 64 * 1024 * 1024


class CorpusError(ValueError):
    """The corpus cannot be read; the message says which file and why."""


@dataclass(frozen=True)
class Case:
    file: str
    expected: dict[str, Any]
    context: DiagnosisContext
    source: str = ""
    part: str = DEVELOPMENT
    round: int = 0  # when it was collected: later rounds' held-out threads met no rule tuning


@dataclass(frozen=True)
class Judged:
    case: Case
    got: dict[str, Any]

    def agrees(self, key: str) -> bool:
        if key == "implicated_hosts":
            return set(self.case.expected[key]) == set(self.got[key])
        return bool(self.case.expected[key] == self.got[key])


def load_cases(directory: Path) -> list[Case]:
    path = directory / "expected.json"
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
        raw = document["cases"]
        return [case_from(entry) for entry in raw]
    except OSError as exc:
        raise CorpusError(f"cannot read {path}: {exc.strerror}") from exc
    except (ValueError, KeyError, TypeError) as exc:
        raise CorpusError(f"{path} is not a corpus index: {exc}") from exc


def case_from(entry: dict[str, Any]) -> Case:
    context = entry.get("context") or {}
    allowed = {"nodes", "tasks_per_node", "source_host", "world_size"}
    unknown = set(context) - allowed
    if unknown:
        raise ValueError(f"{entry['file']}: unknown context keys {sorted(unknown)}")
    if "nodes" in context:
        context = {**context, "nodes": tuple(context["nodes"])}
    expected = entry["expected"]
    for key in ("category", "attribution", "action", "implicated_hosts"):
        if key not in expected:
            raise ValueError(f"{entry['file']}: expected.{key} is missing")
    part = entry.get("part", DEVELOPMENT)
    if part not in PARTS:
        raise ValueError(f"{entry['file']}: part {part!r} is not one of {', '.join(PARTS)}")
    source = str(entry.get("source", ""))
    collected = int(entry.get("round", 0))
    return Case(
        str(entry["file"]), dict(expected), DiagnosisContext(**context), source, part, collected
    )


def threads_in_both_parts(cases: Iterable[Case]) -> set[str]:
    """Source threads with excerpts in both parts: a split by thread has none."""
    parts: dict[str, set[str]] = {}
    for case in cases:
        parts.setdefault(case.source, set()).add(case.part)
    return {source for source, seen in parts.items() if len(seen) > 1}


def judge_cases(
    directory: Path,
    cases: Iterable[Case],
    policy: Policy | None = None,
    library: SignatureLibrary | None = None,
) -> list[Judged]:
    judged = []
    for case in cases:
        path = directory / case.file
        # Excerpts are files a contributor chose; none may point outside the corpus.
        if path.resolve().parent != directory.resolve():
            raise CorpusError(f"{case.file} is not a file of the corpus directory")
        try:
            with path.open("rb") as handle:
                data = handle.read(MAX_EXCERPT_BYTES)
        except OSError as exc:
            raise CorpusError(f"cannot read {path}: {exc.strerror}") from exc
        verdict, _ = judge_excerpt(data, case.context, policy, library)
        judged.append(Judged(case, verdict.to_dict()))
    return judged


def score_by_part(judged: Sequence[Judged]) -> dict[str, Any]:
    """The scores of the held-out part first (what generalises), then the development part's,
    the held-out part's per collection round, and the whole corpus's."""
    result: dict[str, Any] = {
        part: score([j for j in judged if j.case.part == part]) for part in PARTS
    }
    # The latest round's held-out threads are the only ones no rule was written after seeing
    # any of its part's misses: the least biased figure.
    rounds = sorted({j.case.round for j in judged if j.case.part == HELD_OUT})
    result["held_out_by_round"] = {
        str(n): score([j for j in judged if j.case.part == HELD_OUT and j.case.round == n])
        for n in rounds
    }
    result["all"] = score(judged)
    return result


def score(judged: Sequence[Judged]) -> dict[str, Any]:
    """Macro-F1 over categories, action and attribution agreement, failures called benign,
    benign excerpts flagged, host recall and precision; per category and per action."""
    if not judged:
        return {"excerpts": 0}
    categories = sorted(
        {j.case.expected["category"] for j in judged} | {j.got["category"] for j in judged}
    )
    per_category = {c: _category_scores(judged, c) for c in categories}
    labelled = [c for c in categories if per_category[c]["support"]]
    failures = [j for j in judged if j.case.expected["category"] != BENIGN]
    benign = [j for j in judged if j.case.expected["category"] == BENIGN]
    wanted_hosts = sum(len(j.case.expected["implicated_hosts"]) for j in judged)
    named_hosts = sum(len(j.got["implicated_hosts"]) for j in judged)
    right_hosts = sum(
        len(set(j.case.expected["implicated_hosts"]) & set(j.got["implicated_hosts"]))
        for j in judged
    )
    return {
        "excerpts": len(judged),
        "category_macro_f1": _round(sum(per_category[c]["f1"] for c in labelled) / len(labelled)),
        "action_agreement": _share(j.agrees("action") for j in judged),
        "attribution_agreement": _share(j.agrees("attribution") for j in judged),
        "missed_failures": _share(j.got["category"] == BENIGN for j in failures),
        "benign_false_positives": _share(j.got["category"] != BENIGN for j in benign),
        "host_recall": _round(right_hosts / wanted_hosts) if wanted_hosts else None,
        "host_precision": _round(right_hosts / named_hosts) if named_hosts else None,
        "per_category": per_category,
        "per_action": _per_action(judged),
        "action_confusion": _confusion(judged),
    }


def disagreements(judged: Sequence[Judged]) -> list[dict[str, Any]]:
    keys = ("category", "action", "implicated_hosts")
    return [
        {
            "file": j.case.file,
            "part": j.case.part,
            **{f"expected_{key}": j.case.expected[key] for key in keys},
            **{f"got_{key}": j.got[key] for key in keys},
        }
        for j in judged
        if not all(j.agrees(key) for key in keys)
    ]


def _category_scores(judged: Sequence[Judged], category: str) -> dict[str, Any]:
    tp = sum(
        1
        for j in judged
        if j.case.expected["category"] == category and j.got["category"] == category
    )
    fp = sum(
        1
        for j in judged
        if j.case.expected["category"] != category and j.got["category"] == category
    )
    fn = sum(
        1
        for j in judged
        if j.case.expected["category"] == category and j.got["category"] != category
    )
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {
        "support": tp + fn,
        "precision": _round(precision),
        "recall": _round(recall),
        "f1": _round(f1),
    }


def _per_action(judged: Sequence[Judged]) -> dict[str, Any]:
    """Per advised action: how often an operator would have done the same (precision), and
    per expected action how often it was advised (recall)."""
    actions = sorted(
        {j.case.expected["action"] for j in judged} | {j.got["action"] for j in judged}
    )
    result = {}
    for action in actions:
        advised = [j for j in judged if j.got["action"] == action]
        wanted = [j for j in judged if j.case.expected["action"] == action]
        result[action] = {
            "advised": len(advised),
            "expected": len(wanted),
            "precision": _share(j.agrees("action") for j in advised),
            "recall": _share(j.agrees("action") for j in wanted),
        }
    return result


def _confusion(judged: Sequence[Judged]) -> dict[str, dict[str, int]]:
    counts = Counter((j.case.expected["action"], j.got["action"]) for j in judged)
    matrix: dict[str, dict[str, int]] = {}
    for (expected, got), count in sorted(counts.items()):
        matrix.setdefault(expected, {})[got] = count
    return matrix


def _share(flags: Iterable[bool]) -> float | None:
    values = list(flags)
    return _round(sum(values) / len(values)) if values else None


def _round(value: float) -> float:
    return round(value, 3)
