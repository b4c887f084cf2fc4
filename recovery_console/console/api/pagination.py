"""Cursor pagination for every list: stable under inserts, so a client paging through a growing
audit trail neither skips nor repeats rows."""

from rest_framework.pagination import CursorPagination


class Cursor(CursorPagination):
    """Newest first by primary key (unique and increasing, so positions are exact)."""

    ordering = "-id"
    page_size = 100
    page_size_query_param = "page_size"
    max_page_size = 1000


class AuditCursor(Cursor):
    """The audit trail, newest first by its gapless sequence."""

    ordering = "-sequence"
