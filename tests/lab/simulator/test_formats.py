"""Log text looks like what real tools print, and healthy chatter is not a failure."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest

from fleet.core.scheduler import JobState
from lab.simulator import SimulatedCluster, SimulationConfig
from lab.simulator.textgen import Voice, deepspeed_step, hf_logs, megatron_iteration

D = datetime(2025, 5, 1, 12, 0, 0, 123456, tzinfo=UTC)
MEGATRON = re.compile(
    r"^ \[2025-05-01 12:00:00\] iteration +100/ +500000 \| consumed samples: +51200 \| elapsed "
    r"time per iteration \(ms\): 1234\.5 \| throughput per GPU \(TFLOP/s/GPU\): 410\.2 \| "
    r"learning rate: 3\.000000E-04 \| global batch size: +512 \| lm loss: 2\.345600E\+00 \| "
    r"loss scale: 1\.0 \| grad norm: 0\.812 \| number of skipped iterations: +0 \| number of "
    r"nan iterations: +0 \|$"
)


def test_megatron_progress_has_the_training_log_shape() -> None:
    line = megatron_iteration(D, 100, 500000, 512, 1234.5, 410.2, 3e-4, 2.3456, 0.812)
    assert MEGATRON.match(line), line


def test_deepspeed_progress_has_log_dist_and_steps_lines() -> None:
    first, second = deepspeed_step(D, 100, 3e-4, 2.3456, 1.234, 512)
    assert first.startswith(
        "[2025-05-01 12:00:00,123] [INFO] [logging.py:96:log_dist] [Rank 0] "
        "step=100, skipped=0, lr=[0.0003, 0.0003], mom=[(0.9, 0.95)"
    )
    assert second == "steps: 100 loss: 2.3456 iter time (s): 1.234 samples/sec: 414.911"


def test_hf_trainer_logs_a_metrics_dict_and_a_tqdm_bar() -> None:
    metrics, bar = hf_logs(120, 1000, 2.34567, 0.81, 4.99e-05, 0.36, 1.0, 120.0)
    assert metrics == (
        "{'loss': 2.3457, 'grad_norm': 0.81, 'learning_rate': 4.99e-05, 'epoch': 0.36}"
    )
    assert bar == " 12%|█         | 120/1000 [02:00<14:40,  1.00s/it]"


@pytest.mark.parametrize(
    ("launcher", "out", "err"),
    [
        ("torchrun", "hello", "[rank12]: boom"),
        ("srun", "12: hello", "12: boom"),
        ("pdsh", "gpu-node-002: hello", "gpu-node-002: boom"),
    ],
)
def test_each_launcher_prefixes_rank_output_its_own_way(launcher: str, out: str, err: str) -> None:
    voice = Voice(
        launcher,
        "megatron",
        "42",
        ("gpu-node-001", "gpu-node-002"),
        ("10.0.0.1", "10.0.0.2"),
        8,
        (100, 200),
        True,
        "pretrain_gpt.py",
    )
    assert voice.out(12, "hello") == out
    assert voice.err(12, "boom") == err


def test_a_healthy_hour_is_full_of_harmless_chatter_and_nothing_else() -> None:
    sim = SimulatedCluster(SimulationConfig(seed=9, nodes=48, workloads=10, fault_rate=0.0))
    lines = []
    for _ in range(12):
        lines += sim.advance(300)
    text = "\n".join(line.text for line in lines)
    assert sim.ground_truth == []
    assert "UserWarning" in text or "FutureWarning" in text
    assert "NCCL INFO" in text
    assert " iteration " in text or "'loss':" in text or "steps:" in text
    assert not any(line.host for line in lines)
    assert all(
        j.state in (JobState.RUNNING, JobState.COMPLETED, JobState.COMPLETING, JobState.PENDING)
        for j in sim.snapshot().jobs
    )
    assert [line.at for line in lines] == sorted(line.at for line in lines)


def test_array_tasks_are_jobs_of_their_own() -> None:
    sim = SimulatedCluster(SimulationConfig(seed=2, nodes=64, workloads=30))
    ids = [j.job_id for j in sim.snapshot().jobs]
    tasks = [i for i in ids if "_" in i]
    assert tasks
    base = tasks[0].split("_")[0]
    assert f"{base}_0" in ids and f"{base}_1" in ids
    assert base not in ids
