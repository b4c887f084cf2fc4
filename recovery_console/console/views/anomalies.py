"""One anomaly: its evidence lines highlighted, its attribution and explanation, its advice."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404

from detection.core.signatures import BUILTIN_SIGNATURES
from detection.models import Anomaly, AttemptMonitor
from detection.services import custom_signatures_of
from recovery_console.console.models import Review
from remediation.models import Advice

from .common import page, viewer_required, visible


@dataclass(frozen=True)
class EvidenceLine:
    """One evidence line as the page shows it. ``role`` is the signature's (initiating,
    cascade or context); ``root`` marks the line the root cause was named from."""

    at: datetime | None
    source: str
    host: str
    signature: str
    text: str
    line: int | None
    role: str
    root: bool


# Built-in signatures are fixed while running; a cluster's custom ones are read each time.
@lru_cache(maxsize=1)
def _builtin_roles() -> dict[str, str]:
    return {s.name: s.role.value for s in BUILTIN_SIGNATURES}


def signature_roles(cluster_name: str) -> dict[str, str]:
    custom = {
        str(spec.get("name")): str(spec.get("role", "initiating"))
        for spec in custom_signatures_of(cluster_name)
    }
    # Custom last: a custom signature named like a built-in one gives its role.
    return {**_builtin_roles(), **custom}


def evidence_lines(anomaly: Anomaly) -> list[EvidenceLine]:
    """The anomaly's evidence in time order; metric findings count as initiating."""
    roles = signature_roles(anomaly.cluster.name)
    root_signature = anomaly.root_cause.split(":", 1)[0]
    rows = [_evidence_line(item, roles) for item in anomaly.evidence]
    # Undated lines go last; lines of the same time keep their order in the log.
    rows.sort(key=lambda r: (r.at is None, r.at or datetime.min.replace(tzinfo=UTC), r.line or 0))
    # The earliest line of the root cause's signature is the one it was named from.
    first = next((r for r in rows if r.signature and r.signature == root_signature), None)
    return [replace(r, root=True) if r is first else r for r in rows]


def _evidence_line(item: dict[str, Any], roles: dict[str, str]) -> EvidenceLine:
    signature = str(item.get("signature") or "")
    at = item.get("at")
    return EvidenceLine(
        at=datetime.fromisoformat(at) if at else None,
        source=str(item.get("source") or "log"),
        host=str(item.get("host") or ""),
        signature=signature,
        text=str(item.get("text") or ""),
        line=item.get("line"),
        role=roles.get(signature, "initiating"),
        root=False,
    )


@viewer_required
def anomaly_detail(request: HttpRequest, pk: int) -> HttpResponse:
    anomalies = Anomaly.objects.select_related("cluster", "workload", "attempt")
    # Another cluster's anomaly (and its advice) is not found, as in the REST API.
    anomaly = get_object_or_404(visible(anomalies, request.user), pk=pk)
    # At most one (one-to-one), and none while the anomaly has not been advised on yet.
    advice = Advice.objects.filter(anomaly=anomaly).first()
    context = {
        "anomaly": anomaly,
        "evidence": evidence_lines(anomaly),
        "advice": advice,
        "milestones": list(advice.milestones.all()) if advice else [],
        "reviews": _reviews_of(advice),
        "matched": _matched_lines(anomaly),
        "section": "workloads",
    }
    return page(request, "console/anomaly.html", context)


def _reviews_of(advice: Advice | None) -> list[Review]:
    if advice is None:
        return []
    return list(Review.objects.filter(advice=advice).select_related("reviewer"))


def _matched_lines(anomaly: Anomaly) -> list[dict[str, Any]]:
    """The attempt's matched log lines the detector kept (bounded), evidence marked."""
    monitor = AttemptMonitor.objects.filter(attempt_id=anomaly.attempt_id)
    kept = monitor.values_list("matched_lines", flat=True).first() or []
    evidence_texts = {str(e.get("text", "")) for e in anomaly.evidence}
    return [
        {
            **line,
            "at": datetime.fromisoformat(line["at"]) if line.get("at") else None,
            "evidence": line.get("text") in evidence_texts,
        }
        for line in kept
    ]
