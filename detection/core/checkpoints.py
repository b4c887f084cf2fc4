"""Checkpoint and evaluation lines: when a job saves or loads a checkpoint, and of which step.

Recognises the lines Megatron-LM, DeepSpeed, NeMo, HF Trainer, PyTorch Lightning and
``torch.distributed.checkpoint`` (its own debug events, and torchtitan, its reference trainer)
print around a save, a load and an evaluation, as their sources write them. Pure Python on RE2,
so matching is linear in the line length. A save or an evaluation pauses progress legitimately;
a load says where a restarted attempt resumed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields, replace
from datetime import datetime
from enum import StrEnum
from typing import Any

import re2

# Checkpoint lines carry a path; past this length a line is not one we can use.
MAX_CHECKPOINT_LINE = 4096


class Phase(StrEnum):
    SAVE_STARTED = "save_started"
    SAVED = "saved"
    LOAD_STARTED = "load_started"
    LOADED = "loaded"
    # The framework says it found no checkpoint and starts from scratch.
    FRESH_START = "fresh_start"
    EVAL_STARTED = "eval_started"
    EVAL_ENDED = "eval_ended"


@dataclass(frozen=True)
class CheckpointEvent:
    """One checkpoint or evaluation line: what happened, the step when the line names one, the
    path when it gives one."""

    phase: Phase
    step: int | None = None
    path: str = ""
    framework: str = ""


def _compile(pattern: str) -> Any:
    return re2.compile(pattern)


# Where a checkpoint path names its step: DeepSpeed's tag ``global_step100``, HF's
# ``checkpoint-500``, Lightning/NeMo's ``step=1000``, torchtitan's ``step-200``, Megatron's
# ``iter_0000845``.
_STEP_IN_PATH = _compile(r"(?:global_step|checkpoint-|step=|step-|iter_)(\d+)")

# (phase, framework, pattern); a ``step`` group when the line states it, a ``path`` group when
# the step has to be read from the path.
_RULES: tuple[tuple[Phase, str, Any], ...] = (
    # Megatron-LM (megatron/training/checkpointing.py); NeMo logs the "successfully" ones too.
    (
        Phase.SAVE_STARTED,
        "megatron",
        _compile(r"saving checkpoint at iteration\s+(?P<step>\d+)(?: to (?P<path>\S+))?"),
    ),
    (
        Phase.SAVED,
        "megatron",
        _compile(
            r"(?i:successfully saved checkpoint from iteration)\s+(?P<step>\d+)"
            r"(?: to (?P<path>\S+))?"
        ),
    ),
    (
        Phase.LOAD_STARTED,
        "megatron",
        _compile(
            r"loading (?:distributed )?checkpoint from (?P<path>\S+) at iteration\s+(?P<step>\d+)"
        ),
    ),
    (
        Phase.LOADED,
        "megatron",
        _compile(
            r"successfully loaded checkpoint from (?P<path>\S+).* at iteration\s+(?P<step>\d+)"
        ),
    ),
    (
        Phase.FRESH_START,
        "megatron",
        _compile(r"will not load any checkpoints and will start from random"),
    ),
    (Phase.EVAL_STARTED, "megatron", _compile(r"Evaluating (?:on \d+ samples|iter \d+/\d+)")),
    # DeepSpeed (runtime/engine.py, checkpoint_engine/*): the tag is global_step<N> by default.
    (
        Phase.SAVE_STARTED,
        "deepspeed",
        _compile(r"\] Checkpoint (?P<path>\S+) is (?:about to be saved|begin to save)!"),
    ),
    (Phase.SAVED, "deepspeed", _compile(r"\] Checkpoint (?P<path>\S+) is ready now!")),
    (Phase.SAVED, "deepspeed", _compile(r"zero checkpoint saved (?P<path>\S+)")),
    (
        Phase.LOAD_STARTED,
        "deepspeed",
        _compile(r"\[Torch\] Loading checkpoint from (?P<path>\S+?)(?:\.\.\.)?$"),
    ),
    (
        Phase.LOADED,
        "deepspeed",
        _compile(r"\[Torch\] Loaded checkpoint from (?P<path>\S+?)\.?$"),
    ),
    # NeMo (utils/callbacks/nemo_model_checkpoint.py, utils/exp_manager.py): async saves
    # finish later while training goes on, so only their end is an event.
    (
        Phase.SAVED,
        "nemo",
        _compile(r"Async checkpoint save for step \d+ \((?P<path>[^)]*)\) finalized successfully"),
    ),
    (
        Phase.LOAD_STARTED,
        "nemo",
        _compile(r"Resuming training from checkpoint:? (?P<path>\S+)"),
    ),
    # HF Trainer (trainer.py): output_dir is .../checkpoint-<global step>.
    (Phase.SAVE_STARTED, "hf", _compile(r"Saving model checkpoint to (?P<path>\S+)")),
    (Phase.LOAD_STARTED, "hf", _compile(r"Loading model from (?P<path>\S+?)\.?$")),
    (Phase.LOADED, "hf", _compile(r"Continuing training from global step (?P<step>\d+)")),
    (
        Phase.EVAL_STARTED,
        "hf",
        _compile(r"\*\*\*\*\* Running (?:Evaluation|Prediction) \*\*\*\*\*"),
    ),
    (Phase.EVAL_ENDED, "hf", _compile(r"\{'eval_loss': ")),
    # PyTorch Lightning (callbacks/model_checkpoint.py, connectors/checkpoint_connector.py).
    (
        Phase.SAVE_STARTED,
        "lightning",
        _compile(r"Epoch \d+, global step (?P<step>\d+): .*saving model to '?(?P<path>[^' ]+)"),
    ),
    (
        Phase.LOAD_STARTED,
        "lightning",
        _compile(r"Restoring states from the checkpoint path at (?P<path>\S+)"),
    ),
    (
        Phase.LOADED,
        "lightning",
        _compile(r"Restored all states from the checkpoint (?:file )?at (?P<path>\S+)"),
    ),
    # torch.distributed.checkpoint as torchtitan reports it (components/checkpoint.py).
    (
        Phase.SAVE_STARTED,
        "dcp",
        _compile(
            r"Saving (?:the checkpoint|a full checkpoint at (?:last )?step,? (?:step )?"
            r"(?P<step>\d+)|a model (?:weights )?only checkpoint)"
        ),
    ),
    (
        Phase.SAVED,
        "dcp",
        _compile(r"Finished saving the checkpoint|Last step checkpoint completed"),
    ),
    (
        Phase.LOAD_STARTED,
        "dcp",
        _compile(
            r"Loading (?:the checkpoint at step (?P<step>\d+)"
            r"|resume checkpoint from (?P<path>\S+?)\.?$)"
        ),
    ),
    (Phase.LOADED, "dcp", _compile(r"Finished loading (?:the|resume) checkpoint")),
    # torch.distributed.checkpoint's own events (logger "dcp_logger", debug level).
    (
        Phase.SAVE_STARTED,
        "dcp",
        _compile(
            r"'checkpoint_id': '(?P<path>[^']*)'.*'func_name': '(?:async_)?save'.*'event': 'start'"
        ),
    ),
    (
        Phase.SAVED,
        "dcp",
        _compile(
            r"'checkpoint_id': '(?P<path>[^']*)'.*'func_name': '(?:async_)?save'.*'event': 'end'"
        ),
    ),
    (
        Phase.LOAD_STARTED,
        "dcp",
        _compile(r"'checkpoint_id': '(?P<path>[^']*)'.*'func_name': 'load'.*'event': 'start'"),
    ),
    (
        Phase.LOADED,
        "dcp",
        _compile(r"'checkpoint_id': '(?P<path>[^']*)'.*'func_name': 'load'.*'event': 'end'"),
    ),
)


def _may_be_checkpoint(text: str) -> bool:
    """Cheap test before any regex: every rule above contains one of these (an ``or`` of
    ``in`` tests, since most lines of a job are none of them and this runs on every one)."""
    return (
        "heckpoint" in text
        or "Evaluat" in text
        or "'eval_loss'" in text
        or "saving model to" in text
        or "Continuing training from" in text
    )


def parse_checkpoint(text: str) -> CheckpointEvent | None:
    """The checkpoint or evaluation event a line reports, or None for any other line."""
    if len(text) > MAX_CHECKPOINT_LINE or not _may_be_checkpoint(text):
        return None
    for phase, framework, pattern in _RULES:
        found = pattern.search(text)
        if found:
            return _event(phase, framework, found.groupdict())
    return None


def _event(phase: Phase, framework: str, groups: dict[str, str | None]) -> CheckpointEvent:
    path = (groups.get("path") or "").strip("'\"")[:500]
    raw = groups.get("step")
    step = int(raw) if raw else step_in_path(path)
    return CheckpointEvent(phase=phase, step=step, path=path, framework=framework)


def step_in_path(path: str) -> int | None:
    """The step a checkpoint's path names (the last one, for nested names), if any."""
    found = _STEP_IN_PATH.findall(path) if path else []
    return int(found[-1]) if found else None


