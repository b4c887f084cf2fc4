"""The built-in signatures, in priority order: the first that matches a line classifies it.

Known-benign lines come first, so they suppress the generic patterns below them; then the
hardware (GPU, NVLink, PCIe, the fabric), CUDA errors, the network and the c10d store, the
collectives' watchdogs, filesystems, hosts and schedulers, configuration and code errors,
numerical divergence, straggler reports, hints, and last the generic Python exception. The tables
themselves live in ``hardware.py`` and the ``software/`` package.
"""

from __future__ import annotations

from detection.core.signatures.accelerators import ACCELERATORS, VENDOR_CONFIG, VENDOR_NETWORK
from detection.core.signatures.entries import BENIGN, hint, sig
from detection.core.signatures.hardware import GPU, NETWORK
from detection.core.signatures.model import Signature
from detection.core.signatures.software import (
    APPLICATION,
    COLLECTIVES,
    CUDA,
    FILESYSTEMS,
    HINTS,
    HOSTS_AND_SCHEDULERS,
    MEMORY_MONITORS,
    NUMERICAL,
    PYTHON,
    STRAGGLERS,
)
from fleet.core.taxonomy import Category as C

KNOWN_BENIGN = (
    sig(
        "nccl_warn_benign_init",
        r"NCCL WARN (?:[^\n]*\bNCCL_[A-Z0-9_]+\b[^\n]*(?:set by environment|is deprecated"
        r"|ignored|Ignoring)|Failed to open libibverbs|NET/Plugin|Could not find real path"
        r"|[^\n]*NUMA)",
        BENIGN,
        "Init-time NCCL warnings about environment variables, plugins and optional libraries.",
    ),
    sig(
        "nccl_warn_advisory",
        # Start-up advice from NCCL, RCCL or a net plugin about the host's set-up (a kernel
        # parameter or variable it recommends, a socket's CPU it cannot read): nothing failed;
        # a failure that follows is read from its own lines.
        r"NCCL WARN (?:Missing \"[^\"\n]{1,80}\" from (?:the )?(?:kernel command line|environment)"
        r"|[^\n]{0,200}\b(?:can|may|could) lead to (?:low|reduced|poor)[^\n]{0,40} performance"
        r"|Cannot get incoming CPU)",
        BENIGN,
        "Advisory NCCL/RCCL warnings about the host's set-up (recommended kernel parameters or "
        "environment, a socket's CPU it cannot read).",
    ),
    sig(
        "container_read_only_noise",
        r"^(?:/usr/bin/|/bin/)?(?:rm|mkdir|ln|cp|mv|touch|chmod|chown): cannot [a-z ]{1,40}"
        r" '[^'\n]{0,512}': Read-only file system",
        BENIGN,
        "A container entrypoint's shell command refused by a read-only image layer.",
    ),
    sig(
        "nfs_placeholder_busy",
        # NFS keeps a deleted file that is still open as ".nfsXXXX": removing its directory
        # meanwhile fails, a clean-up that the job outlives.
        r"\[Errno (?:16|39)\] (?:Device or resource busy|Directory not empty): "
        r"'[^'\n]*\.nfs[0-9a-fA-F]{8,}",
        BENIGN,
        "NFS's placeholder of a deleted file still held open blocks its removal (clean-up).",
    ),
    sig(
        "ray_task_worker_retried",
        # Ray's warning that a task's worker died: Ray retries the task; a failure of the job
        # is raised as its own error (a task or actor error, a dead node).
        r"WARNING [^\n]*A worker died or was killed while executing a task by an unexpected"
        r" system error",
        hint(C.NODE_OR_PROCESS_FAILURE),
        "Ray lost a task's worker and retries the task.",
    ),
)

_PLACES = hint(C.BENIGN)

# Where ranks run, as the excerpt shows it: used to name the host of a rank-level finding.
LAYOUT = (
    sig(
        "layout_nccl_init",
        r"NCCL INFO comm 0x[0-9a-fA-F]{1,16} rank \d{1,6} n[Rr]anks \d{1,6}",
        _PLACES,
        "NCCL's communicator init line (its prefix names the host, the line the rank).",
        layout=True,
    ),
    sig(
        "layout_mpich_abort",
        r"MPICH ERROR \[Rank (?P<rank>\d{1,6})\] \[job id [^\]\n]+\] \[[^\]\n]+\] "
        r"\[(?P<host>[A-Za-z0-9][\w.-]*)\]",
        _PLACES,
        "MPICH's abort line: it names the rank's node.",
        layout=True,
    ),
    sig(
        "layout_rank_node",
        r"\bRank=(?P<rank>\d{1,6}) Node=(?P<host>[A-Za-z0-9][\w.-]{0,253})"
        r"|\bRank (?P<rank2>\d{1,6}) -- GPU \d{1,4} managed by process \d{1,10} on node"
        r" (?P<host2>[A-Za-z0-9][\w.:-]{0,253})",
        _PLACES,
        "A report that names each rank's node (NVRx straggler reports, NCCL RAS).",
        layout=True,
    ),
    sig(
        "layout_pbs_exec_host",
        r"^\s*Exec host:\s+(?P<hostlist>[A-Za-z0-9][\w.+/-]{0,1000})",
        _PLACES,
        "PBS's exec host list: the nodes the job ran on.",
        layout=True,
    ),
    sig(
        "layout_slurm_allocation",
        r"Allocate JobId=\d{1,20} NodeList=(?P<hostlist>[A-Za-z0-9][\w.,\[\]-]*)",
        _PLACES,
        "slurmctld's allocation of the job: the nodes it runs on.",
        layout=True,
    ),
    sig(
        "layout_shell_prompt",
        r"^(?:\([\w.-]{1,64}\) )?\[?[a-z_][\w.-]{0,31}@(?P<hostlist>[A-Za-z0-9][\w.-]{0,253})"
        r"[: ][^\n]{0,300}?\]?[$%#] ",
        _PLACES,
        "A shell prompt (user@host): the commands after it, and their output, ran on that host.",
        layout=True,
    ),
)

BUILTIN_SIGNATURES: tuple[Signature, ...] = (
    *KNOWN_BENIGN,
    *LAYOUT,
    *GPU,
    *ACCELERATORS,
    *MEMORY_MONITORS,
    *CUDA,
    *VENDOR_NETWORK,
    *NETWORK,
    *COLLECTIVES,
    *FILESYSTEMS,
    *HOSTS_AND_SCHEDULERS,
    *VENDOR_CONFIG,
    *APPLICATION,
    *NUMERICAL,
    *STRAGGLERS,
    *HINTS,
    *PYTHON,
)
