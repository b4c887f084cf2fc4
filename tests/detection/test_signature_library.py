"""The signature library's safety and extension: no false positives on ordinary lines, hostile
input, custom signatures, and the built-in set itself.

Plain library tests (no database). Lines here are written in the documented formats of the
tools that print them; the collected real logs are exercised in ``test_real_logs.py``.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from detection.core.constants import MAX_LINE_CHARS, Role, Severity
from detection.core.signatures import (
    BUILTIN_SIGNATURES,
    InvalidSignature,
    MatchGroup,
    ScanResult,
    Signature,
    build_library,
    compile_signature,
    default_library,
    scan_lines,
)
from fleet.core.taxonomy import Category, Kind


def scan(*lines: str) -> ScanResult:
    return scan_lines(list(lines))


def only(result: ScanResult) -> MatchGroup:
    assert len(result.groups) == 1, result.groups
    return result.groups[0]


def names(result: ScanResult) -> list[str]:
    return [finding.signature for finding in result.groups]


# --- no false positives ---------------------------------------------------------------------

ORDINARY = [
    (
        " iteration      100/  500000 | consumed samples:        12800 | elapsed time per "
        "iteration (ms): 1234.5 | learning rate: 1.500E-04 | global batch size:   128 | "
        "lm loss: 2.345678E+00 | loss scale: 65536.0 | grad norm: 1.234 | number of "
        "skipped iterations:   0 | number of nan iterations:   0 |"
    ),
    (
        "[2024-05-01 10:00:00,000] [INFO] [logging.py:96:log_dist] [Rank 0] step=100, "
        "skipped=0, lr=[0.0001], mom=[(0.9, 0.95)]"
    ),
    "steps: 100 loss: 2.3051 iter time (s): 1.234 samples/sec: 103.7",
    "{'loss': 2.3051, 'grad_norm': 1.25, 'learning_rate': 4.9e-05, 'epoch': 0.12}",
    (
        "{'train_runtime': 1234.5, 'train_samples_per_second': 10.2, 'train_loss': 1.93, "
        "'epoch': 3.0}"
    ),
    (
        "Epoch 0:   6%|██  | 32040/500150 [6:28:43<94:39:17,  1.37it/s, loss=2.6, "
        "v_num=95nc, reduced_train_loss=2.590]"
    ),
    "node-07:12345:12399 [3] NCCL INFO Channel 00/0 : 3[3] -> 4[4] via P2P/CUMEM",
    (
        "node-07:12345:12399 [3] NCCL INFO comm 0x55f7096ee250 rank 3 nranks 8 cudaDev 3 "
        "nvmlDev 3 busId e3000 commId 0x5683b92c7c90bf77 - Init COMPLETE"
    ),
    "node-07:12345:12399 [3] NCCL INFO NCCL_SOCKET_IFNAME set by environment to ib0",
    (
        "/opt/conda/lib/python3.10/site-packages/torch/nn/modules/module.py:1879: "
        "UserWarning: Positional args are being deprecated, use kwargs instead."
    ),
    (
        "/opt/conda/lib/python3.10/site-packages/transformers/training_args.py:1525: "
        "FutureWarning: `evaluation_strategy` is deprecated"
    ),
    "  warnings.warn(",
    "node-07:12345:12345 [0] misc/ibvwrap.cc:63 NCCL WARN Failed to open libibverbs.so[.1]",
    "node-07:12345:12345 [0] NCCL WARN NCCL_IB_GID_INDEX is deprecated, ignoring",
    (
        "W1010 11:39:41.458000 140602427192448 torch/distributed/run.py:757] Setting "
        "OMP_NUM_THREADS environment variable for each process to be 1 in default"
    ),
    "saving checkpoint at iteration    1000 to /checkpoints/run1",
    "validation loss at iteration 1000 | lm loss value: 2.301 | lm loss PPL: 9.98 |",
]


@pytest.mark.parametrize("line", ORDINARY)
def test_ordinary_lines_are_never_flagged(line: str) -> None:
    assert scan(line).groups == ()


def test_known_benign_nccl_warnings_are_counted_but_not_flagged() -> None:
    result = scan("node-07:1:1 [0] misc/ibvwrap.cc:63 NCCL WARN Failed to open libibverbs.so[.1]")
    assert result.groups == ()
    assert result.benign_lines == 1


def test_other_nccl_warnings_are_flagged_as_cascades() -> None:
    finding = only(
        scan(
            "node-07:1:2 [0] proxy.cc:1119 NCCL WARN [Proxy Service 9] Failed to execute "
            "operation Connect from rank 9, retcode 6"
        )
    )
    assert finding.signature == "nccl_warn"
    assert finding.role is Role.CASCADE


integers = st.integers(min_value=0, max_value=10**7)
floats = st.floats(min_value=1e-6, max_value=1e6, allow_nan=False, allow_infinity=False)


@st.composite
def progress_lines(draw: st.DrawFn) -> str:
    """Progress lines of Megatron-LM, DeepSpeed and Hugging Face with random numbers."""
    style = draw(st.sampled_from(["megatron", "deepspeed", "hf", "lightning"]))
    a, b, c = draw(integers), draw(integers), draw(integers)
    x, y, z = draw(floats), draw(floats), draw(floats)
    if style == "megatron":
        return (
            f" iteration {a:8d}/{a + b:8d} | consumed samples: {c:12d} | elapsed time per "
            f"iteration (ms): {x:.1f} | learning rate: {y:.3E} | global batch size: "
            f"{b % 4096:5d} | lm loss: {z:.6E} | loss scale: {2.0 ** (a % 17):.1f} | grad "
            f"norm: {x:.3f} | number of skipped iterations: {b % 10:3d} | number of nan "
            "iterations:   0 |"
        )
    if style == "deepspeed":
        return f"steps: {a} loss: {z:.4f} iter time (s): {x:.3f} samples/sec: {y:.3f}"
    if style == "hf":
        return (
            f"{{'loss': {z:.4f}, 'grad_norm': {x:.4f}, 'learning_rate': {y:.3e},"
            f" 'epoch': {c % 100}.{b % 100}}}"
        )
    return (
        f"Epoch {a % 50}: {b % 100}%| {c}/{a + c + 1} [00:12<01:00, {x:.2f}it/s, "
        f"loss={z:.3f}, v_num={b % 1000}]"
    )


@settings(max_examples=300, deadline=None)
@given(progress_lines())
def test_progress_lines_from_the_grammar_are_never_flagged(line: str) -> None:
    assert scan(line).groups == ()


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(max_size=300), max_size=30))
def test_the_scanner_never_raises_on_arbitrary_text(lines: list[str]) -> None:
    result = scan_lines(lines)
    assert result.lines_scanned == len(lines)
    for finding in result.groups:
        assert 1 <= finding.first_line <= len(lines)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=2000))
def test_the_scanner_never_raises_on_decoded_arbitrary_bytes(data: bytes) -> None:
    lines = data.decode("utf-8", "surrogateescape").split("\n")
    scan_lines(lines)


def test_line_numbers_stay_right_when_a_line_contains_a_newline() -> None:
    result = scan("ok", "two\nparts", "OSError: [Errno 28] No space left on device")
    assert only(result).first_line == 3


# --- hostile input --------------------------------------------------------------------------


def test_a_10_mb_line_is_cut_at_the_cap_before_matching() -> None:
    huge = "A" * (10 * 1024 * 1024) + " OSError: [Errno 28] No space left on device"
    result = scan(
        "before", huge, "RuntimeError: CUDA error: an illegal memory access was encountered"
    )
    assert result.lines_truncated == 1
    # The error sat past the cap, so only the third line is found.
    assert names(result) == ["cuda_illegal_memory_access"]


def test_pathological_inputs_for_backtracking_engines_are_harmless() -> None:
    lines = ["a" * 50_000 + "!", "(" * 30_000, "loss" + " " * 60_000 + "x", 'File "' + "x" * 60_000]
    result = scan(*lines)
    assert result.lines_scanned == 4


def test_every_line_is_capped_at_the_documented_length() -> None:
    line = "x" * (MAX_LINE_CHARS - 30) + " No space left on device"
    assert only(scan(line)).signature == "fs_no_space"
    assert scan("x" * MAX_LINE_CHARS + " No space left on device").groups == ()


# --- custom signatures ----------------------------------------------------------------------


def spec(**overrides: object) -> dict[str, object]:
    base: dict[str, object] = {
        "name": "acme_fabric_down",
        "pattern": r"fabricd: link (?P<host>[\w.-]+) down",
        "kind": "crash",
        "category": "interconnect_network",
        "attribution": "interconnect",
        "role": "initiating",
        "implicates_node": True,
    }
    base.update(overrides)
    return base


def test_a_valid_custom_signature_compiles_and_is_used() -> None:
    signature = compile_signature(spec())
    assert (signature.kind, signature.category, signature.role) == (
        Kind.CRASH,
        Category.INTERCONNECT_NETWORK,
        Role.INITIATING,
    )
    assert signature.severity is Severity.ERROR
    assert not signature.builtin
    library = build_library([spec()])
    finding = only(library.scan(["fabricd: link node-12 down"]))
    assert finding.signature == "acme_fabric_down"
    assert finding.hosts == ("node-12",)


def test_custom_signatures_take_precedence_and_can_silence_a_builtin() -> None:
    silence = spec(
        name="acme_quiet_nccl_warn",
        pattern=r"NCCL WARN Acme plugin",
        kind="none",
        category="benign",
        attribution="none",
        role="context",
        implicates_node=False,
    )
    library = build_library([silence])
    result = library.scan(["node-1:1:1 [0] NCCL WARN Acme plugin v2 loaded"])
    assert result.groups == ()
    assert result.benign_lines == 1


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        ({"pattern": ""}, "non-empty"),
        ({"pattern": "   "}, "non-empty"),
        ({"pattern": 42}, "non-empty"),
        ({"pattern": "([a-z]+"}, "does not compile with RE2: missing )"),
        ({"pattern": r"(a)\1"}, "backreferences are not supported"),
        ({"pattern": r"(?P<x>a)(?P=x)"}, "backreferences are not supported"),
        ({"pattern": r"error(?=!)"}, "lookahead/lookbehind"),
        ({"pattern": r"(?<!no )error"}, "lookahead/lookbehind"),
        ({"pattern": r"x*"}, "matches the empty string"),
        ({"pattern": r"(?:foo)?"}, "matches the empty string"),
        ({"pattern": r"loss"}, "ordinary progress line"),
        ({"pattern": r"(?:\w{100}[^x]{100}){5}q"}, "too complex"),
        ({"category": "gpu"}, "unknown category 'gpu'"),
        ({"kind": "explode"}, "unknown kind 'explode'"),
        ({"attribution": "gremlins"}, "unknown attribution 'gremlins'"),
        ({"role": "root"}, "unknown role 'root'"),
        ({"severity": "meh"}, "unknown severity 'meh'"),
        ({"implicates_node": "yes"}, "'implicates_node' must be true or false"),
        ({"name": "Bad Name!"}, "'name' must be"),
        ({"name": ""}, "'name' must be"),
        ({"colour": "red"}, "unknown field(s): colour"),
        ({"category": "benign", "role": "initiating"}, "must have role 'context'"),
    ],
)
def test_invalid_custom_signatures_are_refused_with_a_reason(
    overrides: dict[str, object], reason: str
) -> None:
    with pytest.raises(InvalidSignature) as refused:
        compile_signature(spec(**overrides))
    assert reason in refused.value.reason


def test_a_spec_missing_fields_is_refused() -> None:
    incomplete = spec()
    del incomplete["role"]
    with pytest.raises(InvalidSignature, match="missing field"):
        compile_signature(incomplete)


def test_a_custom_signature_cannot_reuse_a_name() -> None:
    with pytest.raises(InvalidSignature, match="already exists"):
        build_library([spec(name="nvrm_xid")])
    with pytest.raises(InvalidSignature, match="already exists"):
        build_library([spec(), spec()])


# --- the library itself ---------------------------------------------------------------------


def test_every_builtin_signature_has_a_unique_name_and_a_description() -> None:
    seen = [signature.name for signature in BUILTIN_SIGNATURES]
    assert len(seen) == len(set(seen))
    assert all(signature.description for signature in BUILTIN_SIGNATURES)


@pytest.mark.parametrize("signature", BUILTIN_SIGNATURES, ids=lambda s: s.name)
def test_no_builtin_signature_matches_the_empty_line(signature: Signature) -> None:
    assert signature.regex.search("") is None


def test_the_default_library_is_compiled_once() -> None:
    assert default_library() is default_library()


def test_scanning_nothing_finds_nothing() -> None:
    result = scan_lines([])
    assert result.groups == () and result.lines_scanned == 0


def findings_of(lines: Sequence[str]) -> list[str]:
    return names(scan_lines(list(lines)))
