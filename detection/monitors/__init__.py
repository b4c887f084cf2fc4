"""Per-attempt detector state between scans: the progress tracker, the throughput history and
the log lines that matched a signature, kept as JSON on ``AttemptMonitor``. The decisions are
the pure detectors'; this module only loads, feeds and stores them.

The parts are split by what they do: ``rows`` (loading and bulk-saving the monitors),
``observing`` (feeding new lines), ``checks`` (running the detectors on a running attempt),
``resume`` (whether a restart resumed from the last checkpoint) and ``state`` (the detectors'
state to and from JSON). The names the rest of the loop uses are here."""

from .checks import Verdicts, check, earlier_startups
from .observing import Observed, observe
from .resume import last_checkpoint_before
from .rows import load, load_many, save_many

__all__ = [
    "Observed",
    "Verdicts",
    "check",
    "earlier_startups",
    "last_checkpoint_before",
    "load",
    "load_many",
    "observe",
    "save_many",
]
