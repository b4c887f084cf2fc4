"""The names findings go by, for the policy's rule table: every built-in signature, and the
names the detectors give the findings no single log line makes (a loss that diverged, a hang,
a scheduler's end state, a metric fault)."""

from __future__ import annotations

from detection.core.detectors.divergence import LOSS_DIVERGENCE
from detection.core.signatures import BUILTIN_SIGNATURES
from detection.core.trends import LAGGING_GPU, LAGGING_MEMBER

DETECTOR_FINDINGS = frozenset(
    {
        LOSS_DIVERGENCE,
        LAGGING_MEMBER,
        LAGGING_GPU,
        "progress",
        "gpus_idle",
        "throughput_drop",
        "gpu_throttled",
        "dcgm_xid",
        "dcgm_ecc_dbe",
        "dcgm_gpu_vanished",
        "dcgm_node_vanished",
        "slurm_failed",
        "slurm_node_fail",
        "slurm_timeout",
        "slurm_out_of_memory",
        "slurm_preempted",
    }
)
BUILTIN_FINDINGS = frozenset(
    name
    for signature in BUILTIN_SIGNATURES
    if not signature.internal and not signature.layout
    for name in signature.finding_names
)
KNOWN_FINDINGS = BUILTIN_FINDINGS | DETECTOR_FINDINGS
