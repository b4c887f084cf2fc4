"""Signature matching throughput: the signature library against ``grep -E`` on the same file.

The file is realistic output of the simulated cluster (progress lines, banners, warnings and the
failure text of its fault mix), written to a temporary directory; past ``GENUINE_MB`` it repeats
what was generated. Both readers run pinned to one core, in the same run: the library reads the
file in blocks and scans them in chunks of whole lines of ``CHUNK_BYTES`` (about what detection
scans in a batch), decoding only the lines a signature may match; grep counts the lines that
match any signature's pattern, translated to POSIX ERE.

The translation is mechanical (``to_ere``): RE2's ``(?:…)`` and ``(?P<name>…)`` become plain
groups, ``\\d`` ``[0-9]``, ``\\w`` ``[[:alnum:]_]``, ``\\s`` ``[[:space:]]`` (``\\S`` their
negation), case-insensitive parts spell each letter as ``[aA]``, lazy repeats become greedy ones
(the same lines match), and ``[^\\n]`` is ``.`` since grep reads line by line. The upper bounds
of repeats (``{0,200}``) are dropped for the timed run: they only cap work in backtracking
engines, and they make GNU grep's DFA explode (grep with them kept is timed on a sample too).
grep runs with ``LC_ALL=C``, bytes like RE2's ASCII classes. As a check, the number of lines grep
counts is compared with the number of lines RE2 finds with the original patterns.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from re import _constants as sre  # type: ignore[attr-defined]
from re import _parser  # type: ignore[attr-defined]
from typing import Any

from detection.core.signatures import SignatureLibrary, default_library
from detection.core.signatures.model import compile_re
from lab.simulator import SimulatedCluster, SimulationConfig

from .progress_bar import Tick

START = datetime(2026, 1, 5, 8, 0, tzinfo=UTC)
# About what one detection scan hands the library at a time (some 10,000 lines).
CHUNK_BYTES = 2 << 20
# Big enough that reading costs little beside scanning.
BLOCK_BYTES = 4 << 20
# Past this the simulator's own time would dominate; repeating its output is as realistic.
GENUINE_MB = 64
ERE_SPECIAL = set(".[]()*+?{}|^$\\")
CATEGORIES = {
    sre.CATEGORY_DIGIT: ("0-9", False),
    sre.CATEGORY_NOT_DIGIT: ("0-9", True),
    sre.CATEGORY_WORD: ("[:alnum:]_", False),
    sre.CATEGORY_NOT_WORD: ("[:alnum:]_", True),
    sre.CATEGORY_SPACE: ("[:space:]", False),
    sre.CATEGORY_NOT_SPACE: ("[:space:]", True),
}
ANCHORS = {
    sre.AT_BEGINNING: "^",
    sre.AT_BEGINNING_STRING: "^",
    sre.AT_END: "$",
    sre.AT_END_STRING: "$",
    # \b and \B are GNU extensions, which grep -E accepts.
    sre.AT_BOUNDARY: r"\b",
    sre.AT_NON_BOUNDARY: r"\B",
}
HOW_DERIVED = (
    "each built-in signature's RE2 pattern translated mechanically to POSIX ERE for GNU grep "
    "(one pattern per signature, grep -E -c -f, LC_ALL=C): (?:...) and (?P<name>...) -> (...), "
    "\\d -> [0-9], \\w -> [[:alnum:]_], \\s -> [[:space:]], \\S -> [^[:space:]], (?i) -> [aA] "
    "per letter, lazy -> greedy repeats, [^\\n] -> ., and upper bounds of repeats dropped "
    "({0,200} -> *, {1,7} -> +: they cap work in backtracking engines, and GNU grep's DFA "
    "blows up with them; grep_exact_bounds_lines_per_s is grep with them kept, on a sample); "
    "patterns_agree compares grep's count of matching lines with RE2's on the same lines"
)


class Untranslatable(ValueError):
    """A construct with no POSIX ERE equivalent (back-references, look-around)."""


def to_ere(pattern: str, *, bounded: bool = True) -> str:
    """The POSIX extended regular expression (GNU grep -E) matching the same lines. With
    ``bounded=False`` a repeat's upper bound is dropped (``{0,200}`` becomes ``*``): the bounds
    only cap work in backtracking engines, and GNU grep's DFA grows with them."""
    parsed = _parser.parse(pattern)
    # A leading (?i) covers the whole pattern; scoped flags are handled group by group.
    ignore = bool(parsed.state.flags & sre.SRE_FLAG_IGNORECASE)
    return _sequence(parsed, _Mode(ignore, bounded))


