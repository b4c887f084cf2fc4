"""Slurm hostlist expressions expand to the node names they stand for."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from remediation.controller import expand_hostlist
from remediation.controller.hostlist import MAX_HOSTS


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("node[1-3,5]", ("node1", "node2", "node3", "node5")),
        ("node[1,3-4]", ("node1", "node3", "node4")),
        ("node2", ("node2",)),
        ("node1,node3", ("node1", "node3")),
        ("gpu[08-10]", ("gpu08", "gpu09", "gpu10")),
        ("gpu[1-2]-ib", ("gpu1-ib", "gpu2-ib")),
        ("rack[1-2]-n[01-02]", ("rack1-n01", "rack1-n02", "rack2-n01", "rack2-n02")),
        ("a[1-2],b[7],c", ("a1", "a2", "b7", "c")),
        ("", ()),
        ("(null)", ()),
        ("  node[1-2]\n", ("node1", "node2")),
    ],
)
def test_it_expands_slurm_hostlists(text: str, names: tuple[str, ...]) -> None:
    assert expand_hostlist(text) == names


@pytest.mark.parametrize(
    "text",
    ["node[1-3", "node1-3]", "node[3-1]", "node[]", "node[a-b]", "n[[1]]", "a,,b", "n[1-2-3]"],
)
def test_malformed_hostlists_raise_value_error(text: str) -> None:
    with pytest.raises(ValueError):
        expand_hostlist(text)


def test_an_absurd_range_is_refused_rather_than_expanded() -> None:
    with pytest.raises(ValueError, match="more than"):
        expand_hostlist(f"node[0-{MAX_HOSTS * 10}]")
    with pytest.raises(ValueError, match="more than"):
        expand_hostlist("a[0-999]b[0-999]")


prefixes = st.from_regex(r"[a-z][a-z0-9-]{0,8}[a-z-]", fullmatch=True)
number_sets = st.sets(st.integers(min_value=0, max_value=300), min_size=1, max_size=40)


def compress(numbers: set[int], width: int) -> str:
    """A reference compressor: runs of consecutive numbers become lo-hi."""
    ordered, runs = sorted(numbers), []
    start = previous = ordered[0]
    for n in [*ordered[1:], None]:
        if n is not None and n == previous + 1:
            previous = n
            continue
        runs.append(f"{start:0{width}d}" + ("" if start == previous else f"-{previous:0{width}d}"))
        if n is not None:
            start = previous = n
    return ",".join(runs)


@given(prefixes, number_sets, st.integers(min_value=1, max_value=4))
def test_a_compressed_hostlist_expands_to_every_name_in_order(
    prefix: str, numbers: set[int], width: int
) -> None:
    text = f"{prefix}[{compress(numbers, width)}]"

    assert expand_hostlist(text) == tuple(f"{prefix}{n:0{width}d}" for n in sorted(numbers))


@given(st.lists(st.tuples(prefixes, number_sets), min_size=1, max_size=4))
def test_comma_separated_hostlists_expand_entry_by_entry(
    groups: list[tuple[str, set[int]]],
) -> None:
    text = ",".join(f"{prefix}[{compress(numbers, 1)}]" for prefix, numbers in groups)

    expected = [f"{prefix}{n}" for prefix, numbers in groups for n in sorted(numbers)]
    assert expand_hostlist(text) == tuple(expected)


@given(st.lists(st.from_regex(r"[a-z][a-z0-9.-]{0,12}", fullmatch=True), min_size=1))
def test_plain_names_expand_to_themselves(names: list[str]) -> None:
    assert expand_hostlist(",".join(names)) == tuple(names)


@given(st.text(max_size=40))
def test_any_text_expands_or_raises_value_error(text: str) -> None:
    try:
        names = expand_hostlist(text)
    except ValueError:
        return
    assert all(isinstance(name, str) for name in names)


@pytest.mark.parametrize(
    "text",
    [
        # About 1.2 KB each: many full ranges in one bracket, or many entries of one range.
        "n[" + ",".join(["0-99998"] * 150) + "]",
        ",".join([f"r{i}[0-99998]" for i in range(100)]),
        "a[0-9]" * 200,
    ],
)
def test_a_short_hostile_hostlist_is_refused_before_it_costs_memory(text: str) -> None:
    import tracemalloc

    assert len(text) < 1500
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match="more than"):
            expand_hostlist(text)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # The whole expression is counted before a single name is built.
    assert peak < 1024 * 1024
