"""Scanning undecoded bytes finds what scanning the decoded lines finds, line numbers and all."""

from hypothesis import given, settings
from hypothesis import strategies as st

from detection.core.constants import MAX_LINE_CHARS
from detection.core.signatures import default_library
from lab.simulator import SimulatedCluster, SimulationConfig

LIBRARY = default_library()
FAILURES = [
    "[rank3]: RuntimeError: CUDA error: an illegal memory access was encountered",
    "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.",
    "Traceback (most recent call last):",
    '  File "train.py", line 12, in <module>',
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.15 GiB",
    "gpu-node-007:1234:1299 [2] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC",
]


def decoded_scan(data: bytes):
    body = data[:-1] if data.endswith(b"\n") else data
    return LIBRARY.scan(body.decode("utf-8", "replace").split("\n") if body else [])


def test_simulated_output_scans_the_same_undecoded() -> None:
    simulator = SimulatedCluster(SimulationConfig(seed=2, nodes=32, workloads=16, fault_rate=2.0))
    texts = [line.text.replace("\n", " ") for _ in range(30) for line in simulator.advance(60.0)]
    data = ("\n".join(texts) + "\n").encode()
    result = LIBRARY.scan_block(data)
    assert len(result.groups) > 10
    assert result == decoded_scan(data)


def test_invalid_utf8_and_overlong_lines_scan_as_decoded_lines_do() -> None:
    failure = FAILURES[0].encode()
    for data in (
        b"ok\n" + failure + b" \xff\xfe broken\n" + failure,
        b"x" * (MAX_LINE_CHARS + 10) + b" " + failure + b"\n" + failure + b"\n",
        b"y" * 5000 + b"\n" + failure + b"\n",
        "é 進捗\n".encode() + failure,
        b"",
        b"\n\n",
    ):
        assert LIBRARY.scan_block(data) == decoded_scan(data)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.one_of(st.sampled_from(FAILURES), st.text(max_size=80)).map(str.encode)
        | st.binary(max_size=40),
        max_size=30,
    )
)
def test_any_block_scans_as_its_decoded_lines(lines: list[bytes]) -> None:
    data = b"\n".join(lines)
    assert LIBRARY.scan_block(data) == decoded_scan(data)


@settings(max_examples=80, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.integers(0, 200),
            st.integers(MAX_LINE_CHARS // 2 - 2, MAX_LINE_CHARS // 2 + 2),
            st.integers(MAX_LINE_CHARS - 3, MAX_LINE_CHARS + 3),
        ),
        min_size=1,
        max_size=8,
    ),
    st.integers(0, 7),
)
def test_lines_near_the_cap_are_cut_as_decoded_lines_are(lengths: list[int], failing: int) -> None:
    """Whatever a block's lines' lengths about the cap, it scans as its decoded lines: a line
    just past the cap is cut and counted, one at it is not."""
    failure = FAILURES[1].encode()
    lines = [b"x" * n + (b" " + failure if i == failing else b"") for i, n in enumerate(lengths)]
    data = b"\n".join(lines)
    assert LIBRARY.scan_block(data) == decoded_scan(data)
