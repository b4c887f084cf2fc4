"""Uploads are bounded while they stream in: past ``MAX_UPLOAD_BYTES`` the rest of a file is
read past, not stored, and the request says which file was refused so its page can say why."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.files.uploadhandler import FileUploadHandler, SkipFile


class UploadSizeLimit(FileUploadHandler):
    """First of the upload handlers: passes chunks on until a file outgrows the limit."""

    def receive_data_chunk(self, raw_data: bytes, start: int) -> bytes | None:
        if start + len(raw_data) > settings.MAX_UPLOAD_BYTES:
            refused = getattr(self.request, "uploads_refused", [])
            refused.append(self.field_name)
            self.request.uploads_refused = refused  # type: ignore[union-attr]
            # The parser drops what it holds of this file and reads past the rest of it.
            raise SkipFile
        return raw_data

    def file_complete(self, file_size: int) -> Any:
        return None  # the next handler builds the file


def refused_uploads(request: Any) -> list[str]:
    """The file fields of this request that were refused for their size."""
    return list(getattr(request, "uploads_refused", []))
