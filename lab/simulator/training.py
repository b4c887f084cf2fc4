"""Healthy training: an attempt starts up, resumes from its checkpoint, logs progress at the
workload's log interval, saves checkpoints and finishes. Each progress line is one event, so the
cost grows with the number of lines, not with simulated seconds."""

from __future__ import annotations

import math
from datetime import datetime

from fleet.core.scheduler import JobState
from lab.simulator import textgen as tg

from .core import Core
from .records import WorkloadProgress
from .scheduler import SimulatedScheduler
from .state import Job, Phase, Run, Workload
from .textgen import Voice

# Harmless warnings per hour of training: detectors must meet benign noise, not only progress.
_NOISE_PER_HOUR = 4.0
_DATALOADER_WARNING = (
    f"{tg.SITE_PACKAGES}/torch/utils/data/dataloader.py:617: UserWarning: This DataLoader will "
    "create 16 worker processes in total. Our suggested max number of worker in current system "
    "is 12, which is smaller than what this DataLoader is going to create. Please be aware that "
    "excessive worker creation might get DataLoader running slow or even freeze, lower the "
    "worker number to avoid potential slowness/freeze if necessary."
)
_USE_CACHE_WARNING = (
    "`use_cache=True` is incompatible with gradient checkpointing. Setting `use_cache=False`."
)


def loss_at(w: Workload, it: int) -> float:
    noise = 0.04 * (w.rng.random() - w.rng.random())
    # Falls like a power law towards the workload's floor, as pre-training losses do.
    return w.loss_floor + 9.0 / math.sqrt(1.0 + it / 250.0) + noise


