"""The reason our drains give Slurm, and how a node's Slurm reason tells our drain from a
person's. Pure Python.

Slurm keeps whatever reason text it is given, but ``sinfo -R`` shows 20 characters by default
and operators read it in narrow terminals, so ours is one short line of plain ASCII that starts
with a fixed marker and the advice's id. The faults' summary quotes job logs (hostile text): it
is flattened to printable ASCII, without double quotes (scontrol drops them at the ends).
"""

from __future__ import annotations

DRAIN_MARKER = "recovery-console"
MAX_DRAIN_REASON = 200
# Slurm's own reason for a node it lost: not a person's decision, so ours may replace it.
SLURM_LOST_NODE = "Not responding"


def drain_reason(advice_id: int, category: str, summary: str) -> str:
    """``recovery-console advice 42: gpu_hardware: Xid 79 on node2 ...``, cut to fit."""
    text = f"{DRAIN_MARKER} advice {advice_id}: {category}: {summary}"
    printable = "".join(ch if " " <= ch <= "~" and ch != '"' else " " for ch in text)
    return " ".join(printable.split())[:MAX_DRAIN_REASON].rstrip()


def drained_by_someone_else(reason: str) -> bool:
    """A node whose Slurm reason is neither empty, ours, nor Slurm's own for a lost node was
    taken out by a person (or their tooling): we never replace that reason nor resume it."""
    text = reason.strip()
    return bool(text) and not text.startswith(DRAIN_MARKER) and text != SLURM_LOST_NODE
