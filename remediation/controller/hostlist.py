"""Expand Slurm hostlist expressions (``node[1-3,5]``, ``rack[1-2]-gpu[01-04]``) into names.

Slurm prints node sets compressed this way in ``nodes``, ``excluded_nodes`` and reasons. Rules
followed: commas outside brackets separate entries; each bracket holds numbers and ``lo-hi``
ranges; a range keeps the width of its lower bound (``[08-10]`` gives ``08 09 10``); several
brackets in one entry multiply out left to right.
"""

from __future__ import annotations

import itertools
import re

MAX_HOSTS = 100_000  # refuse absurd ranges rather than allocate millions of names
EMPTY = frozenset({"", "(null)", "None"})  # how Slurm spells "no nodes"

_RANGE = re.compile(r"([0-9]+)(?:-([0-9]+))?", re.ASCII)


def expand_hostlist(text: str) -> tuple[str, ...]:
    """The node names of ``text`` in order; malformed text raises ``ValueError``."""
    text = text.strip()
    if text in EMPTY:
        return ()
    entries = [_parse_entry(entry) for entry in _split_top_level(text)]
    # Counted before anything is expanded: a short text must not cost a large allocation.
    budget = MAX_HOSTS
    for _, ranges in entries:
        budget -= _count(ranges, budget)
    return tuple(name for literals, ranges in entries for name in _expand(literals, ranges))


def _split_top_level(text: str) -> list[str]:
    """Split on commas that are not inside brackets."""
    entries, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
            # Slurm never nests brackets; refusing beats guessing what was meant.
            if depth > 1:
                raise ValueError(f"nested brackets in hostlist {text!r}")
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise ValueError(f"unbalanced ']' in hostlist {text!r}")
        elif ch == "," and depth == 0:
            entries.append(text[start:i])
            start = i + 1
    if depth:
        raise ValueError(f"unclosed '[' in hostlist {text!r}")
    entries.append(text[start:])
    if any(not entry for entry in entries):
        raise ValueError(f"empty entry in hostlist {text!r}")
    return entries


Ranges = list[list[tuple[str, str]]]


def _parse_entry(entry: str) -> tuple[list[str], Ranges]:
    # "a[1-2]b[3]c" -> literals ["a", "b", "c"] between bracket bodies ["1-2", "3"]
    parts = re.split(r"\[([^\]]*)\]", entry)
    return parts[0::2], [_ranges(body, entry) for body in parts[1::2]]


def _count(ranges: Ranges, budget: int) -> int:
    """How many names an entry stands for; more than ``budget`` raises at once."""
    total = 1
    for body in ranges:
        total *= sum(int(high) - int(low) + 1 for low, high in body)
        if total > budget:
            raise ValueError(f"hostlist expands to more than {MAX_HOSTS} names")
    return total


def _expand(literals: list[str], ranges: Ranges) -> list[str]:
    choices = [
        [str(n).zfill(len(low)) for low, high in body for n in range(int(low), int(high) + 1)]
        for body in ranges
    ]
    names = []
    for combo in itertools.product(*choices):
        pieces = [literals[0]]
        for number, literal in zip(combo, literals[1:], strict=True):
            pieces += [number, literal]
        names.append("".join(pieces))
    return names


def _ranges(body: str, entry: str) -> list[tuple[str, str]]:
    """The ``(low, high)`` ranges of one bracket, as written (their width is kept)."""
    ranges: list[tuple[str, str]] = []
    for item in body.split(","):
        match = _RANGE.fullmatch(item.strip())
        if match is None:
            raise ValueError(f"bad range {item!r} in hostlist entry {entry!r}")
        low, high = match.group(1), match.group(2) or match.group(1)
        if int(high) < int(low):
            raise ValueError(f"descending range {item!r} in hostlist entry {entry!r}")
        ranges.append((low, high))
    return ranges