@dataclass(frozen=True)
class _Mode:
    ignore: bool
    bounded: bool


def _sequence(items: Any, mode: _Mode) -> str:
    return "".join(_item(op, value, mode) for op, value in items)


def _item(op: Any, value: Any, mode: _Mode) -> str:
    ignore = mode.ignore
    if op is sre.LITERAL:
        return _literal(chr(value), ignore)
    if op is sre.NOT_LITERAL:
        return "." if value == ord("\n") else _bracket([(sre.LITERAL, value)], ignore, True)
    if op is sre.ANY:
        return "."
    if op is sre.IN:
        return _bracket(value, ignore, False)
    if op in (sre.MAX_REPEAT, sre.MIN_REPEAT):
        low, high, sub = value
        # Exact counts ({4}) and optional items (?) keep their meaning; only ranges lose the bound.
        if not mode.bounded and high != low and high > 1:
            high = sre.MAXREPEAT
        return _atom(sub, mode) + _quantifier(low, high)
    if op is sre.SUBPATTERN:
        _, add, remove, sub = value
        flag = sre.SRE_FLAG_IGNORECASE
        inner = (ignore or bool(add & flag)) and not remove & flag
        return f"({_sequence(sub, _Mode(inner, mode.bounded))})"
    if op is sre.BRANCH:
        return "(" + "|".join(_sequence(alt, mode) for alt in value[1]) + ")"
    if op is sre.AT and value in ANCHORS:
        return ANCHORS[value]
    raise Untranslatable(f"{op} has no POSIX ERE equivalent")


def _literal(char: str, ignore: bool) -> str:
    if ignore and char.lower() != char.upper():
        return f"[{char.lower()}{char.upper()}]"
    return "\\" + char if char in ERE_SPECIAL else char


def _atom(sub: Any, mode: _Mode) -> str:
    """A repeated item, grouped unless it is one character, one class or a group already."""
    text = _sequence(sub, mode)
    alone = (sre.LITERAL, sre.NOT_LITERAL, sre.ANY, sre.IN, sre.SUBPATTERN, sre.BRANCH)
    return text if len(sub) == 1 and sub[0][0] in alone else f"({text})"


def _quantifier(low: int, high: int) -> str:
    if high == sre.MAXREPEAT:
        return {0: "*", 1: "+"}.get(low, f"{{{low},}}")
    if (low, high) == (0, 1):
        return "?"
    return f"{{{low}}}" if low == high else f"{{{low},{high}}}"


def _bracket(items: Sequence[Any], ignore: bool, negate: bool) -> str:
    """A bracket expression; a lone negated class (``\\S``) negates the bracket instead."""
    chars: set[str] = set()
    parts: list[str] = []
    for op, value in items:
        if op is sre.NEGATE:
            negate = True
        elif op is sre.LITERAL:
            chars.update(_cases(chr(value), ignore))
        elif op is sre.RANGE:
            parts.extend(_ranges(chr(value[0]), chr(value[1]), ignore))
        elif op is sre.CATEGORY:
            text, negated = CATEGORIES[value]
            # POSIX has no class subtraction: [^\S...] cannot be written.
            if negated and len(items) != 1:
                raise Untranslatable("a negated class inside a bracket")
            negate = negate != negated
            parts.append(text)
        else:
            raise Untranslatable(f"{op} inside a bracket")
    chars.discard("\n")  # grep reads lines: no line holds a newline
    return _assemble(chars, parts, negate)


def _cases(char: str, ignore: bool) -> set[str]:
    return {char.lower(), char.upper()} if ignore and char.lower() != char.upper() else {char}


def _ranges(low: str, high: str, ignore: bool) -> list[str]:
    ranges = [f"{low}-{high}"]
    if ignore and low.isalpha() and high.isalpha() and low.swapcase() != low:
        ranges.append(f"{low.swapcase()}-{high.swapcase()}")
    return ranges


