"""Decoding arbitrary bytes for a diagnosis: invalid UTF-8, NUL bytes, huge lines, floods of
matching lines and random binary are all read, and what was changed is counted. Pure: no Django."""

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from detection.core.constants import MAX_CLASSIFIED_LINES
from detection.core.decoding import decode_bytes
from detection.core.diagnosis import diagnose_bytes
from fleet.core.taxonomy import Category, Kind


def test_decoding_replaces_invalid_utf8_and_strips_nul_bytes() -> None:
    lines, report = decode_bytes(b"ok\nbad \xff\xfe here\nnul\x00\x00 here\r\nlast")
    assert lines == ("ok", "bad \ufffd\ufffd here", "nul here", "last")
    assert report.invalid_utf8_replaced == 2
    assert report.nul_bytes_stripped == 2
    assert report.lines == 4
    assert report.lines_truncated == 0


def test_decoding_keeps_a_genuine_replacement_character_out_of_the_count() -> None:
    _, report = decode_bytes("already \ufffd here".encode())
    assert report.invalid_utf8_replaced == 0


def test_long_lines_are_cut_at_a_character_boundary_and_counted() -> None:
    data = ("é" * 100).encode() + b"\nshort"
    lines, report = decode_bytes(data, max_line_bytes=51)
    assert lines[0] == "é" * 25
    assert report.lines_truncated == 1
    assert report.bytes_truncated == 150
    assert lines[1] == "short"


def test_a_10_mb_single_line_and_random_binary_are_diagnosed() -> None:
    result, report = diagnose_bytes(b"x" * (10 * 1024 * 1024))
    assert report.lines_truncated == 1 and result.kind is Kind.NONE
    junk = bytes((i * 7919 + 13) % 256 for i in range(2 * 1024 * 1024))
    result, report = diagnose_bytes(junk)
    assert report.invalid_utf8_replaced > 0
    json.dumps([result.summary, *(e.to_record() for e in result.evidence)])


def test_a_flood_of_matching_lines_is_classified_up_to_the_cap_and_says_so() -> None:
    data = b"".join(
        b"node-1:1:2 [0] NCCL WARN odd %d\n" % i for i in range(MAX_CLASSIFIED_LINES + 5)
    )
    result, _ = diagnose_bytes(data)
    assert "stopped" in result.explanation
    assert "5 line(s) from there on were not examined" in result.explanation


def test_diagnose_bytes_returns_the_diagnosis_and_what_decoding_changed() -> None:
    result, report = diagnose_bytes(b"\x00torch.OutOfMemoryError: CUDA out of memory\n")
    assert result.category is Category.CUDA_OOM
    assert report.to_dict()["nul_bytes_stripped"] == 1


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=4000))
def test_decoding_arbitrary_bytes_is_total(data: bytes) -> None:
    lines, report = decode_bytes(data, max_line_bytes=64)
    assert report.lines == len(lines)
    assert all("\x00" not in line and "\n" not in line for line in lines)
    assert report.nul_bytes_stripped == data.count(b"\x00")


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=3000))
def test_diagnosing_arbitrary_bytes_never_raises(data: bytes) -> None:
    result, _ = diagnose_bytes(data)
    json.dumps([result.summary, *(e.to_record() for e in result.evidence)])
