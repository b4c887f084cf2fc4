"""The shape of the evidence behind a decision, in the words an operator checks it by: when
the job failed (phase), where (locality) and on what (resource). Each answers part of the one
question every rule asks, "would a blind restart fail the same way?"."""

from __future__ import annotations

from .incident import Incident

PHASE_WORDS = {
    "startup": "before the first training step (start-up: launch, rendezvous, communicators, "
    "loading the model or a checkpoint)",
    "training": "after training had made progress",
    "": "not shown (no progress and no start-up step in the evidence)",
}
RESOURCE_WORDS = {
    "filesystem_io": "shared storage (every node reads and writes it alike)",
    "interconnect_network": "the network fabric or how the job is told to use it",
    "nccl_timeout_hang": "the collectives between ranks (network, or a rank that stopped)",
    "gpu_hardware": "a node-local GPU or its links",
    "node_or_process_failure": "a node or the processes running on it",
    "cuda_oom": "the job's own settings (GPU memory it asks for)",
    "application_error": "the job's own code, data or configuration",
    "numerical_divergence": "the job's own training dynamics",
    "straggler": "the speed of one node or rank against the others",
    "benign": "none",
}


def locality(incident: Incident) -> str:
    if len(incident.hosts) == 1:
        return f"one host ({incident.hosts[0]})"
    if incident.hosts:
        return f"{len(incident.hosts)} hosts ({', '.join(incident.hosts)})"
    if incident.node_local:
        return "one node, which the evidence does not name"
    return "no host or rank singled out (every rank alike, or the evidence does not say)"


def shape_sentence(incident: Incident) -> str:
    phase = PHASE_WORDS.get(incident.phase, PHASE_WORDS[""])
    resource = RESOURCE_WORDS.get(incident.category, incident.category)
    return f"Evidence: phase {phase}; locality {locality(incident)}; resource {resource}."
