"""Training-progress lines: which iteration a job reached and how fast it goes.

Recognises the iteration lines of Megatron-LM, DeepSpeed, HF Trainer (its loss dicts and tqdm
bars), PyTorch Lightning and NeMo, plus a per-cluster pattern with named groups ``step`` and
optionally ``throughput``. Pure Python on RE2, so matching is linear in the line length.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import re2

from detection.core.signatures.model import Regex, compile_re

# Progress lines are short; past this length a line is not a progress line we can use.
MAX_PROGRESS_LINE = 4096


@dataclass(frozen=True)
class Progress:
    """One progress report: the step reached (None when the format gives none, as HF's loss
    dicts), a throughput in the format's own unit (higher is faster), the loss if shown."""

    step: int | None
    throughput: float | None = None
    loss: float | None = None
    style: str = ""


class InvalidProgressPattern(ValueError):
    """A per-cluster progress pattern was refused; the message says why."""


def _compile(pattern: str) -> Regex:
    # The lean bytes-level matcher: the ``re2`` wrapper's offset translation costs more than
    # the match on lines this short, and progress lines are most of what jobs print.
    return compile_re(pattern)


_MEGATRON = _compile(
    r"iteration\s+(?P<step>\d+)\s*/\s*\d+\s*\|"
    r"(?:.*?elapsed time per iteration \(ms\):\s*(?P<ms>[0-9.]+))?"
    r"(?:.*?throughput per GPU \(TFLOP/s/GPU\):\s*(?P<tflops>[0-9.]+))?"
    r"(?:.*?lm[ -]loss:\s*(?P<loss>[-+0-9.eE]+|nan|inf))?"
)
_DEEPSPEED_STEPS = _compile(
    r"steps:\s*(?P<step>\d+)\s+loss:\s*(?P<loss>[-+0-9.eE]+|nan|inf)"
    r"(?:.*?samples/sec:\s*(?P<sps>[0-9.]+))?"
)
_DEEPSPEED_LOG_DIST = _compile(r"\[Rank \d+\] step=(?P<step>\d+), skipped=\d+")
_HF_LOSS_DICT = _compile(r"\{'loss': (?P<loss>[-+0-9.eE]+|nan|inf),.*'epoch': [0-9.]+\}")
# tqdm bars as HF Trainer, Lightning and NeMo print them: "450/1000 [01:23<01:42,  5.39it/s"
_TQDM = _compile(
    r"\|\s*(?P<step>\d+)/(?P<total>\d+)\s*\[[0-9:]+<[0-9:?]+,\s*"
    r"(?P<rate>[0-9.]+)(?P<unit>it/s|s/it)"
    r"(?:.*?(?:reduced_train_loss|train_loss|loss)=(?P<loss>[-+0-9.eE]+|nan|inf))?"
)

# Each style with two literals (the same one twice when it has one), one of which its lines
# always hold: a line is searched only with the styles whose literal it contains, in this
# order, and the first match wins.
_STYLES: tuple[tuple[str, Regex, tuple[str, str]], ...] = (
    ("megatron", _MEGATRON, ("iteration", "iteration")),
    ("deepspeed", _DEEPSPEED_STEPS, ("steps:", "steps:")),
    ("deepspeed", _DEEPSPEED_LOG_DIST, ("step=", "step=")),
    ("hf", _HF_LOSS_DICT, ("'loss'", "'loss'")),
    ("tqdm", _TQDM, ("it/s", "s/it")),
)


def parse_progress(text: str, custom: Any | None = None) -> Progress | None:
    """The progress a line reports, or None for any other line."""
    if len(text) > MAX_PROGRESS_LINE:
        return None
    if custom is not None:
        found = custom.search(text)
        if found:
            return _from_custom(found)
    for style, pattern, (literal, other) in _STYLES:
        # Plain membership tests: a generator per line would cost more than all of them.
        if literal not in text and other not in text:
            continue
        found = pattern.search(text)
        if found is not None:
            return _from_match(style, found)
    return None


def compile_progress_pattern(pattern: str) -> Any:
    """Validate and compile a per-cluster progress pattern (RE2 syntax, a ``step`` group)."""
    if not pattern.strip():
        raise InvalidProgressPattern("the pattern is empty")
    try:
        compiled = re2.compile(pattern)
    except re2.error as exc:
        raise InvalidProgressPattern(f"not a valid RE2 pattern: {exc}") from exc
    if "step" not in compiled.groupindex:
        raise InvalidProgressPattern("the pattern needs a named group (?P<step>...)")
    return compiled


def _from_custom(found: Any) -> Progress:
    groups = found.groupdict()
    return Progress(
        step=int(groups["step"]), throughput=_number(groups.get("throughput")), style="custom"
    )


def _from_match(style: str, groups: Mapping[str, str | None]) -> Progress:
    raw_step = groups.get("step")
    step = int(raw_step) if raw_step else None
    return Progress(
        step=step, throughput=_throughput(groups), loss=_number(groups.get("loss")), style=style
    )


def _throughput(groups: Mapping[str, str | None]) -> float | None:
    """Throughput in the line's own unit, oriented so that higher means faster."""
    if groups.get("tflops"):
        return _number(groups["tflops"])
    if groups.get("ms"):
        ms = _number(groups["ms"])
        return 1000.0 / ms if ms else None
    if groups.get("sps"):
        return _number(groups["sps"])
    rate = _number(groups.get("rate"))
    if rate is None or rate == 0:
        return None
    return rate if groups.get("unit") == "it/s" else 1.0 / rate


def _number(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        return float(text)
    except ValueError:
        return None