# Saves that block training and print nothing at their end: the next progress report says the
# save was written. Megatron, NeMo and torch.distributed.checkpoint say so themselves (and
# their async saves finish while training goes on), so theirs wait for that line.
_WRITTEN_WHEN_PROGRESS_RESUMES = frozenset({"deepspeed", "hf", "lightning"})


@dataclass(frozen=True)
class CheckpointState:
    """What one attempt's log says of its checkpoints: the last one written (step, time, path),
    a save under way, and what the attempt loaded when it started."""

    saved_step: int | None = None
    saved_at: datetime | None = None
    saved_path: str = ""
    pending_step: int | None = None
    pending_path: str = ""
    pending_framework: str = ""
    loaded_step: int | None = None
    loaded_path: str = ""
    loaded_at: datetime | None = None
    fresh_start: bool = False

    def observe(self, at: datetime, event: CheckpointEvent) -> CheckpointState:
        if event.phase is Phase.SAVE_STARTED:
            return replace(
                self,
                pending_step=event.step,
                pending_path=event.path,
                pending_framework=event.framework,
            )
        if event.phase is Phase.SAVED:
            return self._written(at, event.step, event.path)
        if event.phase in (Phase.LOAD_STARTED, Phase.LOADED):
            return replace(
                self,
                loaded_step=event.step if event.step is not None else self.loaded_step,
                loaded_path=event.path or self.loaded_path,
                loaded_at=at,
            )
        if event.phase is Phase.FRESH_START:
            return replace(self, fresh_start=True)
        return self

    def observe_progress(self, at: datetime) -> CheckpointState:
        """Training went on: a blocking save that prints no end of its own was written."""
        if (
            self.pending_step is None
            or self.pending_framework not in _WRITTEN_WHEN_PROGRESS_RESUMES
        ):
            return self
        return self._written(at, None, "")

    def _written(self, at: datetime, step: int | None, path: str) -> CheckpointState:
        step = step if step is not None else self.pending_step
        if step is None:  # a save's end that names nothing we know of
            return replace(self, pending_step=None, pending_path="", pending_framework="")
        return replace(
            self,
            saved_step=step,
            saved_at=at,
            saved_path=path or self.pending_path,
            pending_step=None,
            pending_path="",
            pending_framework="",
        )

    def as_json(self) -> dict[str, object]:
        return {
            name: value.isoformat() if isinstance(value, datetime) else value
            for name, value in asdict(self).items()
        }

    @classmethod
    def from_json(cls, data: Mapping[str, object] | None) -> CheckpointState:
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in (data or {}).items() if k in known}
        for name in ("saved_at", "loaded_at"):
            raw = values.get(name)
            values[name] = datetime.fromisoformat(raw) if isinstance(raw, str) else None
        return cls(**values)  # type: ignore[arg-type]


