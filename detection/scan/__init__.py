"""One detection cycle of a cluster: read each telemetry source from its cursor, route the
lines to the attempts they belong to, feed each attempt's detectors, and record what they found.

Every batch is stored in one transaction with the cursor it advances, so a restart neither loses
nor repeats evidence. A lease keeps two workers from scanning one cluster at once.

A large cluster's scan is split into shards (``DetectionSettings.scan_shards``), each a Celery
task with a lease of its own. A shard owns the jobs whose id hashes to it (``core.sharding``):
it reads every log source from a cursor of its own and keeps only its jobs' lines, so each line
reaches each of its attempts through exactly one shard, and each attempt's monitor has one
writer. Shard 0 also does the cluster's share that cannot be split: the metrics cursor and its
faults, telemetry gaps, the scheduler's endings and resolving what settled.

The parts are split by what they do: ``cycle`` (one scan from end to end), ``reading`` (the log
sources and the lines that wait for their job), ``routing`` (lines to attempts), ``diagnosis``
(what an attempt's kept lines say), ``metrics`` (the metrics source and its faults), ``checks``
(running and ended attempts) and ``common`` (limits, shards and the summary). The names the rest
of the loop uses are here.
"""

from .common import WHOLE, ScanSummary, Shard
from .cycle import scan_cluster
from .routing import attempt_at

__all__ = ["WHOLE", "ScanSummary", "Shard", "attempt_at", "scan_cluster"]
