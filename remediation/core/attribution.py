"""Attribution: from an interruption and what the loop knows of its attempt, the incident the
policy decides on, and an explanation a person can check.

Pure Python. Detection has read the evidence: what failed, whether it puts the fault on a node,
and which hosts the excerpt itself names (in a line, by the log a line came from, through the
rank layout). Attribution adds what only the loop knows: the attempt's node list (a host outside
it is not this attempt's), the PCI bus id -> host map of the GPUs that reported an Xid in their
metrics, and the nodes the scheduler marked unhealthy. It says which of these named each node.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from detection.core.interruption import HostOrigin, Interruption
from detection.core.shape import Phase
from fleet.core.taxonomy import Attribution, Category, ConfidenceLabel

from .incident import Incident

CONFIDENCE_WORDS = {
    "established": "the log establishes it",
    "supported": "the evidence supports it",
    "hypothesis": "it is only a hypothesis",
}


@dataclass(frozen=True)
class AttemptView:
    """What the loop knows of the interrupted attempt (all optional: ``diagnose`` knows none).

    ``xid_hosts`` maps a GPU's PCI bus id (as the driver prints it, lower case, without domain
    padding differences) to the hosts whose GPU at that address reported an Xid in its metrics.
    """

    nodes: tuple[str, ...] = ()
    unhealthy_nodes: tuple[str, ...] = ()
    partition: str = ""
    step: int | None = None
    xid_hosts: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # What the loop saw of the attempt's progress: "training" (a step was reported),
    # "startup" (none yet, and it has run no longer than a start-up takes), or "" (unknown).
    phase: str = ""


@dataclass(frozen=True)
class Attributed:
    incident: Incident
    explanation: str
    host_origins: tuple[tuple[str, str], ...] = ()
    outside_hosts: tuple[str, ...] = ()


def attribute(interruption: Interruption, attempt: AttemptView | None = None) -> Attributed:
    """The incident to decide on: hosts named by the evidence, by the GPU metrics or by the
    scheduler, limited to the attempt's nodes once the scheduler has reported them."""
    view = attempt or AttemptView()
    origins = dict(interruption.host_origins) or {h: HostOrigin.TEXT for h in interruption.hosts}
    attribution, label = interruption.attribution, interruption.confidence.label
    node_local = interruption.node_local
    if node_local and not origins:
        origins = _from_metrics(interruption, view)
    down = sorted(set(view.nodes) & set(view.unhealthy_nodes))
    if not origins and interruption.category is Category.NODE_OR_PROCESS_FAILURE and len(down) == 1:
        origins = {down[0]: HostOrigin.SCHEDULER}
        attribution, node_local = Attribution.HARDWARE, True
        if label is ConfidenceLabel.HYPOTHESIS:
            label = ConfidenceLabel.SUPPORTED
    # Before the scheduler has reported where the attempt ran (it can fail within a second of
    # starting), the evidence's own hosts stand; once it has, only the attempt's nodes count.
    nodes = set(view.nodes) or set(origins)
    kept = {h: o for h, o in origins.items() if h in nodes}
    outside = tuple(sorted(h for h in origins if h not in nodes))
    phase = _phase(interruption, view)
    attribution = _configuration_at_startup(interruption, phase, node_local) or attribution
    incident = Incident(
        kind=interruption.kind.value,
        category=interruption.category.value,
        attribution=attribution.value,
        confidence_label=label.value,
        hosts=tuple(sorted(kept)),
        root_cause=interruption.root_cause,
        partition=view.partition,
        step=view.step,
        signature=interruption.signature,
        node_local=node_local,
        detail=interruption.detail,
        phase=phase,
    )
    explanation = _explain(interruption, incident, kept, outside, down)
    return Attributed(incident, explanation, tuple(sorted(kept.items())), outside)


def _phase(interruption: Interruption, view: AttemptView) -> str:
    # What the loop saw the attempt do outranks what the excerpt's lines suggest.
    if view.step:
        return Phase.TRAINING.value
    return view.phase or interruption.phase


def _configuration_at_startup(
    interruption: Interruption, phase: str, node_local: bool
) -> Attribution | None:
    """Before the first step, a network that no rank gets through is how the job or the site is
    set up (system software); a process killed while loading, and ranks that time out waiting
    on one still preparing, are the job's own doing."""
    if phase != Phase.STARTUP or node_local:
        return None
    if interruption.category is Category.INTERCONNECT_NETWORK:
        return Attribution.SYSTEM_SOFTWARE
    # Ranks that never meet in their first collectives wait on one still doing the job's own
    # preparation (its data, its model).
    if interruption.category is Category.NCCL_TIMEOUT_HANG:
        return Attribution.APPLICATION
    # Killed processes with no cause of their own shown (only the launcher tearing the
    # others down) are the same kill seen from outside.
    if interruption.category is Category.NODE_OR_PROCESS_FAILURE and (
        interruption.attribution in (Attribution.SYSTEM_SOFTWARE, Attribution.NONE)
    ):
        return Attribution.APPLICATION
    return None


def _from_metrics(interruption: Interruption, view: AttemptView) -> dict[str, str]:
    """The one node of the attempt whose GPU at the evidence's PCI address reported an Xid."""
    candidates: set[str] = set()
    for pci in interruption.pci_ids:
        candidates.update(view.xid_hosts.get(pci_key(pci), ()))
    if view.nodes:
        candidates &= set(view.nodes)
    return {candidates.pop(): HostOrigin.METRICS} if len(candidates) == 1 else {}


def pci_key(pci: str) -> str:
    """One spelling of a PCI address for ``PCI:0000:3b:00``, ``00000000:3B:00.0``, ``3b:00``:
    the bus and device, lower case (the domain and function rarely differ between GPUs)."""
    parts = pci.lower().removeprefix("pci:").split(":")
    if len(parts) >= 2:
        return f"{parts[-2][-2:]}:{parts[-1].split('.')[0]}"
    return pci.lower()


def _explain(
    interruption: Interruption,
    incident: Incident,
    kept: dict[str, str],
    outside: tuple[str, ...],
    down: list[str],
) -> str:
    parts = [interruption.explanation.rstrip()]
    learned = {h: o for h, o in kept.items() if o in (HostOrigin.METRICS, HostOrigin.SCHEDULER)}
    if learned:
        named = "; ".join(f"{host} ({origin})" for host, origin in sorted(learned.items()))
        parts.append(f"The node at fault: {named}.")
    elif kept and not interruption.host_origins:
        # Detection did not say how it named them (a detector's own finding): say who.
        parts.append(f"Implicated: {', '.join(sorted(kept))}.")
    elif not kept and down and interruption.category is Category.NODE_OR_PROCESS_FAILURE:
        parts.append(
            f"The scheduler reports {', '.join(down)} unhealthy, "
            "but nothing ties one node to this failure."
        )
    if outside:
        parts.append(f"Also named but not part of this attempt: {', '.join(outside)}.")
    words = CONFIDENCE_WORDS.get(incident.confidence_label, "")
    parts.append(f"Confidence: {incident.confidence_label} ({words}).")
    return " ".join(part for part in parts if part)
