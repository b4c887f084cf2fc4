"""Slurm job output files (``slurm-%j.out``, ``slurm-%A_%a.out``) tailed from a directory.

Each file is followed by identity (device and inode), not by name, so a rotation (the file
renamed away and a new one created under the name) finishes the old file and starts the new one
at 0. A file that shrank below the read offset was truncated (Slurm's default
``--open-mode=truncate`` on requeue) and is read again from the start; one whose first bytes
changed was replaced (an inode number reused) and is read again too. A last line without its
newline waits until it is complete, or until the file has been idle for ``flush_partial_after``
(a killed process never finishes its line), or until it exceeds the line cap.

Cursor (JSON)::

    {"v": 1, "files": {"<dev>:<ino>": {"path": "/abs/slurm-12.out", "job_id": "12",
        "offset": 4096, "head": "<hex digest>", "head_len": 1024, "discard": false,
        "gone_since": null, "seq": 3}}}
"""

from __future__ import annotations

import glob
import hashlib
import os
import re
import stat
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any, BinaryIO, NamedTuple

from detection.core.telemetry import LogLine
from detection.sources.base import (
    DEFAULT_NAME_REGEX,
    MAX_LINE_BYTES,
    LogBatch,
    SourceUnavailable,
    TextCleaner,
    job_id_from_filename,
)

CURSOR_VERSION = 1
READ_CHUNK = 256 * 1024
HEAD_BYTES = 1024  # enough to tell two files apart, little enough to re-read every poll
_LEADING_TIME = re.compile(
    r"^\[?(\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d)(?:[.,](\d{1,9}))?(Z|[+-]\d\d:?\d\d)"
)


@dataclass(frozen=True)
class FilesConfig:
    """Where the job output files are and how much one fetch may read.

    ``pattern`` is a glob under ``directory`` (``**/slurm-*.out`` recurses). ``name_regex`` takes
    the job id from a file's name: a ``job`` group and an optional array ``task`` group; files
    whose names do not match are ignored. With ``names_hosts`` the files are nodes' system logs
    (``gpu-node-007.log``): the ``job`` group names the node, and lines carry it as their host.
    """

    directory: str
    pattern: str = "slurm-*.out"
    name_regex: str = DEFAULT_NAME_REGEX
    max_lines: int = 20_000
    max_bytes: int = 8 * 1024 * 1024
    max_line_bytes: int = MAX_LINE_BYTES
    flush_partial_after: timedelta | None = timedelta(seconds=60)
    forget_after: timedelta = timedelta(hours=1)
    parse_timestamps: bool = True
    names_hosts: bool = False


@dataclass(frozen=True)
class _FileState:
    path: str
    job_id: str | None
    offset: int = 0
    head: str = ""
    head_len: int = 0
    discard: bool = False  # inside an over-long line whose start was already returned
    gone_since: str | None = None
    seq: int = 0  # order of discovery: older generations of a rotated file are finished first

    def restarted(self) -> _FileState:
        return _FileState(self.path, self.job_id, seq=self.seq)

    def dump(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "job_id": self.job_id,
            "offset": self.offset,
            "head": self.head,
            "head_len": self.head_len,
            "discard": self.discard,
            "gone_since": self.gone_since,
            "seq": self.seq,
        }

    @classmethod
    def load(cls, data: Mapping[str, Any]) -> _FileState:
        job_id = data.get("job_id")
        gone = data.get("gone_since")
        return cls(
            path=str(data["path"]),
            job_id=None if job_id is None else str(job_id),
            offset=int(data["offset"]),
            head=str(data.get("head", "")),
            head_len=int(data.get("head_len", 0)),
            discard=bool(data.get("discard", False)),
            gone_since=None if gone is None else str(gone),
            seq=int(data.get("seq", 0)),
        )


