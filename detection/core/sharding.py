"""Which scan shard owns a job, and a node's GPU state: a stable hash of the job id (or host),
the same in every worker process and every release (Python's own ``hash`` of a string changes
per process), so a job's lines, monitors and pending lines are always handled by one shard."""

from __future__ import annotations

import zlib

MIN_SCAN_SHARDS = 1
MAX_SCAN_SHARDS = 64


def stable_hash(text: str) -> int:
    """A hash of ``text`` that every process and release agrees on (0 .. 2**32 - 1)."""
    return zlib.crc32(text.encode("utf-8", "surrogatepass"))


def shard_of(key: str, shards: int) -> int:
    """The shard (0 .. shards-1) that owns ``key`` (a job id, or a host for its GPU state);
    with one shard, always 0."""
    if shards <= 1:
        return 0
    return stable_hash(key) % shards


def scan_shards_problems(shards: object) -> list[str]:
    """Why ``shards`` is not a usable shard count (empty: it is)."""
    if isinstance(shards, bool) or not isinstance(shards, int):
        return ["must be a whole number"]
    if not MIN_SCAN_SHARDS <= shards <= MAX_SCAN_SHARDS:
        return [f"must be between {MIN_SCAN_SHARDS} and {MAX_SCAN_SHARDS}"]
    return []
