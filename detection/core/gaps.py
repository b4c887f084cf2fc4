"""Telemetry gaps: when a source, not the jobs, has gone quiet.

No signal is not no progress. A source that cannot be read, or that delivers nothing (or only
old lines) while several running jobs it feeds are overdue at once, is in a gap: hang and
slowdown verdicts for those jobs wait, and the gap itself is what gets reported. Silence that
follows a gap counts only from the gap's end, so a job that really hung is still found.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

# Two jobs falling silent in the same cycle with not one line from anyone else is the
# telemetry, not two hangs. One overdue job alone is left to the hang detector.
OVERDUE_JOBS_FOR_A_GAP = 2


@dataclass(frozen=True)
class SourceReading:
    """What one cycle learnt of a source: did it answer, and how new is its newest line."""

    name: str
    reachable: bool
    error: str = ""
    newest_line_at: datetime | None = None
    lines_this_cycle: int = 0


def gap_reason(reading: SourceReading, now: datetime, overdue_silences: list[float]) -> str | None:
    """Why this source is in a gap now, or None when it is not.

    ``overdue_silences``: for each running job the source feeds whose silence is past its
    allowed silence, how long that silence allowed is (seconds). Only when the source has been
    quiet longer than at least two of those allowances is the silence the source's.
    """
    if not reading.reachable:
        return f"unreachable: {reading.error}"[:500]
    if reading.newest_line_at is None:
        quiet = None
    else:
        quiet = (now - reading.newest_line_at).total_seconds()
    covered = [allowed for allowed in overdue_silences if quiet is None or quiet > allowed]
    if len(covered) < OVERDUE_JOBS_FOR_A_GAP:
        return None
    jobs = len(covered)
    if quiet is None:
        return f"silent: no line yet while {jobs} running jobs it feeds are overdue"
    if reading.lines_this_cycle:
        return (
            f"late: its newest line is {quiet:.0f} s old while {jobs} running jobs it feeds "
            "are overdue"
        )
    return f"silent: no line for {quiet:.0f} s while {jobs} running jobs it feeds are overdue"