class _Piece(NamedTuple):
    """A run of bytes ending at ``end``: a line (``text``), or discarded bytes (``None``)."""

    text: bytes | None
    end: int
    discard_after: bool
    partial: bool = False
    cut: bool = False  # ``text`` is the first ``cap`` bytes of a longer line


@dataclass
class _Run:
    """What one fetch has read so far, and its budget."""

    config: FilesConfig
    now: datetime
    cleaner: TextCleaner
    lines: list[LogLine] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    size: int = 0
    more: bool = False

    @property
    def exhausted(self) -> bool:
        return len(self.lines) >= self.config.max_lines or self.size >= self.config.max_bytes

    def emit(self, raw: bytes, state: _FileState, written: datetime) -> None:
        text = self.cleaner.from_bytes(raw)
        at = leading_timestamp(text) if self.config.parse_timestamps else None
        if self.config.names_hosts:
            self.lines.append(LogLine(at=at or written, text=text, host=state.job_id))
        else:
            self.lines.append(LogLine(at=at or written, text=text, job_id=state.job_id))


class JobOutputFiles:
    """Tails every job output file under a directory; ``fetch`` returns new complete lines."""

    def __init__(self, config: FilesConfig) -> None:
        self.config = config
        self.name = f"files at {os.path.join(config.directory, config.pattern)}"

    def fetch(self, cursor: dict[str, Any] | None, now: datetime) -> LogBatch:
        known = _load_cursor(cursor)
        found = self._scan()
        run = _Run(self.config, now, TextCleaner(self.config.max_line_bytes))
        states: dict[str, _FileState] = {}
        for key, state in sorted(known.items(), key=lambda kv: kv[1].seq):
            if key not in found and (kept := self._follow_lost(key, state, run)) is not None:
                states[key] = kept
        for key, state in self._current(known, found):
            states[key] = self._read(key, state, found[key][1], run)
        files = {key: state.dump() for key, state in states.items()}
        return LogBatch(
            tuple(run.lines),
            {"v": CURSOR_VERSION, "files": files},
            more=run.more,
            truncated=run.cleaner.truncated,
            notes=tuple(run.notes),
        )

    def _current(
        self, known: dict[str, _FileState], found: dict[str, tuple[str, os.stat_result]]
    ) -> list[tuple[str, _FileState]]:
        """The files under their names now, in discovery order; new ones numbered by path."""
        seq = max((state.seq for state in known.values()), default=0)
        out = []
        for key, (path, _) in sorted(found.items(), key=lambda kv: kv[1][0]):
            state = known.get(key)
            if state is None:
                seq += 1
                state = _FileState(path, None, seq=seq)
            out.append((key, replace(state, path=path, job_id=self._job_of(path), gone_since=None)))
        return sorted(out, key=lambda pair: pair[1].seq)

    def _job_of(self, path: str) -> str | None:
        return job_id_from_filename(path, self.config.name_regex)

    def output_tail(self, job_id: str, lines: int, until: datetime, window: timedelta) -> list[str]:
        """The last lines of the job's newest output file (``until`` and ``window`` are for
        remote sources: a file's end is its latest output). Raises ``SourceUnavailable``."""
        direct = os.path.join(self.config.directory, job_output_name(job_id))
        # Slurm's default name is looked up at once: no listing of a large directory.
        if self.config.pattern == FilesConfig.pattern and os.path.isfile(direct):
            return tail_file(direct, lines)
        found = [(st.st_mtime, p) for p, st in self._scan().values() if self._job_of(p) == job_id]
        return tail_file(max(found)[1], lines) if found else []

    def _scan(self) -> dict[str, tuple[str, os.stat_result]]:
        """The job output files now present, by identity. Raises if the directory is gone, so
        an unmounted file system never makes every file look deleted."""
        if not os.path.isdir(self.config.directory) or not os.access(
            self.config.directory, os.R_OK | os.X_OK
        ):
            raise SourceUnavailable(self.name, "the directory is missing or not readable")
        pattern = os.path.join(glob.escape(self.config.directory), self.config.pattern)
        found: dict[str, tuple[str, os.stat_result]] = {}
        for path in sorted(glob.glob(pattern, recursive=True)):
            st = _stat(path)
            if st is not None and stat.S_ISREG(st.st_mode) and self._job_of(path):
                found.setdefault(_key(st), (os.path.abspath(path), st))
        return found

    def _follow_lost(self, key: str, state: _FileState, run: _Run) -> _FileState | None:
        """A known file no longer under its name: finish it where it went, or remember it
        for a while in case it comes back (a file system hiccup); None forgets it."""
        located = _find_by_identity(key, state.path)
        if located is None:
            return self._gone(state, run)
        path, st = located
        state = self._read(key, replace(state, path=path, gone_since=None), st, run)
        idle = run.now - _mtime(st) > self.config.forget_after
        done = state.offset >= st.st_size and not state.discard
        return None if idle and done else state

    def _gone(self, state: _FileState, run: _Run) -> _FileState | None:
        if state.gone_since is None:
            run.notes.append(f"{state.path} disappeared")
            return replace(state, gone_since=run.now.isoformat())
        if run.now - datetime.fromisoformat(state.gone_since) > self.config.forget_after:
            return None
        return state

    def _read(self, key: str, state: _FileState, st: os.stat_result, run: _Run) -> _FileState:
        if run.exhausted:
            run.more = True  # files left unread this time
            return state
        mark = (len(run.lines), run.size, run.cleaner.truncated)
        try:
            with open(state.path, "rb") as handle:
                opened = os.fstat(handle.fileno())
                if _key(opened) != key:
                    return state  # replaced between scan and open; the next fetch sorts it out
                state = self._checked(handle, state, opened, run)
                return self._tail(handle, state, opened, run)
        except OSError as exc:
            # Keep the old offset and drop what this file gave, so nothing is returned twice.
            del run.lines[mark[0] :]
            run.size, run.cleaner.truncated = mark[1], mark[2]
            run.notes.append(f"{state.path}: cannot read ({exc.strerror or exc})")
            return state

    def _checked(
        self, handle: BinaryIO, state: _FileState, st: os.stat_result, run: _Run
    ) -> _FileState:
        """The state to read from: restarted at 0 when the file was truncated or replaced."""
        if st.st_size < state.offset:
            run.notes.append(
                f"{state.path} was truncated ({st.st_size} < {state.offset} bytes); "
                "reading it again from the start"
            )
            return state.restarted()
        if state.head_len and _digest(_read_at(handle, 0, state.head_len)) != state.head:
            run.notes.append(f"{state.path} was replaced; reading it again from the start")
            return state.restarted()
        return state

    def _tail(
        self, handle: BinaryIO, state: _FileState, st: os.stat_result, run: _Run
    ) -> _FileState:
        written = min(_mtime(st), run.now)
        flush = self.config.flush_partial_after
        idle = flush is not None and run.now - _mtime(st) >= flush
        handle.seek(state.offset)
        for piece in _pieces(handle, state.offset, state.discard, self.config.max_line_bytes):
            if piece.partial and not idle:
                break  # wait for the rest of the line
            if run.exhausted:
                run.more = True
                break
            if piece.text is not None:
                run.emit(piece.text, state, written)
                run.cleaner.truncated += piece.cut
            run.size += piece.end - state.offset  # discarded bytes count too: bounded I/O
            state = replace(state, offset=piece.end, discard=piece.discard_after)
        return self._with_head(handle, state)

    @staticmethod
    def _with_head(handle: BinaryIO, state: _FileState) -> _FileState:
        if state.head_len >= HEAD_BYTES or state.offset == state.head_len:
            return state
        head = _read_at(handle, 0, min(state.offset, HEAD_BYTES))
        return replace(state, head=_digest(head), head_len=len(head))


