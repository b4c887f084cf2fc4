"""The audit trail: filtered, newest first, paged by sequence; its export and chain status."""

from __future__ import annotations

import json

from django.core.cache import cache
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.urls import NoReverseMatch, reverse

from fleet.audit import ChainReport, verify_chain
from fleet.models import AuditChainHead, AuditEntry
from recovery_console.console.forms import AuditFilterForm

from .common import narrow_cluster_choices, page, viewer_required, visible

PER_PAGE = 50
# The export is the REST API's (cursor-paginated, filtered the same way).
EXPORT_URL_NAME = "audit-entry-list"
EXPORT_FALLBACK = "/api/v1/audit-entries/"


@viewer_required
def audit_trail(request: HttpRequest) -> HttpResponse:
    form = AuditFilterForm(request.GET or None)
    narrow_cluster_choices(form, request)
    # Entries of other clusters, and site-wide ones, are for those who see every cluster.
    entries = visible(_filtered(form), request.user)
    cursor = _int(request.GET.get("cursor"))
    if cursor:
        # Keyset paging on the gapless sequence: new entries do not shift the pages.
        entries = entries.filter(sequence__lt=cursor)
    # One row more than shown: if it comes back, there is a next page.
    rows = _first(entries, PER_PAGE + 1)
    for entry in rows:
        entry.payload_text = json.dumps(entry.payload, ensure_ascii=False)  # type: ignore[attr-defined]
    query = _filters_query(request)
    context = {
        "form": form,
        "entries": rows[:PER_PAGE],
        "next_cursor": rows[PER_PAGE - 1].sequence if len(rows) > PER_PAGE else None,
        "query": query,
        "paged": bool(cursor),
        "csv_url": _export_url("csv", query),
        "json_url": _export_url("json", query),
        "section": "audit",
    }
    return page(request, "console/audit.html", context)


def _first(entries: QuerySet[AuditEntry], size: int) -> list[AuditEntry]:
    """The first ``size`` entries, their sequences first: the index on (sequence, at) answers
    that alone, so a time filter skips entries in the index rather than reading each row (on a
    million entries, tenths of a second rather than seconds)."""
    sequences = list(entries.values_list("sequence", flat=True)[:size])
    return list(entries.filter(sequence__in=sequences))


def _int(value: str | None) -> int | None:
    return int(value) if value and value.isdigit() else None


def _filtered(form: AuditFilterForm) -> QuerySet[AuditEntry]:
    entries = AuditEntry.objects.select_related("cluster", "workload").order_by("-sequence")
    if not (form.is_bound and form.is_valid()):
        return entries
    data = form.cleaned_data
    exact = {
        "cluster": data["cluster"],
        "actor": data["actor"],
        "verb": data["verb"],
        "object_type": data["object_type"],
        "object_id": data["object_id"],
        "workload_id": data["workload"],
        "at__gte": data["created__after"],
        "at__lt": data["created__before"],
    }
    return entries.filter(**{k: v for k, v in exact.items() if v not in (None, "")})


def _filters_query(request: HttpRequest) -> str:
    query = request.GET.copy()
    query.pop("cursor", None)
    # Empty filters left out, so the export links carry only the filters in use.
    for name in [k for k, v in query.items() if v == ""]:
        query.pop(name)
    return query.urlencode()


def _export_url(fmt: str, query: str) -> str:
    try:
        base = reverse(EXPORT_URL_NAME)
    except NoReverseMatch:
        base = EXPORT_FALLBACK
    return f"{base}?format={fmt}" + (f"&{query}" if query else "")


@viewer_required
def chain_status(request: HttpRequest) -> HttpResponse:
    """Verifying walks the whole trail, so the page loads this part afterwards and the result
    is kept until the trail grows (or someone asks again)."""
    head = AuditChainHead.objects.filter(pk=1).values_list("last_sequence", flat=True).first()
    key = f"console:audit-chain:{head or 0}"
    report: ChainReport | None = None if request.GET.get("again") else cache.get(key)
    if report is None:
        report = verify_chain()
        cache.set(key, report, timeout=3600)
    return page(request, "console/_audit_chain.html", {"report": report})
