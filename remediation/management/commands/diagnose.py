"""``manage.py diagnose PATH|-``: what a log excerpt says failed, who is to blame, what to do.

Prints one JSON object (DESIGN.md §3); with ``--jsonl`` reads records ``{"id", "text"}`` and
prints one result per line with its ``id``. Any bytes are accepted: what had to be skipped or
repaired is reported on stderr, never fatal. The decision is the policy's (the defaults, or the
cluster's with ``--cluster``), as the loop would make it for a workload's first failure.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from django.core.management.base import BaseCommand, CommandError, CommandParser

from detection.core.context import DiagnosisContext
from detection.core.decoding import DecodeReport
from detection.core.signatures import SignatureLibrary
from remediation.core.policy import Policy
from remediation.core.verdict import judge_excerpt

# The end of a log holds the failure; past this size only the last part is read, so memory
# stays bounded (a few times this) whatever the stream's length.
MAX_INPUT_BYTES = 32 * 1024 * 1024
# One --jsonl record; a longer line is reported and skipped without being held.
MAX_RECORD_BYTES = 32 * 1024 * 1024
CHUNK_BYTES = 4 * 1024 * 1024


class Command(BaseCommand):
    help = "Diagnose a training log excerpt (a file, or - for standard input) and print JSON."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("path", help="a log file, or - to read standard input")
        parser.add_argument("--jsonl", action="store_true", help='records of {"id", "text"}')
        parser.add_argument("--nodes", default="", help="the attempt's nodes in rank order")
        parser.add_argument(
            "--tasks-per-node",
            "--gpus-per-node",
            dest="tasks_per_node",
            type=int,
            default=8,
            help="ranks per node, for the rank -> node layout (default 8)",
        )
        parser.add_argument("--host", help="the node whose own log the excerpt is")
        parser.add_argument(
            "--cluster", help="decide with this cluster's policy and custom signatures"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["tasks_per_node"] < 1:
            raise CommandError("--tasks-per-node must be at least 1")
        policy, library = self._cluster(options.get("cluster"))
        nodes = tuple(n.strip() for n in options["nodes"].split(",") if n.strip())
        context = DiagnosisContext(
            nodes=nodes,
            tasks_per_node=options["tasks_per_node"],
            source_host=options.get("host") or None,
        )
        with self._open(options["path"]) as stream:
            if options["jsonl"]:
                self._records(stream, context, policy, library)
            else:
                self._excerpt(stream, context, policy, library)

    def _open(self, path: str) -> BinaryIO:
        if path == "-":
            # closefd=False: closing our handle must not close the process's standard input.
            return open(sys.stdin.fileno(), "rb", closefd=False)  # noqa: SIM115
        try:
            return Path(path).open("rb")
        except OSError as exc:
            raise CommandError(f"cannot read {path}: {exc.strerror}") from exc

    def _cluster(self, cluster_name: str | None) -> tuple[Policy | None, SignatureLibrary | None]:
        # No cluster: the default policy and the built-in signatures, and no database needed.
        if not cluster_name:
            return None, None
        from remediation.services import ClusterUnknown, excerpt_settings  # noqa: PLC0415

        try:
            return excerpt_settings(cluster_name)
        except ClusterUnknown as exc:
            raise CommandError(str(exc)) from exc

    def _excerpt(
        self, stream: BinaryIO, context: DiagnosisContext, policy: Any, library: Any
    ) -> None:
        data, skipped = _read_tail(stream)
        verdict, report = judge_excerpt(data, context, policy, library)
        self.stdout.write(json.dumps(verdict.to_dict()))
        self._report(report, skipped)

    def _records(
        self, stream: BinaryIO, context: DiagnosisContext, policy: Any, library: Any
    ) -> None:
        for number, raw in enumerate(_lines(stream, MAX_RECORD_BYTES), start=1):
            if raw is not None and not raw.strip():
                continue
            try:
                if raw is None:
                    raise ValueError(f"record longer than {MAX_RECORD_BYTES} bytes")
                record = json.loads(raw)
                text = record["text"]
                if not isinstance(text, str):
                    raise TypeError("text is not a string")
            except (ValueError, KeyError, TypeError, RecursionError) as exc:
                problem = "nested too deep" if isinstance(exc, RecursionError) else str(exc)
                self.stderr.write(
                    f"record {number}: skipped, not a {{id, text}} object ({problem})"
                )
                # A bad record still gets its output line, so none goes silently missing.
                self.stdout.write(json.dumps({"id": None, "record": number, "error": problem}))
                continue
            # Encoded back, so both modes go through the same byte-level decoding.
            verdict, _ = judge_excerpt(text.encode("utf-8", "replace"), context, policy, library)
            self.stdout.write(json.dumps({"id": record.get("id"), **verdict.to_dict()}))

    def _report(self, report: DecodeReport, skipped_bytes: int) -> None:
        notes = [
            f"{name.replace('_', ' ')}: {count}"
            for name, count in report.to_dict().items()
            if count and name not in {"bytes_read", "lines"}
        ]
        if skipped_bytes:
            notes.insert(0, f"input over {MAX_INPUT_BYTES} bytes: first {skipped_bytes} skipped")
        if notes:
            self.stderr.write("diagnose: " + "; ".join(notes))


def _lines(stream: BinaryIO, limit: int) -> Iterator[bytes | None]:
    """The stream's lines; ``None`` for one longer than ``limit``, whose rest is read past in
    chunks, never held."""
    while line := stream.readline(limit + 1):
        if len(line) <= limit or line.endswith(b"\n"):
            yield line
            continue
        while (rest := stream.readline(CHUNK_BYTES)) and not rest.endswith(b"\n"):
            pass
        yield None


def _read_tail(stream: BinaryIO) -> tuple[bytes, int]:
    """The whole input, or its last MAX_INPUT_BYTES and how many bytes came before them."""
    chunks: list[bytes] = []
    kept = skipped = 0
    while chunk := stream.read(CHUNK_BYTES):
        chunks.append(chunk)
        kept += len(chunk)
        # Whole chunks drop off the front, so memory stays near the cap however long the input.
        while kept - len(chunks[0]) >= MAX_INPUT_BYTES:
            skipped += len(chunks[0])
            kept -= len(chunks.pop(0))
    return b"".join(chunks), skipped