def _pieces(handle: BinaryIO, offset: int, discard: bool, cap: int) -> Iterator[_Piece]:
    """Split what follows ``offset`` into lines, cutting any line at ``cap`` bytes and dropping
    the rest of it, without ever holding more than ``cap`` plus one chunk in memory. The last
    piece is ``partial`` when the file does not end with a newline."""
    buf, start_of_buf = b"", offset
    while chunk := handle.read(READ_CHUNK):
        buf += chunk
        begin = 0
        while (newline := buf.find(b"\n", begin)) >= 0:
            yield _Piece(None if discard else buf[begin:newline], start_of_buf + newline + 1, False)
            discard, begin = False, newline + 1
        buf, start_of_buf = buf[begin:], start_of_buf + begin
        if discard or len(buf) > cap:
            yield _Piece(None if discard else buf[:cap], start_of_buf + len(buf), True, cut=True)
            buf, start_of_buf, discard = b"", start_of_buf + len(buf), True
    if buf:
        yield _Piece(buf, start_of_buf + len(buf), False, partial=True)


def leading_timestamp(text: str) -> datetime | None:
    """The time a line starts with, when it is ISO 8601 with a zone (``2026-11-29T12:00:00Z``);
    times without a zone are ambiguous and ignored."""
    match = _LEADING_TIME.match(text)
    if match is None:
        return None
    base, fraction, zone = match.groups()
    zone = "+00:00" if zone == "Z" else zone
    try:
        return datetime.fromisoformat(f"{base}.{(fraction or '0')[:6].ljust(6, '0')}{zone}")
    except ValueError:
        return None


