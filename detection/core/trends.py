"""Findings read from values across lines, where no single line says "failed": a loss that
diverged, and a performance report in which one member (a rank, a node, a GPU) lags the others.

They come back as match groups, so the diagnosis weighs them like any signature's finding.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from detection.core.constants import Role, Severity
from detection.core.detectors.divergence import (
    LOSS_DIVERGENCE,
    DivergenceSettings,
    LossTrend,
    diverged,
)
from detection.core.progress import parse_progress
from detection.core.signatures.entries import NAN, NODE_FAILED, SCHED
from detection.core.signatures.fields import extract_fields, strip_prefixes
from detection.core.signatures.model import MatchGroup, classify, compile_re
from detection.core.signatures.refiners import OVERFLOW_FLOOR
from fleet.core.taxonomy import Attribution, Category, Kind

# An excerpt is all there is: a spike is judged on the readings after it, however few.
EXCERPT_DIVERGENCE = DivergenceSettings(settle_readings=0)
MAX_STREAMS = 10_000
MAX_TEXT = 2000
LAGGING_MEMBER = "lagging_member"
# One GPU of a node far behind the node's others (a stress test's per-GPU results): the GPU's
# own fault, whichever node it is.
LAGGING_GPU = "lagging_gpu"
# NVRx's default straggler threshold: a member at 0.7 of the best one's performance.
LAG_RATIO = 1 / 0.7
_LAGGING = classify(
    Kind.STRAGGLER, Category.STRAGGLER, Attribution.HARDWARE, Role.INITIATING, True, Severity.ERROR
)


def trend_findings(lines: Sequence[str]) -> list[MatchGroup]:
    found = [
        loss_divergence(lines),
        lagging_member(lines),
        every_step_skipped(lines),
        loss_collapsed(lines),
        loss_missing(lines),
        gradients_exploded(lines),
        duplicate_rank_at_init(lines),
        ray_node_died(lines),
    ]
    return [group for group in found if group is not None]


SKIPPED_STEPS = "every_step_skipped"
# A trainer that drops a step whose gradients are not finite ("detected nan/inf gradient;
# skipping"): the act, not a counter of skipped steps such as Megatron's iteration line prints.
# DeepSpeed's OVERFLOW lines say more (the loss scale) and have their own signature.
_SKIPPED_STEP = compile_re(
    r"(?i)(?:nan|inf|non-?finite|overflow)[^\n]{0,60}skipping\b"
    # Marian counts the update it drops ("skipping 12-th update due to loss being nan").
    r"|skipping (?:this |the )?(?:\d{1,9}(?:-?(?:st|nd|rd|th))? )?(?:step|update|batch|iteration)"
    r"[^\n]{0,60}(?:nan|inf|non-?finite|overflow)"
)
# One skip is loss scaling at work; this many in a row with no step taken between is a run
# that no longer trains.
SKIPS_IN_A_ROW = 4


_NEW_SCALE = compile_re(r"(?i)(?:reducing|setting) loss scale to:? (?P<scale>[0-9.eE+]{1,30})")


def _scaling_down(line: str) -> bool:
    found = _NEW_SCALE.search(line)
    if found is None:
        return False
    try:
        return float(found["scale"]) > OVERFLOW_FLOOR
    except ValueError:
        return False


def every_step_skipped(lines: Sequence[str]) -> MatchGroup | None:
    """Steps skipped for non-finite gradients, one after another with no finite loss between."""
    run, first = 0, 0
    for line_no, line in enumerate(lines, start=1):
        if _scaling_down(line):
            # The skip names the loss scale it halves to, still far above its floor: dynamic
            # loss scaling at work, neither a skip that counts nor a step taken.
            continue
        if "OVERFLOW!" not in line and _SKIPPED_STEP.search(line) is not None:
            run, first = run + 1, first or line_no
            if run >= SKIPS_IN_A_ROW:
                what = f"{run} steps in a row skipped for non-finite gradients"
                return _group(lines, SKIPPED_STEPS, NAN, first, what[:1].upper() + what[1:], ())
            continue
        progress = parse_progress(line)
        if progress is not None and progress.loss is not None and progress.loss == progress.loss:
            run, first = 0, 0
    return None


def loss_divergence(
    lines: Sequence[str], settings: DivergenceSettings = EXCERPT_DIVERGENCE
) -> MatchGroup | None:
    """A loss that spiked and did not come back, read from the progress lines (per process, so
    interleaved ranks do not mix), or None."""
    trends: dict[tuple[str | None, int | None, int | None], LossTrend] = {}
    for line_no, line in enumerate(lines, start=1):
        progress = parse_progress(line)
        if progress is None or progress.loss is None:
            continue
        stream = extract_fields(line).stream
        if stream not in trends and len(trends) >= MAX_STREAMS:
            continue
        trends[stream] = trends.get(stream, LossTrend()).add(
            progress.loss, line_no, progress.step, settings
        )
    for trend in trends.values():
        found = diverged(trend, settings)
        if found is not None and found.peak_at is not None:
            what = found.describe()
            return _group(
                lines,
                LOSS_DIVERGENCE,
                NAN,
                found.peak_at,
                what[:1].upper() + what[1:],
                (("loss_baseline", f"{found.baseline:.4g}"), ("loss_last", f"{found.last:.4g}")),
            )
    return None


# "{2: 20.18, 3: 18.72, 0: 181.8}" (dlrover's elapsed times, NVRx's scores) and DCGM's GEMM
# stress test, one adapter per line.
_MEMBER_VALUE = compile_re(r"(?:^|[{\s,'])(?P<member>\d{1,6}): (?P<value>\d{1,9}(?:\.\d{1,12})?)")
_ADAPTER = compile_re(
    r"\(ADAPTER#(?P<member>\d{1,4})\)\s+Ending with (?P<value>[0-9.]{1,30}) GFlops"
)
_LOWER_IS_BETTER = compile_re(r"(?i)elapsed time|latency|duration|\btime\b|\bms\b|seconds")
_HIGHER_IS_BETTER = compile_re(r"(?i)score|throughput|tflop|gflop|samples/s|tokens/s|bandwidth")
_MIN_MEMBERS = 3


def lagging_member(lines: Sequence[str]) -> MatchGroup | None:
    """The first report that lists a value per member in which one member is at most 0.7 of
    the best (NVRx's threshold), or None."""
    adapters: dict[str, float] = {}
    adapters_from = 0
    for line_no, line in enumerate(lines, start=1):
        if "(ADAPTER#" in line:
            found = _ADAPTER.search(line)
            if found is not None:
                adapters_from = adapters_from or line_no
                adapters[found["member"]] = float(found["value"])
                continue
        if adapters:
            lag = _lagging(adapters, higher_is_better=True)
            if lag:
                return _lag_group(lines, adapters_from, "GPU", lag)
            adapters, adapters_from = {}, 0
        if ": " not in line or len(line) > 4096:
            continue
        members = _members(line)
        if len(members) < _MIN_MEMBERS:
            continue
        context = " ".join(lines[max(0, line_no - 4) : line_no])
        if _LOWER_IS_BETTER.search(context) is not None:
            lag = _lagging(members, higher_is_better=False)
        elif _HIGHER_IS_BETTER.search(context) is not None:
            lag = _lagging(members, higher_is_better=True)
        else:
            continue
        if lag:
            return _lag_group(lines, line_no, "member", lag)
    if adapters:
        lag = _lagging(adapters, higher_is_better=True)
        if lag:
            return _lag_group(lines, adapters_from, "GPU", lag)
    return None


def _members(line: str) -> dict[str, float]:
    members: dict[str, float] = {}
    data = line.encode("utf-8", "replace")
    pos = 0
    while len(members) < 100_000:
        found = _MEMBER_VALUE.match_bytes(data, pos)
        if found is None:
            break
        start, end, groups = found
        members.setdefault(groups["member"], float(groups["value"]))
        pos = max(end, start + 1)
    return members


def _lagging(values: dict[str, float], higher_is_better: bool) -> list[tuple[str, float]]:
    """The members at or below 0.7 of the best one, with how far behind each is."""
    if len(values) < _MIN_MEMBERS or min(values.values()) <= 0:
        return []
    best = max(values.values()) if higher_is_better else min(values.values())
    behind = {
        member: (best / value if higher_is_better else value / best)
        for member, value in values.items()
    }
    return sorted(
        ((member, ratio) for member, ratio in behind.items() if ratio >= LAG_RATIO),
        key=lambda item: -item[1],
    )


def _lag_group(
    lines: Sequence[str], line_no: int, member: str, lag: list[tuple[str, float]]
) -> MatchGroup:
    named = ", ".join(f"{member} {name} ({ratio:.1f}x behind)" for name, ratio in lag[:8])
    return _group(
        lines,
        LAGGING_GPU if member == "GPU" else LAGGING_MEMBER,
        _LAGGING,
        line_no,
        f"A performance report shows a member far behind the best one: {named}",
        (("lagging", ",".join(name for name, _ in lag)),),
    )


def _group(
    lines: Sequence[str],
    signature: str,
    classification: object,
    line_no: int,
    description: str,
    details: tuple[tuple[str, str], ...],
) -> MatchGroup:
    text = lines[line_no - 1][:MAX_TEXT]
    return MatchGroup(
        signature=signature,
        classification=classification,  # type: ignore[arg-type]
        first_line=line_no,
        last_line=line_no,
        count=1,
        text=text,
        line_numbers=(line_no,),
        description=description,
        message=strip_prefixes(text),
        details=details,
    )


LOSS_COLLAPSED = "loss_collapsed_to_zero"
# Any loss field a trainer prints: "loss: 0.0", "train/CrossEntropyLoss=0.0", "'loss': 0.0".
_LOSS_VALUE = compile_re(
    r"(?i)\b\w{0,40}loss\w{0,16}['\"]?\s*[:=]\s*['\"]?(?P<value>[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?)"
)
# A loss this far above zero earlier says the run was learning before it collapsed.
_LEARNING_LOSS = 0.01


def loss_collapsed(lines: Sequence[str]) -> MatchGroup | None:
    """A loss that reads exactly zero after it read well above zero: the model has collapsed
    (or stopped computing a loss), whatever the framework calls it."""
    seen_learning = False
    for line_no, line in enumerate(lines, start=1):
        found = _LOSS_VALUE.search(line)
        if found is None:
            continue
        value = float(found["value"])
        if value > _LEARNING_LOSS:
            seen_learning = True
        elif value == 0.0 and seen_learning:
            what = "The loss fell to exactly zero after the run had been learning"
            return _group(lines, LOSS_COLLAPSED, NAN, line_no, what, ())
    return None


LOSS_MISSING = "loss_missing"
_MEGATRON_ITERATION = compile_re(
    r"iteration\s+(?P<step>\d+)\s*/\s*\d+\s*\|.*loss scale:\s*(?P<scale>[0-9.eE+-]+)"
)
# Megatron leaves the loss out of an iteration it skipped. In warm-up that is dynamic loss
# scaling finding its scale (from 2**32 down); with the scale at its floor, or long after
# warm-up, it is a run whose steps no longer produce a loss.
_WARMUP_STEPS = 1000
_SCALE_FLOOR = 16.0


def loss_missing(lines: Sequence[str]) -> MatchGroup | None:
    for line_no, line in enumerate(lines, start=1):
        if "loss:" in line.replace("loss scale:", ""):
            continue
        found = _MEGATRON_ITERATION.search(line)
        if found is None:
            continue
        step, scale = int(found["step"]), float(found["scale"])
        if scale <= _SCALE_FLOOR or step >= _WARMUP_STEPS:
            what = f"Iteration {step} printed no loss, with the loss scale at {scale:g}"
            return _group(lines, LOSS_MISSING, NAN, line_no, what, ())
    return None


GRADIENTS_EXPLODED = "gradients_exploded"
_GRAD_NORM_VALUE = compile_re(
    r"(?i)grad[ _]?norm['\"]?\s*[:=]\s*['\"]?(?P<value>\d+(?:\.\d+)?(?:e\+?\d+)?)"
)
# Clipping keeps a healthy run's gradient norm in the single or low double digits; a norm a
# million times larger is a run whose weights are already blowing up.
EXPLODED_GRAD_NORM = 1e6


def gradients_exploded(lines: Sequence[str]) -> MatchGroup | None:
    for line_no, line in enumerate(lines, start=1):
        found = _GRAD_NORM_VALUE.search(line)
        if found is not None and float(found["value"]) >= EXPLODED_GRAD_NORM:
            what = f"The gradient norm reached {float(found['value']):.3g}"
            return _group(lines, GRADIENTS_EXPLODED, NAN, line_no, what, ())
    return None


DUPLICATE_RANK = "duplicate_rank_at_init"
_RANK_INIT = compile_re(
    r"(?i)initializing (?:ddp|distributed): GLOBAL_RANK: (?P<rank>\d{1,6}), MEMBER: \d+/\d+"
)
_DUPLICATE = classify(
    Kind.CRASH,
    Category.INTERCONNECT_NETWORK,
    Attribution.SYSTEM_SOFTWARE,
    Role.INITIATING,
    False,
    Severity.ERROR,
)


def duplicate_rank_at_init(lines: Sequence[str]) -> MatchGroup | None:
    """Two processes initialising as the same global rank: the job never forms its group."""
    seen: set[str] = set()
    for line_no, line in enumerate(lines, start=1):
        found = _RANK_INIT.search(line)
        if found is None:
            continue
        if found["rank"] in seen:
            what = f"Global rank {found['rank']} was initialised twice"
            return _group(lines, DUPLICATE_RANK, _DUPLICATE, line_no, what, ())
        seen.add(found["rank"])
    return None


RAY_NODE_DIED = "ray_node_died"
# Ray's report that an actor or task was lost with its node (the node itself died: its raylet
# crashed, the host went down), in the words of its releases.
_RAY_NODE_DIED = compile_re(
    r"(?:actor is dead|actor died) because its node has died"
    r"|Task failed (?:due to the node[^\n]{0,60}dying|because the node it was running on is dead)"
)
# The node, where Ray's line names it, or the ``ip:`` field of the actor's record above it.
_RAY_NODE_IP = compile_re(r"Node IP:? (?P<host>[0-9A-Fa-f][\w.:-]{0,253}[\w])")
_RAY_ACTOR_IP = compile_re(r"^\s*ip: (?P<host>[0-9A-Fa-f][\w.:-]{0,253}[\w])\s*$")
# How far back an actor's record starts (its class, id, pid, namespace and ip fields).
_RAY_RECORD_LINES = 10
# A node Ray's autoscaler or the cloud ended on purpose (a drain, a preemption) is no fault.
_RAY_NODE_EXPECTED = compile_re(r"terminated expectedly|(?i:preempted)")


def ray_node_died(lines: Sequence[str]) -> MatchGroup | None:
    """An actor or task lost because its node died: that node is at fault, named by Ray's
    line or by the ``ip:`` field of the actor's record printed just before it."""
    for line_no, line in enumerate(lines, start=1):
        if _RAY_NODE_DIED.search(line) is None:
            continue
        # Ray's next line says how the node went, when it knows.
        said = lines[line_no - 1 : line_no + 2]
        if any(_RAY_NODE_EXPECTED.search(text) is not None for text in said):
            what = "Ray lost an actor or task with a node that was ended on purpose"
            return _group(lines, RAY_NODE_DIED, SCHED, line_no, what, ())
        host = _ray_node_ip(lines, line_no)
        what = "An actor or task was lost because its node died"
        group = _group(lines, RAY_NODE_DIED, NODE_FAILED, line_no, what, ())
        return dataclasses.replace(group, hosts=(host,) if host else ())
    return None


def _ray_node_ip(lines: Sequence[str], line_no: int) -> str | None:
    named = _RAY_NODE_IP.search(lines[line_no - 1])
    if named is not None:
        return named["host"]
    for number in range(line_no - 1, max(0, line_no - 1 - _RAY_RECORD_LINES), -1):
        field = _RAY_ACTOR_IP.search(lines[number - 1])
        if field is not None:
            return field["host"]
    return None
