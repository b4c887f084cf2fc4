"""Tailing Slurm job output files: rotation, truncation, partial lines, arrays, restarts."""

from __future__ import annotations

import json
import os
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from detection.sources import files as files_module
from detection.sources.base import LogBatch, SourceUnavailable
from detection.sources.files import FilesConfig, JobOutputFiles, leading_timestamp

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def source(directory: Path, **options: Any) -> JobOutputFiles:
    return JobOutputFiles(FilesConfig(directory=str(directory), **options))


def append(path: Path, data: bytes) -> None:
    with path.open("ab") as handle:
        handle.write(data)


def persisted(batch: LogBatch) -> dict[str, Any]:
    """The cursor as the caller stores it: through JSON and back."""
    cursor: dict[str, Any] = json.loads(json.dumps(batch.cursor))
    return cursor


def texts(batch: LogBatch) -> list[str]:
    return [line.text for line in batch.lines]


def now_for(path: Path) -> datetime:
    """A "now" just after the file's last write, so it does not look idle."""
    return datetime.fromtimestamp(path.stat().st_mtime, UTC) + timedelta(seconds=1)


def test_lines_carry_the_job_id_from_the_file_name(tmp_path: Path) -> None:
    append(tmp_path / "slurm-1234.out", b"step 1\n")
    append(tmp_path / "slurm-1300_7.out", b"task seven\n")
    append(tmp_path / "notes.txt", b"not a job file\n")

    batch = source(tmp_path).fetch(None, now_for(tmp_path / "slurm-1300_7.out"))

    assert {(line.job_id, line.text) for line in batch.lines} == {
        ("1234", "step 1"),
        ("1300_7", "task seven"),
    }
    assert all(line.host is None for line in batch.lines)


def test_a_configurable_regex_reads_other_naming_schemes(tmp_path: Path) -> None:
    append(tmp_path / "train.5521.4.log", b"hello\n")

    files = source(tmp_path, pattern="*.log", name_regex=r"^\w+\.(?P<job>\d+)\.(?P<task>\d+)\.log$")
    batch = files.fetch(None, now_for(tmp_path / "train.5521.4.log"))

    assert [(line.job_id, line.text) for line in batch.lines] == [("5521_4", "hello")]


def test_a_partial_last_line_waits_for_its_newline(tmp_path: Path) -> None:
    path = tmp_path / "slurm-1.out"
    append(path, b"complete\nhalf a li")
    files = source(tmp_path)

    first = files.fetch(None, now_for(path))
    append(path, b"ne\nnext\n")
    second = files.fetch(persisted(first), now_for(path))

    assert texts(first) == ["complete"]
    assert texts(second) == ["half a line", "next"]


def test_a_partial_line_is_returned_once_the_file_has_been_idle(tmp_path: Path) -> None:
    path = tmp_path / "slurm-1.out"
    append(path, b"RuntimeError: CUDA error: an illegal memory acc")
    files = source(tmp_path, flush_partial_after=timedelta(seconds=30))

    waiting = files.fetch(None, now_for(path))
    idle = files.fetch(persisted(waiting), now_for(path) + timedelta(minutes=1))
    again = files.fetch(persisted(idle), now_for(path) + timedelta(minutes=2))

    assert texts(waiting) == []
    assert texts(idle) == ["RuntimeError: CUDA error: an illegal memory acc"]
    assert texts(again) == []


def test_rotation_finishes_the_old_file_and_starts_the_new_one_at_zero(tmp_path: Path) -> None:
    path = tmp_path / "slurm-77.out"
    append(path, b"old 1\n")
    files = source(tmp_path)
    first = files.fetch(None, now_for(path))

    append(path, b"old 2\n")  # written before the rotation, not yet read
    path.rename(tmp_path / "slurm-77.out.1")
    append(path, b"new 1\n")
    second = files.fetch(persisted(first), now_for(path))
    append(tmp_path / "slurm-77.out.1", b"old 3 (late writer)\n")
    third = files.fetch(persisted(second), now_for(path))

    assert texts(first) == ["old 1"]
    assert texts(second) == ["old 2", "new 1"]
    assert texts(third) == ["old 3 (late writer)"]
    assert {line.job_id for line in second.lines + third.lines} == {"77"}


def test_truncation_reads_the_file_again_from_the_start_and_says_so(tmp_path: Path) -> None:
    path = tmp_path / "slurm-9.out"
    append(path, b"attempt 0: step 1\nattempt 0: step 2\n")
    files = source(tmp_path)
    first = files.fetch(None, now_for(path))

    path.write_bytes(b"attempt 1\n")  # a requeue with --open-mode=truncate
    second = files.fetch(persisted(first), now_for(path))

    assert texts(second) == ["attempt 1"]
    assert any("truncated" in note for note in second.notes)