def _load_cursor(cursor: Mapping[str, Any] | None) -> dict[str, _FileState]:
    if cursor is None:
        return {}
    try:
        if cursor["v"] != CURSOR_VERSION:
            raise ValueError(f"version {cursor['v']!r}")
        return {str(k): _FileState.load(v) for k, v in dict(cursor["files"]).items()}
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"malformed files cursor: {exc}") from exc


def _find_by_identity(key: str, old_path: str) -> tuple[str, os.stat_result] | None:
    """Where the file with this device and inode is now: at its last path, or renamed within
    the same directory (how log rotation moves files)."""
    st = _stat(old_path)
    if st is not None and _key(st) == key:
        return old_path, st
    inode = int(key.split(":")[1])
    try:
        with os.scandir(os.path.dirname(old_path) or ".") as entries:
            for entry in entries:
                if entry.inode() == inode and (st := _stat(entry.path)) and _key(st) == key:
                    return os.path.abspath(entry.path), st
    except OSError:
        return None
    return None


def _stat(path: str) -> os.stat_result | None:
    try:
        return os.stat(path)
    except OSError:
        return None


def _key(st: os.stat_result) -> str:
    return f"{st.st_dev}:{st.st_ino}"


def _mtime(st: os.stat_result) -> datetime:
    return datetime.fromtimestamp(st.st_mtime, UTC)


def _read_at(handle: BinaryIO, offset: int, size: int) -> bytes:
    handle.seek(offset)
    return handle.read(size)


def _digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


TAIL_BYTES = 16 * 1024


def job_output_name(job_id: str) -> str:
    """Slurm's default output name: ``slurm-%j.out``, and ``slurm-%A_%a.out`` for array tasks."""
    return f"slurm-{job_id}.out"


def tail_file(path: str | os.PathLike[str], lines: int = 40) -> list[str]:
    """The last lines of a file, read from its end so a huge file costs nothing."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, 2)
            size = handle.tell()
            handle.seek(max(0, size - TAIL_BYTES))
            data = handle.read()
    except OSError:
        return []
    text = data.decode("utf-8", errors="replace").splitlines()
    # Past TAIL_BYTES the first line read is likely cut: drop it.
    return text[-lines:] if size <= TAIL_BYTES else text[1:][-lines:]
