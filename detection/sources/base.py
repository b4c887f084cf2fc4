"""What every telemetry source shares: the batch it returns, its one error, its health, and how
raw text becomes a safe ``LogLine`` text.

Plain Python: no Django. Sources do network and file I/O; the caller persists cursors.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from functools import lru_cache
from typing import Any, Protocol

from detection.core.telemetry import LogLine

# One line never costs more than this, whatever a job prints (a 10 MB progress bar, a binary dump).
MAX_LINE_BYTES = 64 * 1024

# Slurm's default output names: slurm-%j.out, and slurm-%A_%a.out for array tasks.
DEFAULT_NAME_REGEX = r"^slurm-(?P<job>\d+)(?:_(?P<task>\d+))?\.out$"
# Job ids as Slurm prints them ("1234", "1234_7", "1234+0"): safe to put inside a quoted label.
_JOB_ID = re.compile(r"[A-Za-z0-9_.+-]{1,64}")


class SourceUnavailable(Exception):
    """A source could not be read this time: down, too slow, an HTTP error or a garbled answer.

    ``source`` names the source and where it lives (``"loki at http://127.0.0.1:3100"``);
    ``reason`` says what went wrong in words an operator can act on. The fetch that raised it
    returned nothing, so the caller's cursor is still valid: retry with it.
    """

    def __init__(self, source: str, reason: str) -> None:
        super().__init__(source, reason)  # both in args, so the error survives serialisation
        self.source = source
        self.reason = reason

    def __str__(self) -> str:
        return f"{self.source}: {self.reason}"


@dataclass(frozen=True)
class LogBatch:
    """The lines one ``fetch`` read, and the cursor to persist once they are stored.

    ``more`` is true when the fetch stopped at its bounds (lines, bytes or pages) with lines still
    waiting: call again at once. ``truncated`` counts lines cut at the line cap. ``notes`` are
    events worth an operator's attention (a truncated file, a server warning, a skipped range).
    """

    lines: tuple[LogLine, ...]
    cursor: dict[str, Any]
    more: bool = False
    truncated: int = 0
    notes: tuple[str, ...] = ()


class LogSource(Protocol):
    """Anything the detection loop can poll for log lines."""

    def fetch(self, cursor: dict[str, Any] | None, now: datetime) -> LogBatch: ...


@dataclass
class SourceHealth:
    """How one source has been doing, kept by the caller across polls (one per source).

    ``ok`` is None until the first attempt. Feed it every outcome with ``record_success`` and
    ``record_failure``; the console shows ``last_error`` while ``ok`` is false.
    """

    source: str
    ok: bool | None = None
    last_error: str = ""
    last_error_at: datetime | None = None
    last_success: datetime | None = None
    consecutive_failures: int = 0

    def record_success(self, now: datetime) -> None:
        self.ok = True
        self.last_success = now
        self.consecutive_failures = 0

    def record_failure(self, error: BaseException | str, now: datetime) -> None:
        self.ok = False
        self.last_error = str(error)
        self.last_error_at = now
        self.consecutive_failures += 1

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "ok": self.ok,
            "last_error": self.last_error,
            "last_error_at": _iso(self.last_error_at),
            "last_success": _iso(self.last_success),
            "consecutive_failures": self.consecutive_failures,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SourceHealth:
        return cls(
            source=str(data["source"]),
            ok=data.get("ok"),
            last_error=str(data.get("last_error", "")),
            last_error_at=_from_iso(data.get("last_error_at")),
            last_success=_from_iso(data.get("last_success")),
            consecutive_failures=int(data.get("consecutive_failures", 0)),
        )


@dataclass
class TextCleaner:
    """Turns raw bytes or text into a safe line: UTF-8 with replacement, no NULs, capped.

    ``truncated`` counts the lines it had to cut, so a batch can report them.
    """

    max_bytes: int = MAX_LINE_BYTES
    truncated: int = field(default=0)

    def from_bytes(self, raw: bytes) -> str:
        if len(raw) > self.max_bytes:
            self.truncated += 1
            # Cut before decoding so a huge line costs no more than the cap; a split
            # multi-byte character at the cut is dropped rather than shown as garbage.
            return _strip(raw[: self.max_bytes].decode("utf-8", errors="ignore"))
        return _strip(raw.decode("utf-8", errors="replace"))

    def cut(self, text: str) -> tuple[str, bool]:
        """``from_text`` and whether it had to cut the line."""
        before = self.truncated
        return self.from_text(text), self.truncated > before

    def from_text(self, text: str) -> str:
        if text.isascii() and len(text) <= self.max_bytes:
            return _strip(text)  # the common case costs no encoding
        # Lone surrogates (a garbled JSON escape) become "?" instead of failing later.
        return self.from_bytes(text.encode("utf-8", errors="replace"))


def check_job_id(job_id: str) -> str:
    """``job_id`` itself, or ``ValueError`` when it could break out of a quoted query label."""
    if not _JOB_ID.fullmatch(job_id):
        raise ValueError(f"not a Slurm job id: {job_id!r}")
    return job_id


def job_id_from_filename(path: str, regex: str | None = None) -> str | None:
    """The Slurm job id a file name carries: ``"1234"``, or ``"1234_7"`` for an array task.

    ``regex`` must have a group ``job`` and may have ``task``; it is matched against the base
    name. None when the name does not match.
    """
    match = _compiled(regex or DEFAULT_NAME_REGEX).search(path.rsplit("/", 1)[-1])
    if match is None:
        return None
    groups = match.groupdict()
    job, task = groups.get("job"), groups.get("task")
    if not job:
        return None
    return f"{job}_{task}" if task else job


@lru_cache(maxsize=32)
def _compiled(regex: str) -> re.Pattern[str]:
    pattern = re.compile(regex)
    if "job" not in pattern.groupindex:
        raise ValueError(f"file name regex needs a (?P<job>...) group: {regex!r}")
    return pattern


def _strip(text: str) -> str:
    text = text.replace("\x00", "")
    return text[:-1] if text.endswith("\r") else text


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def _from_iso(value: object) -> datetime | None:
    return None if value is None else datetime.fromisoformat(str(value))
