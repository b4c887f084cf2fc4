"""Built-in signatures of what a training run reports of itself: numerical divergence and
straggler reports."""

from __future__ import annotations

from detection.core.signatures.entries import NAN, A, C, K, R, S, sig
from detection.core.signatures.model import classify
from detection.core.signatures.refiners import flood, refine_overflow, refine_ranks

NUMERICAL = (
    sig(
        "loss_scale_at_minimum",
        r"Current loss scale already at minimum|Loss scale reached minimum"
        r"|minimum loss scale reached",
        classify(K.CRASH, C.NUMERICAL_DIVERGENCE, A.APPLICATION, R.INITIATING, False, S.CRITICAL),
        "fp16 loss scaling cannot go lower: the gradients keep overflowing.",
    ),
    sig(
        "deepspeed_overflow_min_scale",
        # ZeRO's line names the rank; the fused fp16 optimizer's (Megatron-DeepSpeed) does not.
        r"(?:OVERFLOW! Rank (?P<rank>\d{1,6}) |Overflow detected\. )Skipping step\. "
        r"Attempted loss scale: (?P<scale>[0-9.eE+-]{1,30})",
        NAN,
        "DeepSpeed keeps skipping steps with the loss scale near its floor (skips at higher "
        "scales are dynamic loss scaling doing its job).",
        refine=refine_overflow,
    ),
    sig(
        "loss_scale_falling",
        r"(?i)overflow detected, setting loss scale to:? (?P<scale>[0-9.eE+-]{1,30})",
        NAN,
        "fairseq keeps halving the loss scale on overflow (halvings from thousands are dynamic "
        "loss scaling at work; a scale this low is a run that overflows step after step).",
        refine=refine_overflow,
    ),
    sig(
        "rerun_correct_result",
        r"unexpected result is reproducible on a different GPU, therefore it was likely correct"
        r"|Correct result \(but possible Application error\)",
        NAN,
        "Megatron's re-run check: the unexpected result (NaN, spike) is reproducible on another "
        "GPU, so the model itself diverges.",
        refine=flood,
    ),
    sig(
        "rerun_unexpected_result",
        r"Unexpected result \S{1,120} on rank \d+ at iteration #\d+",
        classify(K.CRASH, C.NUMERICAL_DIVERGENCE, A.NONE, R.CASCADE, False, S.WARNING),
        "Megatron's re-run check saw an unexpected result and re-runs the step to tell a "
        "faulty GPU from a diverging model.",
        refine=flood,
    ),
    sig(
        "loss_nan",
        r"(?i)loss\w*['\"]?\s*[:=]?\s*['\"]?[-+]?(?:nan|inf)(?:inity)?\b"
        r"|loss is (?:NaN|Inf)\b",
        NAN,
        "The loss is NaN or Inf.",
        refine=flood,
    ),
    sig(
        "grad_norm_nan",
        r"(?i)grad[ _]norm['\"]?\s*[:=]\s*['\"]?[-+]?(?:nan|inf)\b",
        NAN,
        "The gradient norm is NaN or Inf.",
        refine=flood,
    ),
    sig(
        "nan_detected",
        r"(?i)found NaN in|Unexpected result nan|NaN or Inf found in input tensor"
        r"|Model diverged with loss = NaN|number of nan iterations:\s*[1-9]"
        r"|detected (?:a )?(?:NaN|Inf) (?:in|loss)"
        r"|gradients at all steps are invalid"
        # transformers' underflow/overflow detector; autograd's anomaly mode.
        r"|Detected inf/nan during batch_number"
        r"|returned nan values in its \d+(?:st|nd|rd|th) output"
        # A run's summary or metrics check naming a loss among the non-finite metrics.
        r"|(?:NaN|Inf)(?:/(?:NaN|Inf))? (?:values? )?(?:was |were )?detected in "
        r"(?:the )?(?:metrics?[^\n]*loss|[\w.]{0,40}loss)",
        NAN,
        "A NaN check fired.",
        refine=flood,
    ),
)


STRAGGLERS = (
    sig(
        "straggler_warning",
        r"STRAGGLER DETECTION WARNING: [^\n]{0,200}Affected ranks: \[(?P<ranks>[\d, ]{1,1000})"
        r"|^\s*(?:COMPUTE|INPUT|H2D|COMM)_STRAGGLER\s*$",
        classify(K.STRAGGLER, C.STRAGGLER, A.HARDWARE, R.INITIATING, True, S.ERROR),
        "A straggler detector (NVRx, Megatron, TraceML) names slow ranks.",
        refine=refine_ranks,
    ),
)