def _assemble(chars: set[str], parts: list[str], negate: bool) -> str:
    # A bracket holding only ^ would read as the start of a negation.
    if not negate and not parts and chars == {"^"}:
        return "\\^"
    # POSIX: "]" first, "^" anywhere but first, "[" late (so no "[:" forms), "-" last.
    ordered = sorted(chars - {"]", "^", "[", "-"})
    body = (
        ("]" if "]" in chars else "")
        + "".join(parts)
        + "".join(ordered)
        + ("^" if "^" in chars else "")
        + ("[" if "[" in chars else "")
        + ("-" if "-" in chars else "")
    )
    if not negate and body.startswith("^"):  # only "^", "[" and "-" are in it
        body = body[1] + "^" + body[2:]
    return f"[{'^' if negate else ''}{body}]"


# --- the file and the two readers -------------------------------------------------------------


def generate_log(path: Path, megabytes: float, seed: int, tick: Tick) -> int:
    """Write about ``megabytes`` of the simulator's output (its default, realistic fault rate);
    returns the number of lines."""
    target = int(megabytes * 1e6)
    genuine = min(target, GENUINE_MB * 1_000_000)
    # A large cluster at the default fault rate: mostly healthy output, as on a real site.
    simulator = SimulatedCluster(
        SimulationConfig(seed=seed, nodes=512, workloads=128, start_time=START)
    )
    size = lines = 0
    with path.open("w", encoding="utf-8") as out:
        while size < genuine:
            # One log line per file line: grep and the library must count the same lines.
            texts = [line.text.replace("\n", " ") for line in simulator.advance(600.0)]
            chunk = "\n".join(texts) + "\n" if texts else ""
            out.write(chunk)
            size += len(chunk.encode("utf-8"))
            lines += len(texts)
            tick(0.7 * min(1.0, size / target))
    return _tile(path, size, lines, target)


def _tile(path: Path, size: int, lines: int, target: int) -> int:
    """Repeat the generated output until the file holds ``target`` bytes."""
    if size >= target:
        return lines
    original = path.read_bytes()
    total = lines
    with path.open("ab") as out:
        while size < target:
            out.write(original)
            size += len(original)
            total += lines
    return total


def blocks_of_lines(path: Path) -> Iterator[bytes]:
    """The file in blocks of whole lines."""
    with path.open("rb") as handle:
        rest = b""
        while block := handle.read(BLOCK_BYTES):
            block = rest + block
            cut = block.rfind(b"\n") + 1
            # The partial last line waits for the next block, so no line is split.
            rest = block[cut:]
            yield block[:cut]
        if rest:
            yield rest + b"\n"


def scan_file(path: Path, library: SignatureLibrary) -> int:
    """Read the file and scan it with the library in chunks of whole lines, undecoded (only
    the lines a signature may match are decoded); returns the findings."""
    findings = 0
    for block in blocks_of_lines(path):
        for chunk in chunks_of_lines(block):
            findings += len(library.scan_block(chunk).groups)
    return findings


def chunks_of_lines(block: bytes) -> Iterator[bytes]:
    """The block in chunks of about ``CHUNK_BYTES``, each ending at a line's end."""
    start = 0
    while start < len(block):
        cut = block.rfind(b"\n", start, start + CHUNK_BYTES) + 1
        if cut <= start:  # a line longer than a chunk: it goes whole
            cut = block.find(b"\n", start + CHUNK_BYTES) + 1 or len(block)
        yield block[start:cut]
        start = cut


def re2_matching_lines(path: Path, library: SignatureLibrary) -> int:
    """Lines where one of the library's own patterns matches, line by line as grep reads."""
    union = compile_re("|".join(f"(?:{s.pattern})" for s in library.signatures), never_capture=True)
    return sum(
        1
        for block in blocks_of_lines(path)
        for line in block.split(b"\n")[:-1]
        if union.find(line) >= 0
    )


def grep_count(path: Path, patterns: Sequence[str], directory: Path) -> tuple[int, float]:
    """Lines matching any of ``patterns`` and grep's wall seconds."""
    listing = directory / "patterns.ere"
    listing.write_text("\n".join(patterns) + "\n")
    started = time.perf_counter()
    result = subprocess.run(  # noqa: S603 - a fixed argument list, no shell
        ["grep", "-E", "-c", "-f", str(listing), str(path)],  # noqa: S607 - grep from PATH
        capture_output=True,
        text=True,
        env={**os.environ, "LC_ALL": "C"},
        check=False,
    )
    seconds = time.perf_counter() - started
    # grep exits 1 when nothing matched; only 2 and up are errors.
    if result.returncode not in (0, 1):
        raise RuntimeError(f"grep failed: {result.stderr.strip()}")
    return int(result.stdout.strip() or 0), seconds


