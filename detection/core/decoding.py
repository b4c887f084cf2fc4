"""Arbitrary bytes into lines a diagnosis can read: never raises, linear in the input, and says
what it had to skip or change (NUL bytes, invalid UTF-8, huge lines)."""

from __future__ import annotations

from dataclasses import dataclass

from detection.core.constants import MAX_LINE_BYTES


@dataclass(frozen=True)
class DecodeReport:
    """What decoding raw bytes skipped or changed, so a caller can say so."""

    bytes_read: int
    lines: int
    invalid_utf8_replaced: int
    nul_bytes_stripped: int
    lines_truncated: int
    bytes_truncated: int

    def to_dict(self) -> dict[str, int]:
        return {
            "bytes_read": self.bytes_read,
            "lines": self.lines,
            "invalid_utf8_replaced": self.invalid_utf8_replaced,
            "nul_bytes_stripped": self.nul_bytes_stripped,
            "lines_truncated": self.lines_truncated,
            "bytes_truncated": self.bytes_truncated,
        }


_REPLACEMENT = "\ufffd"
_ENCODED_REPLACEMENT = _REPLACEMENT.encode()


def decode_bytes(
    data: bytes, *, max_line_bytes: int = MAX_LINE_BYTES
) -> tuple[tuple[str, ...], DecodeReport]:
    """Decode arbitrary bytes into lines; never raises, linear in ``len(data)``.

    Lines split at ``\\n``, ``\\r\\n`` and ``\\r`` (progress bars redraw with ``\\r``). NUL bytes
    are dropped, lines longer than ``max_line_bytes`` are cut (at a character boundary) before
    decoding, and invalid UTF-8 becomes U+FFFD. The report counts each of these.
    """
    nul = data.count(b"\x00")
    if nul:
        data = data.replace(b"\x00", b"")
    lines: list[str] = []
    invalid = truncated = cut_bytes = 0
    for raw in data.splitlines():
        if len(raw) > max_line_bytes:
            truncated += 1
            cut = _char_boundary(raw, max_line_bytes)
            cut_bytes += len(raw) - cut
            raw = raw[:cut]
        text = raw.decode("utf-8", "replace")
        if _REPLACEMENT in text:
            invalid += text.count(_REPLACEMENT) - raw.count(_ENCODED_REPLACEMENT)
        lines.append(text)
    report = DecodeReport(
        bytes_read=len(data) + nul,
        lines=len(lines),
        invalid_utf8_replaced=invalid,
        nul_bytes_stripped=nul,
        lines_truncated=truncated,
        bytes_truncated=cut_bytes,
    )
    return tuple(lines), report


def _char_boundary(raw: bytes, limit: int) -> int:
    """The largest cut <= limit that does not split a UTF-8 sequence."""
    cut = limit
    # Step back over continuation bytes (10xxxxxx), at most three of them.
    while cut > limit - 3 and cut > 0 and 0x80 <= raw[cut] <= 0xBF:
        cut -= 1
    return cut