class Resume(StrEnum):
    """Whether a restarted attempt resumed from the workload's last checkpoint."""

    RESUMED = "resumed"
    FROM_SCRATCH = "from_scratch"
    OLDER_CHECKPOINT = "older_checkpoint"


@dataclass(frozen=True)
class LastCheckpoint:
    """The newest checkpoint an earlier attempt of the workload wrote."""

    step: int
    at: datetime
    path: str = ""


@dataclass(frozen=True)
class ResumeVerdict:
    resume: Resume
    summary: str


def resume_verdict(last: LastCheckpoint, state: CheckpointState) -> ResumeVerdict | None:
    """Decided at a restarted attempt's first progress report, when its loads are behind it.
    None when the log cannot tell (a load that names neither a step nor the same path)."""
    loaded, path = state.loaded_step, state.loaded_path
    if loaded is None and not path:
        return ResumeVerdict(
            Resume.FROM_SCRATCH,
            f"started from scratch although step {last.step} was checkpointed at "
            f"{last.at:%Y-%m-%d %H:%M:%S}",
        )
    if loaded is None:
        # Megatron names the save directory, not the step's: a path alone only says "same".
        if path != last.path:
            return None
        loaded = last.step
    if loaded >= last.step:
        return ResumeVerdict(Resume.RESUMED, f"resumed from step {loaded}")
    return ResumeVerdict(
        Resume.OLDER_CHECKPOINT,
        f"resumed from step {loaded}, not from the last checkpoint (step {last.step})",
    )
