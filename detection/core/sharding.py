"""Which scan shard owns a job: a stable hash of its job id, the same in every worker process
and every release (Python's own ``hash`` of a string changes per process), so a job's lines,
monitors and pending lines are always handled by one shard."""

from __future__ import annotations

import zlib

MIN_SCAN_SHARDS = 1
MAX_SCAN_SHARDS = 64


def shard_of(job_id: str, shards: int) -> int:
    """The shard (0 .. shards-1) that owns ``job_id``; with one shard, always 0."""
    if shards <= 1:
        return 0
    return zlib.crc32(job_id.encode("utf-8", "surrogatepass")) % shards


def scan_shards_problems(shards: object) -> list[str]:
    """Why ``shards`` is not a usable shard count (empty: it is)."""
    if isinstance(shards, bool) or not isinstance(shards, int):
        return ["must be a whole number"]
    if not MIN_SCAN_SHARDS <= shards <= MAX_SCAN_SHARDS:
        return [f"must be between {MIN_SCAN_SHARDS} and {MAX_SCAN_SHARDS}"]
    return []
