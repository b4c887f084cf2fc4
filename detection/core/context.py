"""What the caller knows about the attempt a log excerpt belongs to, and the hosts a group of
matched lines names with that knowledge."""

from __future__ import annotations

from dataclasses import dataclass

from detection.core.constants import DEFAULT_GPUS_PER_NODE
from detection.core.interruption import HostOrigin
from detection.core.signatures import MatchGroup


@dataclass(frozen=True)
class DiagnosisContext:
    """What the caller knows about the attempt the log belongs to.

    ``nodes`` is the attempt's node list in rank order: rank ``r`` ran on
    ``nodes[r // tasks_per_node]`` unless the log says otherwise. ``source_host`` is set when the
    whole excerpt is one node's own system log (kernel messages such as NVRM Xid lines).
    """

    nodes: tuple[str, ...] = ()
    tasks_per_node: int = DEFAULT_GPUS_PER_NODE
    world_size: int | None = None
    source_host: str | None = None

    def host_of_rank(self, rank: int) -> str | None:
        if self.tasks_per_node <= 0 or rank < 0:
            return None
        index = rank // self.tasks_per_node
        return self.nodes[index] if index < len(self.nodes) else None

    def canonical_host(self, host: str) -> str:
        """``gpu187.cluster.local`` is ``gpu187`` when the node list says so."""
        if host in self.nodes:
            return host
        short = host.split(".", 1)[0]
        return short if short in self.nodes else host

    @property
    def expected_world_size(self) -> int | None:
        if self.world_size:
            return self.world_size
        return len(self.nodes) * self.tasks_per_node if self.nodes else None


def hosts_of(group: MatchGroup, ctx: DiagnosisContext) -> dict[str, str]:
    """The hosts a match group names, each with how it was named (a ``HostOrigin``): in its
    lines, by where they were read from, through the rank -> node layout, or as the node whose
    own log the whole excerpt is."""
    if group.hosts:
        streams = set(group.stream_hosts)
        return {
            ctx.canonical_host(host): HostOrigin.STREAM if host in streams else HostOrigin.TEXT
            for host in group.hosts
        }
    mapped = {ctx.host_of_rank(rank) for rank in group.ranks}
    hosts = {host: HostOrigin.RANK for host in mapped if host is not None}
    if hosts:
        return hosts
    return {ctx.source_host: HostOrigin.EXCERPT} if ctx.source_host else {}