def lr_at(w: Workload, it: int) -> float:
    # Linear warm-up, then cosine decay to a tenth of the peak: the usual LLM schedule.
    warmup = min(2000, w.train_iters // 10 or 1)
    if it < warmup:
        return w.lr_peak * (it + 1) / warmup
    done = (it - warmup) / max(1, w.train_iters - warmup)
    return w.lr_peak * (0.1 + 0.45 * (1.0 + math.cos(math.pi * min(1.0, done))))


def grad_norm_at(w: Workload, it: int) -> float:
    return round(0.25 + 2.0 / (1.0 + it / 500.0) + 0.08 * w.rng.random(), 6)


class Trainer:
    """Runs attempts of workloads: start-up, progress, checkpoints, completion, accounting."""

    def __init__(self, core: Core, scheduler: SimulatedScheduler) -> None:
        self._core = core
        self._scheduler = scheduler
        self._gpn = core.config.gpus_per_node

    def start(self, job: Job) -> Run:
        """A job was placed: its processes start and, after start-up, train."""
        w, t = job.workload, self._core.clock.t
        run = Run(job.token, t, list(job.nodes), self._voice(job))
        run.seg_iter0 = w.iteration
        # Collectives already run when a watchdog reports one, for its SeqNum.
        run.nccl_seq = w.rng.randrange(1000, 90000)
        job.run = run
        w.attempts += 1
        if w.first_start_t is None:
            w.first_start_t = t
        # Megatron-style jobs build parallel groups and load sharded checkpoints: they start slower.
        startup = w.rng.uniform(25.0, 60.0) if w.framework == "hf" else w.rng.uniform(45.0, 150.0)
        self._startup_lines(job, run, startup)
        self._core.queue.push(t + startup, self._ready, job, run.token)
        return run

    def stop(self, job: Job) -> None:
        """The attempt's processes are gone: keep what was checkpointed, count what was lost."""
        run = job.run
        if run is None or not run.alive:
            return
        w, t = job.workload, self._core.clock.t
        w.allocated_gpu_s += (t - run.start_t) * w.gpus
        if job.final is not None and job.final[0] is JobState.COMPLETED:
            # A finished run saved its last iteration: nothing is lost.
            w.iteration = w.ckpt_iter = w.train_iters
        else:
            # Everything since the last checkpoint is lost; the next attempt resumes from there.
            w.lost_iters += max(0, run.iteration_at(t) - w.ckpt_iter)
            w.iteration = w.ckpt_iter
        run.phase = Phase.OVER

    def halt(self, run: Run, phase: Phase) -> None:
        """Training stops making progress (a hang, or processes failing)."""
        t = self._core.clock.t
        run.seg_iter0, run.seg_t0 = run.iteration_at(t), t
        run.spi = math.inf
        # A new epoch voids the progress tick already queued.
        run.epoch += 1
        run.phase = phase

    def slow_down(self, job: Job, run: Run, factor: float) -> None:
        """Every iteration now takes ``factor`` times as long (a straggler holds everyone)."""
        run.slow = factor
        # Still starting up: ``_ready`` applies ``run.slow`` when training begins.
        if run.phase is not Phase.TRAIN:
            return
        t = self._core.clock.t
        run.seg_iter0, run.seg_t0 = run.iteration_at(t), t
        run.spi = job.workload.spi * factor
        run.epoch += 1
        self._next_tick(job, run)

    def progress(self, w: Workload) -> WorkloadProgress:
        t = self._core.clock.t
        run = w.job.run if w.job is not None else None
        live = run is not None and run.alive
        iteration = run.iteration_at(t) if run is not None and live else w.iteration
        allocated = w.allocated_gpu_s + ((t - run.start_t) * w.gpus if run and live else 0.0)
        end = w.finished_t if w.finished_t is not None else t
        wall = (end - w.first_start_t) * w.gpus if w.first_start_t is not None else 0.0
        return WorkloadProgress(
            workload=w.tag,
            job_ids=tuple(w.job_ids),
            gpus=w.gpus,
            iteration=iteration,
            train_iters=w.train_iters,
            checkpoint_iteration=w.ckpt_iter,
            lost_iterations=w.lost_iters,
            attempts=w.attempts,
            # At nominal speed, so a slowed attempt earns credit only for the iterations it did.
            productive_gpu_s=(iteration - w.start_iter) * w.spi * w.gpus,
            allocated_gpu_s=allocated,
            wall_gpu_s=wall,
            finished=w.finished_t is not None,
        )

    # -- inside -----------------------------------------------------------------------------

    def _voice(self, job: Job) -> Voice:
        w = job.workload
        return Voice(
            launcher=w.launcher,
            framework=w.framework,
            job_id=job.job_id,
            hosts=tuple(n.name for n in job.nodes),
            ips=tuple(n.ip for n in job.nodes),
            gpn=self._gpn,
            pids=tuple(w.rng.randrange(20000, 3_000_000) for _ in job.nodes),
            torch_new=w.torch_new,
            script=w.script,
        )

    def _startup_lines(self, job: Job, run: Run, startup: float) -> None:
        w, voice, t0 = job.workload, run.voice, run.start_t
        at, emit = self._core.clock.at, self._core.job_lines_at
        rank = voice.log_rank
        emit(t0 + 0.4, job, run.token, tg.launcher_banner(voice, at(t0 + 0.4), voice.pids[0]))
        emit(t0 + startup * 0.2, job, run.token, self._banner(w, voice, at(t0 + startup * 0.2)))
        warning = tg.REENTRANT_WARNING if w.framework == "megatron" else tg.TYPED_STORAGE_WARNING
        texts = [
            voice.out(pos * self._gpn, warning.format(path=tg.SITE_PACKAGES))
            for pos in range(len(voice.hosts))
        ]
        emit(t0 + startup * 0.4, job, run.token, texts)
        loaded = tg.checkpoint_loaded(w.framework, w.ckpt_dir, w.iteration)
        emit(t0 + startup * 0.7, job, run.token, [voice.out(rank, text) for text in loaded])
        nccl = [
            line
            for pos in range(len(voice.hosts))
            for line in tg.nccl_init(voice, pos * self._gpn, "2.21.5+cuda12.4")
        ]
        emit(t0 + startup * 0.9, job, run.token, nccl)

    def _banner(self, w: Workload, voice: Voice, d: datetime) -> list[str]:
        rank = voice.log_rank
        if w.framework == "hf":
            lines = tg.hf_banner(w.train_iters * w.gbs // 3, w.gbs, w.train_iters)
        else:
            lines = tg.megatron_banner(voice, d)
        if w.framework == "deepspeed":
            lines.append(
                f"{tg.ds_stamp(d)} [INFO] [config.py:733:__init__] Config mesh_device "
                f"None world_size = {voice.world}"
            )
        return [voice.out(rank, line) for line in lines]

    def _ready(self, job: Job, token: int) -> None:
        run = job.run
        if run is None or run.token != token or run.phase is not Phase.STARTUP:
            return
        w = job.workload
        if w.framework == "megatron":
            line = f"[before the start of training step] datetime: {tg.stamp(self._core.clock.now)}"
            self._core.job_lines(job, [run.voice.out(run.voice.log_rank, line)])
        run.phase = Phase.TRAIN
        run.seg_t0, run.seg_iter0 = self._core.clock.t, w.iteration
        run.spi = w.spi * run.slow
        self._next_tick(job, run)

    def _next_tick(self, job: Job, run: Run, done: int | None = None) -> None:
        """Schedule the next progress line, at the next multiple of the log interval."""
        w = job.workload
        # The iteration just logged is passed in: recomputing it from the float clock could
        # land one short and log the same iteration forever.
        it = run.iteration_at(self._core.clock.t) if done is None else done
        target = min(w.train_iters, (it // w.log_every + 1) * w.log_every)
        t = run.seg_t0 + (target - run.seg_iter0) * run.spi
        self._core.queue.push(t, self._tick, job, run.token, run.epoch, target)

    def _tick(self, job: Job, token: int, epoch: int, it: int) -> None:
        run = job.run
        if run is None or run.token != token or run.epoch != epoch or run.phase is not Phase.TRAIN:
            return
        w, d = job.workload, self._core.clock.now
        lines = self._progress_lines(w, run, it, d)
        # The last iteration always saves, so a completed run loses nothing.
        if it % w.save_every == 0 or it >= w.train_iters:
            lines += self._checkpoint_lines(w, run, it)
            w.ckpt_iter = it
        # A tick covers spi × log_every seconds: the chance scales with it to keep the hourly rate.
        if w.rng.random() < _NOISE_PER_HOUR * w.spi * w.log_every / 3600.0:
            lines.append(self._noise_line(w, run))
        self._core.job_lines(job, lines, d)
        if it >= w.train_iters:
            self._complete(job, run)
        else:
            self._next_tick(job, run, it)

    def _progress_lines(self, w: Workload, run: Run, it: int, d: datetime) -> list[str]:
        voice, rng = run.voice, w.rng
        loss = loss_at(w, it) * run.loss_shift
        # The reported iteration time jitters; the schedule itself keeps the exact speed.
        secs = run.spi * (1.0 + 0.02 * (rng.random() - rng.random()))
        rank = voice.log_rank
        if w.framework == "megatron":
            line = tg.megatron_iteration(
                d,
                it,
                w.train_iters,
                w.gbs,
                secs * 1000.0,
                # Throughput follows the iteration time, so a slowdown shows in both.
                w.tflops * w.spi / secs,
                lr_at(w, it),
                loss,
                grad_norm_at(w, it),
            )
            return [voice.out(rank, line)]
        if w.framework == "deepspeed":
            lines = tg.deepspeed_step(d, it, lr_at(w, it), loss, secs, w.gbs)
            return [voice.out(rank, line) for line in lines]
        elapsed = self._core.clock.t - run.start_t
        lines = tg.hf_logs(
            it,
            w.train_iters,
            loss,
            grad_norm_at(w, it),
            lr_at(w, it),
            # Three epochs, as the Hugging Face banner says.
            3.0 * it / w.train_iters,
            secs,
            elapsed,
        )
        return [voice.out(rank, line) for line in lines]

    def _checkpoint_lines(self, w: Workload, run: Run, it: int) -> list[str]:
        voice, d = run.voice, self._core.clock.now
        lines = tg.checkpoint_saved(w.framework, d, w.ckpt_dir, it)
        if w.framework == "megatron":
            loss = loss_at(w, it)
            rule = "-" * 97
            lines[:0] = [
                rule,
                f" validation loss at iteration {it} | lm loss value: {loss:.6E} "
                f"| lm loss PPL: {math.exp(loss):.6E} | ",
                rule,
            ]
        return [voice.out(voice.log_rank, line) for line in lines]

    def _noise_line(self, w: Workload, run: Run) -> str:
        """Harmless chatter a real job log is full of."""
        voice, rank = run.voice, w.rng.randrange(run.voice.world)
        if w.framework == "deepspeed":
            d = self._core.clock.now
            text = tg.ALLOCATOR_WARNING.format(n=w.rng.randint(1, 3))
            return voice.out(rank, f"{tg.ds_stamp(d)} {text}")
        if w.framework == "hf":
            return voice.out(rank, _USE_CACHE_WARNING)
        return voice.out(rank, _DATALOADER_WARNING)

    def _complete(self, job: Job, run: Run) -> None:
        w, voice, d = job.workload, run.voice, self._core.clock.now
        if w.framework == "hf":
            runtime = self._core.clock.t - run.start_t
            text = (
                f"{{'train_runtime': {runtime:.4f}, 'train_samples_per_second': "
                f"{w.gbs / w.spi:.3f}, 'train_steps_per_second': {1 / w.spi:.3f}, "
                f"'train_loss': {loss_at(w, w.train_iters):.4f}, 'epoch': 3.0}}"
            )
        else:
            text = f"[after training is done] datetime: {tg.stamp(d)} "
        self._core.job_lines(job, [voice.out(voice.log_rank, text)])
        self._scheduler.end(job, JobState.COMPLETED, 0, 0, "None")