def test_a_file_rewritten_past_the_offset_is_read_again_from_the_start(tmp_path: Path) -> None:
    path = tmp_path / "slurm-9.out"
    append(path, b"first run\n")
    files = source(tmp_path)
    first = files.fetch(None, now_for(path))

    # Truncated and rewritten longer than before between two polls: the size alone cannot tell.
    path.write_bytes(b"second run, a much longer first line\nmore\n")
    second = files.fetch(persisted(first), now_for(path))

    assert texts(second) == ["second run, a much longer first line", "more"]
    assert any("replaced" in note for note in second.notes)


def test_new_files_are_picked_up_and_vanished_ones_forgotten(tmp_path: Path) -> None:
    files = source(tmp_path, forget_after=timedelta(minutes=10))
    append(tmp_path / "slurm-1.out", b"one\n")
    first = files.fetch(None, now_for(tmp_path / "slurm-1.out"))

    append(tmp_path / "slurm-2.out", b"two\n")
    (tmp_path / "slurm-1.out").unlink()
    second = files.fetch(persisted(first), NOW + timedelta(days=9999))
    later = files.fetch(persisted(second), NOW + timedelta(days=9999, minutes=11))

    assert texts(second) == ["two"]
    assert any("disappeared" in note for note in second.notes)
    assert len(second.cursor["files"]) == 2  # remembered a while, in case it comes back
    assert len(later.cursor["files"]) == 1


def test_a_restart_neither_loses_nor_repeats_lines(tmp_path: Path) -> None:
    path = tmp_path / "slurm-5.out"
    append(path, b"".join(b"line %d\n" % i for i in range(10)))
    first = source(tmp_path, max_lines=4).fetch(None, now_for(path))
    stored = persisted(first)

    # The process dies after storing the lines and the cursor; a new one starts from it.
    append(path, b"line 10\n")
    batches = [source(tmp_path, max_lines=4).fetch(stored, now_for(path))]
    while batches[-1].more:
        batches.append(source(tmp_path, max_lines=4).fetch(persisted(batches[-1]), now_for(path)))

    read = texts(first) + [text for batch in batches for text in texts(batch)]
    assert read == [f"line {i}" for i in range(11)]


def test_the_same_cursor_returns_the_same_lines_again(tmp_path: Path) -> None:
    path = tmp_path / "slurm-5.out"
    append(path, b"a\nb\n")
    first = source(tmp_path).fetch(None, now_for(path))
    append(path, b"c\nd\n")
    files = source(tmp_path)

    # A crash between fetch and save: the caller fetches again with the cursor it kept.
    again = [files.fetch(persisted(first), now_for(path)) for _ in range(2)]

    assert texts(again[0]) == texts(again[1]) == ["c", "d"]
    assert again[0].cursor == again[1].cursor


def test_each_fetch_is_bounded_and_says_when_more_is_waiting(tmp_path: Path) -> None:
    path = tmp_path / "slurm-5.out"
    append(path, b"x" * 99 + b"\n" * 1 + b"".join(b"%03d\n" % i for i in range(30)))
    files = source(tmp_path, max_lines=10)

    first = files.fetch(None, now_for(path))
    by_bytes = source(tmp_path, max_bytes=200).fetch(None, now_for(path))

    assert len(first.lines) == 10 and first.more
    assert 0 < len(by_bytes.lines) < 31 and by_bytes.more


def test_a_10_mb_line_is_cut_at_the_cap_and_the_next_line_is_intact(tmp_path: Path) -> None:
    path = tmp_path / "slurm-8.out"
    append(path, b"before\n" + b"A" * (10 * 1024 * 1024))
    files = source(tmp_path, max_line_bytes=64 * 1024)

    first = files.fetch(None, now_for(path))
    append(path, b"B" * 1000 + b"\nafter\n")
    second = files.fetch(persisted(first), now_for(path))

    assert texts(first) == ["before", "A" * 64 * 1024]
    assert first.truncated == 1
    assert texts(second) == ["after"]  # the rest of the long line is dropped, not a new line


def test_binary_garbage_never_crashes_and_yields_clean_text(tmp_path: Path) -> None:
    path = tmp_path / "slurm-3.out"
    append(path, os.urandom(256 * 1024) + b"\n\x00\x00NCCL WARN \xff\xfe\x00 boom\r\n")
    batch = source(tmp_path, max_line_bytes=4096).fetch(None, now_for(path))

    assert batch.lines
    assert all("\x00" not in line.text for line in batch.lines)
    assert all(len(line.text.encode()) <= 4096 * 3 for line in batch.lines)
    assert batch.lines[-1].text == "NCCL WARN \ufffd\ufffd boom"


