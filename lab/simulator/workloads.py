"""The training runs the cluster keeps busy with: a few realistic templates and their parameters."""

from __future__ import annotations

import json
from dataclasses import dataclass

from .config import SimulationConfig
from .events import seeded
from .state import Workload


@dataclass(frozen=True)
class Template:
    """A kind of training run: framework, launchers it is started with, speed and length."""

    name: str
    framework: str
    launchers: tuple[str, ...]
    spi: tuple[float, float]
    tflops: float
    gbs: int
    train_iters: tuple[int, int]
    fb_gib: float
    script: str
    size: float
    weight: float
    array: bool = False


# ``size`` places a template's jobs between the smallest and the largest (0 to 1);
# ``weight`` is its share of submissions.
TEMPLATES = (
    Template(
        "llama-70b-pretrain",
        "megatron",
        ("torchrun", "srun"),
        (6.0, 9.0),
        410.0,
        1024,
        # Weeks of training, far longer than any simulation: this run never gets to finish.
        (500_000, 500_000),
        74.0,
        "pretrain_gpt.py",
        1.0,
        0.25,
    ),
    Template(
        "gpt-22b-pretrain",
        "megatron",
        ("srun", "torchrun"),
        (3.0, 5.0),
        395.0,
        512,
        (250_000, 300_000),
        68.0,
        "pretrain_gpt.py",
        0.7,
        0.2,
    ),
    Template(
        "mixtral-8x7b-sft",
        "deepspeed",
        ("pdsh", "torchrun"),
        (2.0, 4.0),
        285.0,
        256,
        (8_000, 20_000),
        71.0,
        "pretrain_gpt.py",
        0.5,
        0.2,
    ),
    Template(
        "llama-8b-dpo",
        "hf",
        ("torchrun", "srun"),
        (1.0, 2.5),
        180.0,
        128,
        (3_000, 9_000),
        52.0,
        "train.py",
        0.2,
        0.15,
    ),
    Template(
        "sweep-lr-7b",
        "hf",
        ("torchrun",),
        (0.5, 1.2),
        170.0,
        64,
        (1_500, 4_000),
        48.0,
        "train.py",
        0.0,
        0.2,
        array=True,
    ),
)


class WorkloadFactory:
    """Makes workloads with unique tags; each gets a random stream of its own, so one
    workload's log text does not depend on what the others did."""

    def __init__(self, config: SimulationConfig, partition_sizes: dict[str, int]) -> None:
        self._config = config
        self._sizes = partition_sizes
        self._rng = seeded(config.seed, "workloads")
        self._serial = 0

    def pick(self) -> Template:
        return self._rng.choices(TEMPLATES, [t.weight for t in TEMPLATES])[0]

    def array_size(self, room: int) -> int:
        # Never more tasks than free slots, so the configured number of workloads holds.
        return min(room, self._rng.randint(2, 4))

    def make(
        self,
        template: Template,
        partition: str | None = None,
        nodes: int | None = None,
        tag: str | None = None,
    ) -> Workload:
        self._serial += 1
        tag = tag or f"{template.name}-{self._serial:03d}"
        workload = Workload(tag, template.name, seeded(self._config.seed, tag))
        workload.partition = partition or self._pick_partition()
        workload.num_nodes = nodes or self._nodes_for(template, workload.partition)
        self._shape(workload, template)
        return workload

    def named(self, name: str, partition: str, nodes: int, tag: str | None) -> Workload:
        """A workload for a job submitted from outside, shaped by the closest template."""
        # An unknown name gets the small fine-tuning template (llama-8b-dpo).
        template = next((t for t in TEMPLATES if t.name in name), TEMPLATES[3])
        workload = self.make(template, partition, nodes, tag)
        workload.name = name
        return workload

    def _pick_partition(self) -> str:
        parts = [p for p in self._config.partitions if self._sizes.get(p.name)]
        return self._rng.choices([p.name for p in parts], [p.share for p in parts])[0]

    def _nodes_for(self, template: Template, partition: str) -> int:
        low, high = self._config.nodes_per_job
        wanted = round(low + (high - low) * template.size * self._rng.uniform(0.6, 1.0))
        # Leave room for exclusions: a job never needs its whole partition.
        return max(1, min(wanted, high, self._sizes[partition] // 2 or 1))

    def _shape(self, w: Workload, template: Template) -> None:
        rng, config = w.rng, self._config
        w.framework = template.framework
        w.launcher = rng.choice(template.launchers)
        w.gpus = w.num_nodes * config.gpus_per_node
        w.spi = round(rng.uniform(*template.spi), 3)
        w.tflops = template.tflops * rng.uniform(0.95, 1.05)
        w.gbs = template.gbs
        w.train_iters = rng.randint(*template.train_iters)
        # In iterations, so a progress line comes about every ``progress_interval_s`` at any speed.
        w.log_every = max(1, round(config.progress_interval_s / w.spi))
        saves = max(1, round(config.checkpoint_interval_s / w.spi / w.log_every))
        # A multiple of the log interval, so every save falls on a logged iteration.
        w.save_every = saves * w.log_every
        w.script = template.script
        w.ckpt_dir = f"/checkpoints/{w.tag}"
        w.fb_mib = template.fb_gib * 1024 * rng.uniform(0.97, 1.0)
        # PyTorch's default ten minutes, twice as often as a raised half hour.
        w.nccl_timeout_s = rng.choice((600.0, 600.0, 1800.0))
        # Most jobs run a recent PyTorch; the rest print the older log formats.
        w.torch_new = rng.random() < 0.75
        w.loss_floor = rng.uniform(1.6, 2.2)
        w.lr_peak = rng.choice((1.5e-4, 3e-4, 2e-5))
        if w.train_iters > 100_000:
            # Long pre-training runs were already going before the simulation started.
            w.iteration = w.ckpt_iter = w.save_every * rng.randint(0, 40)
        w.start_iter = w.iteration


def comment_for(tag: str) -> str:
    """The job comment that carries the workload tag."""
    return json.dumps({"workload": tag})


def tag_in(comment: str) -> str | None:
    """The workload tag in a job comment, if it has one."""
    try:
        data = json.loads(comment)
    except ValueError:
        # Comments are free text: most are not JSON at all.
        return None
    tag = data.get("workload") if isinstance(data, dict) else None
    return tag if isinstance(tag, str) else None
