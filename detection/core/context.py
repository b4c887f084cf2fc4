"""What the caller knows about the attempt a log excerpt belongs to, and the hosts a group of
matched lines names with that knowledge."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from detection.core.constants import DEFAULT_GPUS_PER_NODE
from detection.core.interruption import HostOrigin
from detection.core.signatures import MatchGroup


@dataclass(frozen=True)
class DiagnosisContext:
    """What the caller knows about the attempt the log belongs to.

    ``nodes`` is the attempt's node list in rank order: rank ``r`` ran on
    ``nodes[r // tasks_per_node]`` unless the log says otherwise. ``source_host`` is set when the
    whole excerpt is one node's own system log (kernel messages such as NVRM Xid lines).
    ``placements`` is where the excerpt itself puts ranks (NCCL init lines, ``Rank=N Node=X``),
    which wins over the layout.
    """

    nodes: tuple[str, ...] = ()
    tasks_per_node: int = DEFAULT_GPUS_PER_NODE
    world_size: int | None = None
    source_host: str | None = None
    placements: Mapping[int, str] = field(default_factory=dict)

    def host_of_rank(self, rank: int) -> str | None:
        placed = self.placements.get(rank)
        if placed is not None:
            return self.canonical_host(placed)
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

    def with_excerpt_layout(self, placements: Iterable[tuple[int | None, str]]) -> DiagnosisContext:
        """This context with what the excerpt says of where ranks ran; the job's hosts (PBS's
        exec host list) become the node list when the caller gave none."""
        placed: dict[int, str] = {}
        hosts: list[str] = []
        for rank, host in placements:
            if rank is None:
                hosts.append(host)
            else:
                placed.setdefault(rank, host)
        if not placed and not hosts:
            return self
        nodes = self.nodes or tuple(dict.fromkeys(hosts))
        return replace(self, nodes=nodes, placements={**placed, **self.placements})


def hosts_of(group: MatchGroup, ctx: DiagnosisContext) -> dict[str, str]:
    """The hosts a match group names, each with how it was named (a ``HostOrigin``): in its
    lines, by where they were read from, through the rank -> node layout, as the node whose
    own log the whole excerpt is, or as the only node the job ran on."""
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
    if ctx.source_host:
        return {ctx.source_host: HostOrigin.EXCERPT}
    if len(ctx.nodes) == 1:
        return {ctx.nodes[0]: HostOrigin.ONLY_NODE}
    return {}
