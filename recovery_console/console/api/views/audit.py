"""The audit trail: pages, the CSV export and the chain's state."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from django.db.models import QuerySet
from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework.decorators import action
from rest_framework.renderers import BrowsableAPIRenderer, JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response

from fleet import audit
from fleet.models import AuditEntry
from recovery_console.console.api import filtersets as f
from recovery_console.console.api import serializers as s

from ..pagination import AuditCursor
from ..renderers import CSVRenderer, csv_rows
from .common import ReadOnlyViewSet


@extend_schema_view(
    list=extend_schema(
        description=(
            "The audit trail, newest first. With `format=csv` (or `Accept: text/csv`) the "
            "filtered trail streams as CSV from the cursor on, without pages."
        ),
        responses={
            (200, "application/json"): s.AuditEntrySerializer(many=True),
            (200, "text/csv"): OpenApiTypes.STR,
        },
    )
)
class AuditEntryViewSet(ReadOnlyViewSet):
    """The append-only, hash-chained audit trail."""

    queryset = AuditEntry.objects.select_related("cluster")
    serializer_class = s.AuditEntrySerializer
    filterset_class = f.AuditEntryFilterSet
    # Paged by the gapless sequence, the trail's own order, rather than by id.
    pagination_class = AuditCursor
    renderer_classes = (JSONRenderer, BrowsableAPIRenderer, CSVRenderer)

    def handle_exception(self, exc: Exception) -> Response:
        # A refusal is JSON whatever the export asked for: a CSV of an error reads as data.
        response = super().handle_exception(exc)
        if getattr(self.request, "accepted_renderer", None) is not None:
            self.request.accepted_renderer = JSONRenderer()
            self.request.accepted_media_type = "application/json"
        return response

    def list(self, request: Request, *args: Any, **kwargs: Any) -> Any:
        if request.accepted_renderer.format != "csv":
            return super().list(request, *args, **kwargs)
        entries = self.filter_queryset(self.get_queryset())
        response = StreamingHttpResponse(
            csv_rows(s.AUDIT_CSV_COLUMNS, self._rows_from_cursor(entries)),
            content_type="text/csv; charset=utf-8",
        )
        response["Content-Disposition"] = 'attachment; filename="audit-trail.csv"'
        return response

    def _rows_from_cursor(self, entries: QuerySet[AuditEntry]) -> Iterator[dict[str, Any]]:
        # A cursor from the JSON pages is honoured: an export can go on where a page left off.
        cursor = AuditCursor().decode_cursor(self.request)
        if cursor is not None and cursor.position is not None:
            position = int(cursor.position)
            entries = entries.filter(
                # A reversed cursor (a previous page) points at newer entries, a forward one older.
                **{"sequence__gt" if cursor.reverse else "sequence__lt": position}
            )
        # Keyset batches: constant memory however long the trail.
        last = None
        while True:
            batch = entries.order_by("-sequence")
            if last is not None:
                batch = batch.filter(sequence__lt=last)
            rows = list(batch[:1000])
            yield from (s.AuditEntrySerializer(e).data for e in rows)
            if len(rows) < 1000:
                return
            last = rows[-1].sequence

    @extend_schema(responses=s.ChainStatusSerializer)
    @action(detail=False, methods=["get"])
    def chain(self, request: Request) -> Response:
        """Verify the hash chain and name the first broken entry, if any."""
        report = audit.verify_chain()
        # ``intact`` is a property, not a field, so it is added by hand.
        data = {**report.__dict__, "intact": report.intact}
        return Response(s.ChainStatusSerializer(data).data)
