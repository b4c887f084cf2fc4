"""Built-in signatures of the software stack: CUDA and NCCL errors as PyTorch reports them, the
c10d watchdog, filesystems, the kernel's OOM killer and hung-task reports, the launchers
(torchrun, DeepSpeed, srun, PALS) and the schedulers (Slurm, PBS), numerical divergence, and
the application's own exceptions.

Roles follow what the line proves: a line that states a cause initiates; a line that reports a
failure elsewhere (a peer that exited, a launcher killing its children, a "previous error") is a
cascade; teardown noise and debugging hints are context.

The tables are split by family: ``cuda`` (CUDA and the collectives), ``filesystems``, ``hosts``
(hosts, launchers and schedulers), ``application`` (configuration and code errors, Python
exceptions), ``training`` (numerical divergence, stragglers) and ``hints``. Their priority
order is set where they are combined, in ``builtin.py``.
"""

from .application import APPLICATION, PYTHON
from .cuda import COLLECTIVES, CUDA
from .filesystems import FILESYSTEMS
from .hints import HINTS
from .hosts import HOSTS_AND_SCHEDULERS, MEMORY_MONITORS
from .training import NUMERICAL, STRAGGLERS

__all__ = [
    "APPLICATION",
    "COLLECTIVES",
    "CUDA",
    "FILESYSTEMS",
    "HINTS",
    "HOSTS_AND_SCHEDULERS",
    "MEMORY_MONITORS",
    "NUMERICAL",
    "PYTHON",
    "STRAGGLERS",
]
