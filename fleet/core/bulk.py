"""Work on bulk data (a snapshot of 35,000 jobs and nodes, a scrape of millions of GPU samples)
with Python's cyclic garbage collector paused.

Such work builds millions of short-lived objects. Each allocation burst triggers the cyclic
collector, which walks every live object in the process again, and with a large heap that was a
third of a large scan's time. Reference counting still frees the objects as they go; the
collector resumes afterwards and collects whatever cycles the work left.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def cyclic_gc_paused() -> Iterator[None]:
    """Pause the cyclic collector for the block (left alone if someone else paused it)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