def test_lines_without_a_timestamp_get_the_file_time_and_zoned_ones_keep_theirs(
    tmp_path: Path,
) -> None:
    path = tmp_path / "slurm-3.out"
    append(path, b"plain\n2026-11-29T11:58:00.123456789Z NCCL WARN\n2026-11-29 11:58:00 naive\n")
    mtime = datetime.fromtimestamp(path.stat().st_mtime, UTC)

    batch = source(tmp_path).fetch(None, mtime + timedelta(seconds=5))
    earlier = source(tmp_path).fetch(None, mtime - timedelta(hours=1))

    assert [line.at for line in batch.lines] == [
        mtime,
        datetime(2026, 11, 29, 11, 58, 0, 123456, tzinfo=UTC),
        mtime,
    ]
    assert earlier.lines[0].at == mtime - timedelta(hours=1)  # never later than "now"


def test_a_missing_directory_raises_source_unavailable(tmp_path: Path) -> None:
    append(tmp_path / "slurm-1.out", b"x\n")
    first = source(tmp_path).fetch(None, NOW)
    gone = tmp_path.rename(tmp_path.with_name(tmp_path.name + "-unmounted"))

    with pytest.raises(SourceUnavailable, match="missing or not readable"):
        source(tmp_path).fetch(persisted(first), NOW)
    gone.rename(tmp_path)
    append(tmp_path / "slurm-1.out", b"y\n")
    assert texts(source(tmp_path).fetch(persisted(first), NOW)) == ["y"]


def test_a_malformed_cursor_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="malformed files cursor"):
        source(tmp_path).fetch({"v": 1, "files": {"1:2": {"path": "x"}}}, NOW)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[2026-11-29T12:00:00+01:00] x", datetime(2026, 11, 29, 11, tzinfo=UTC)),
        ("2026-11-29 12:00:00,5Z x", datetime(2026, 11, 29, 12, 0, 0, 500000, tzinfo=UTC)),
        ("2026-11-29 12:00:00 naive", None),
        ("step 12", None),
    ],
)
def test_only_zoned_leading_timestamps_are_read(text: str, expected: datetime | None) -> None:
    assert leading_timestamp(text) == expected


# --- property: any interleaving of appends, rotations and fetches ---------------------------

CHUNKS = st.sampled_from(
    [b"a", b"bc", b"\n", b"xyz\n", b"\xff\xfeq", b"\x00", b"\n\n", b"long" * 40]
)
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(0, 1), st.lists(CHUNKS, max_size=6)),
        st.tuples(st.just("fetch"), st.integers(1, 4), st.booleans()),
        st.tuples(st.just("rotate"), st.integers(0, 1), st.just(False)),
    ),
    max_size=30,
)


def expected_lines(generations: list[bytes]) -> list[str]:
    out = []
    for content in generations:
        *complete, _partial = content.split(b"\n")
        out += [line.decode("utf-8", "replace").replace("\x00", "") for line in complete]
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS)
def test_any_interleaving_yields_each_complete_line_exactly_once_in_order(
    ops: list[tuple[str, int, Any]],
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        generations: dict[str, list[bytes]] = {"10": [b""], "11_2": [b""]}
        names = ["slurm-10.out", "slurm-11_2.out"]
        read: dict[str, list[str]] = {"10": [], "11_2": []}
        cursor: dict[str, Any] | None = None
        rotations = 0
        # A file renamed away before any poll saw it cannot be followed (nothing knew its
        # inode); in practice a file lives many poll intervals before it is rotated.
        polled = {"10": False, "11_2": False}

        def fetch(max_lines: int) -> LogBatch:
            batch = source(root, max_lines=max_lines).fetch(cursor, datetime.now(UTC))
            for line in batch.lines:
                read[str(line.job_id)].append(line.text)
            return batch

        for op, arg, extra in ops:
            job = ["10", "11_2"][arg] if op != "fetch" else ""
            if op == "append":
                polled[job] = polled[job] and (root / names[arg]).exists()
                data = b"".join(extra)
                append(root / names[arg], data)
                generations[job][-1] += data
            elif op == "rotate" and (root / names[arg]).exists() and polled[job]:
                rotations += 1
                (root / names[arg]).rename(root / f"{names[arg]}.{rotations}")
                generations[job].append(b"")
            elif op == "fetch":
                cursor = persisted(fetch(arg))
                polled = {key: True for key in polled}
        while (batch := fetch(3)).more:
            cursor = persisted(batch)

        for job, contents in generations.items():
            assert read[job] == expected_lines(contents)


def test_a_read_error_mid_file_returns_nothing_from_it_and_keeps_its_offset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "slurm-4.out"
    append(path, b"one\ntwo\n")
    real_pieces = files_module._pieces

    def failing_after_one_line(*args: Any) -> Any:
        pieces = real_pieces(*args)
        yield next(pieces)
        raise OSError(5, "Input/output error")  # a Lustre/NFS hiccup

    monkeypatch.setattr(files_module, "_pieces", failing_after_one_line)
    failed = source(tmp_path).fetch(None, now_for(path))
    monkeypatch.undo()
    recovered = source(tmp_path).fetch(persisted(failed), now_for(path))

    assert texts(failed) == []
    assert any("Input/output error" in note for note in failed.notes)
    assert texts(recovered) == ["one", "two"]
