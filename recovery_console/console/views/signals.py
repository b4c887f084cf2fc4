"""Test signals: paste or upload a log and see what ``diagnose`` advises, before any workload runs.

The verdict comes from the same place as the loop's: the cluster's policy (or the defaults) and
its signatures, so what an operator tries here is what the loop would advise."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from django.http import HttpRequest, HttpResponse

from detection.core.context import DiagnosisContext
from detection.core.decoding import decode_bytes
from detection.core.signatures import InvalidSignature, SignatureLibrary
from recovery_console.console.forms import TestSignalsForm
from recovery_console.console.uploads import refused_uploads
from remediation.core.policy import InvalidPolicy, Policy
from remediation.core.verdict import judge_excerpt
from remediation.services import excerpt_settings

from .common import narrow_cluster_choices, page, viewer_required

CONTEXT_LINES = 2
MAX_SHOWN_LINES = 400


@dataclass(frozen=True)
class ShownLine:
    number: int
    text: str
    signature: str  # empty for context lines
    gap_before: bool


@viewer_required
def test_signals(request: HttpRequest) -> HttpResponse:
    posted = request.method == "POST"
    # Bound on every POST: an upload refused for its size leaves POST and FILES empty, and the
    # refusal must still be said.
    form = TestSignalsForm(
        request.POST if posted else None,
        request.FILES if posted else None,
        refused=refused_uploads(request),
    )
    # Another cluster's policy and signatures are not this person's to read.
    narrow_cluster_choices(form, request)
    context: dict[str, Any] = {"form": form, "section": "signals"}
    if posted and form.is_valid():
        context.update(_diagnose(form))
    # 400 on any error, including a cluster's invalid signatures found while diagnosing.
    return page(request, "console/signals.html", context, status=400 if form.errors else 200)


def _diagnose(form: TestSignalsForm) -> dict[str, Any]:
    data = _input(form)
    try:
        policy, library = _settings(form)
    except InvalidSignature as exc:
        form.add_error("cluster", f"its custom signatures are invalid: {exc}")
        return {}
    except InvalidPolicy as exc:
        form.add_error("cluster", f"its policy is invalid: {exc}")
        return {}
    context = DiagnosisContext(
        nodes=form.node_list(),
        tasks_per_node=form.cleaned_data["tasks_per_node"],
        source_host=form.cleaned_data.get("host") or None,
    )
    verdict, report = judge_excerpt(data, context, policy, library)
    lines, _ = decode_bytes(data)
    result = verdict.to_dict()
    skipped_notes = [
        (name.replace("_", " "), count)
        for name, count in report.to_dict().items()
        if count and name not in {"bytes_read", "lines"}
    ]
    return {
        "result": result,
        "result_json": json.dumps(result, indent=2),
        "report": report,
        "skipped_notes": skipped_notes,
        "shown": _shown_lines(
            lines,
            {e.line: e.signature for e in verdict.interruption.evidence if e.line is not None},
        ),
        "reasons": verdict.decision.reasons,
        "fix": verdict.decision.fix,
        "rule": verdict.decision.rule,
    }


def _input(form: TestSignalsForm) -> bytes:
    # Both are bounded by MAX_UPLOAD_BYTES before they reach the form.
    upload = form.cleaned_data.get("upload")
    if upload is None:
        text: str = form.cleaned_data["text"]
        return text.encode("utf-8", "replace")
    data: bytes = upload.read()
    return data


def _settings(form: TestSignalsForm) -> tuple[Policy | None, SignatureLibrary | None]:
    """The chosen cluster's policy and signatures, or the defaults."""
    cluster = form.cleaned_data.get("cluster")
    if cluster is None:
        return None, None
    return excerpt_settings(cluster.name)


def _shown_lines(lines: tuple[str, ...], evidence: dict[int, str]) -> list[ShownLine]:
    """The evidence lines with a little context each (1-based numbers), gaps marked."""
    wanted: set[int] = set()
    for number in evidence:
        wanted.update(range(max(1, number - CONTEXT_LINES), number + CONTEXT_LINES + 1))
    shown: list[ShownLine] = []
    previous = 0
    for number in sorted(n for n in wanted if n <= len(lines))[:MAX_SHOWN_LINES]:
        signature = evidence.get(number, "")
        gap = previous != 0 and number != previous + 1
        shown.append(ShownLine(number, lines[number - 1], signature, gap))
        previous = number
    return shown