def grep_version() -> str:
    result = subprocess.run(  # noqa: S603
        ["grep", "--version"],  # noqa: S607
        capture_output=True,
        text=True,
        check=False,
    )
    return result.stdout.splitlines()[0] if result.stdout else "unknown"


@contextmanager
def one_core() -> Iterator[int | None]:
    """Pin this thread (and the processes it starts) to one core, where the OS allows it."""
    try:
        original = os.sched_getaffinity(0)
    except (AttributeError, OSError):
        # Not every OS can pin a thread: run unpinned and report no CPU.
        yield None
        return
    cpu = max(original)
    os.sched_setaffinity(0, {cpu})
    try:
        yield cpu
    finally:
        os.sched_setaffinity(0, original)


def head_of(path: Path, megabytes: float, target: Path) -> int:
    """Copy the first ``megabytes`` (whole lines) of ``path``; returns the lines copied."""
    with path.open("rb") as handle:
        data = handle.read(int(megabytes * 1e6))
    data = data[: data.rfind(b"\n") + 1]
    target.write_bytes(data)
    return data.count(b"\n")


def measure_signatures(
    megabytes: float, seed: int, repeats: int, exact_sample_mb: float, tick: Tick
) -> dict[str, Any]:
    """Lines per second of the library and of grep on one generated file, and their ratio."""
    library = default_library()
    relaxed, exact, skipped = _translate(library)
    with tempfile.TemporaryDirectory(prefix="rc-bench-") as name:
        directory = Path(name)
        log, sample = directory / "bench.log", directory / "head.log"
        lines = generate_log(log, megabytes, seed, tick)
        sample_lines = head_of(log, exact_sample_mb, sample)
        scan_times, grep_times = [], []
        with one_core() as cpu:
            for n in range(repeats):
                started = time.perf_counter()
                findings = scan_file(log, library)
                scan_times.append(time.perf_counter() - started)
                grep_lines, seconds = grep_count(log, relaxed, directory)
                grep_times.append(seconds)
                tick(0.7 + 0.2 * (n + 1) / repeats)
            # Exact bounds on the sample only: on the whole file grep's DFA can take minutes.
            _, exact_seconds = grep_count(sample, exact, directory)
        # A correctness check, so outside the pinned, timed block.
        re2_lines = re2_matching_lines(log, library)
        size = log.stat().st_size
    tick(1.0)
    # Medians, so one slow repeat (a cold cache, a busy neighbour) does not skew the figures.
    scan_s, grep_s = statistics.median(scan_times), statistics.median(grep_times)
    return {
        "lines_per_s": round(lines / scan_s),
        "grep_lines_per_s": round(lines / grep_s),
        "ratio_vs_grep": round(grep_s / scan_s, 3),
        "lines": lines,
        "file_mb": round(size / 1e6, 1),
        "generated_mb": round(min(size, GENUINE_MB * 1_000_000) / 1e6, 1),
        "matching_line_share": round(re2_lines / lines, 5) if lines else None,
        "chunk_bytes": CHUNK_BYTES,
        "seconds": round(scan_s, 3),
        "grep_seconds": round(grep_s, 3),
        "repeats": repeats,
        "pinned_cpu": cpu,
        "findings": findings,
        "grep_matching_lines": grep_lines,
        "re2_matching_lines": re2_lines,
        "patterns_agree": grep_lines == re2_lines,
        "grep_exact_bounds_lines_per_s": round(sample_lines / exact_seconds),
        "grep_exact_bounds_sample_mb": exact_sample_mb,
        "grep": grep_version(),
        "grep_patterns": HOW_DERIVED,
        "patterns": len(relaxed),
        "untranslated": skipped,
    }


def _translate(library: SignatureLibrary) -> tuple[list[str], list[str], list[str]]:
    relaxed, exact, skipped = [], [], []
    for signature in library.signatures:
        try:
            relaxed.append(to_ere(signature.pattern, bounded=False))
            exact.append(to_ere(signature.pattern))
        except Untranslatable:
            skipped.append(signature.name)
    return relaxed, exact, skipped
