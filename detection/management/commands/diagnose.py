"""``manage.py diagnose PATH|-``: what a log excerpt says failed, who is to blame, what to do.

Prints one JSON object (DESIGN.md §3); with ``--jsonl`` reads records ``{"id", "text"}`` and
prints one result per line with its ``id``. Any bytes are accepted: what had to be skipped or
repaired is reported on stderr, never fatal.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, BinaryIO

from django.core.management.base import BaseCommand, CommandError, CommandParser

from detection.core.context import DiagnosisContext
from detection.core.decoding import DecodeReport
from detection.core.diagnosis import diagnose_bytes
from detection.core.signatures import InvalidSignature, SignatureLibrary, build_library

# The end of a log holds the failure; past this size only the last part is read.
MAX_INPUT_BYTES = 512 * 1024 * 1024


class Command(BaseCommand):
    help = "Diagnose a training log excerpt (a file, or - for standard input) and print JSON."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("path", help="a log file, or - to read standard input")
        parser.add_argument("--jsonl", action="store_true", help='records of {"id", "text"}')
        parser.add_argument("--nodes", default="", help="the attempt's nodes in rank order")
        parser.add_argument("--gpus-per-node", type=int, default=8)
        parser.add_argument("--cluster", help="also use this cluster's custom signatures")

    def handle(self, *args: Any, **options: Any) -> None:
        library = self._library(options.get("cluster"))
        nodes = tuple(n for n in options["nodes"].split(",") if n)
        context = DiagnosisContext(nodes=nodes, gpus_per_node=options["gpus_per_node"])
        with self._open(options["path"]) as stream:
            if options["jsonl"]:
                self._records(stream, context, library)
            else:
                self._excerpt(stream, context, library)

    def _open(self, path: str) -> BinaryIO:
        if path == "-":
            # closefd=False: closing our handle must not close the process's standard input.
            return open(sys.stdin.fileno(), "rb", closefd=False)  # noqa: SIM115
        try:
            return Path(path).open("rb")
        except OSError as exc:
            raise CommandError(f"cannot read {path}: {exc.strerror}") from exc

    def _library(self, cluster_name: str | None) -> SignatureLibrary | None:
        # No cluster: the built-in signatures only, and no database needed.
        if not cluster_name:
            return None
        from detection.services import custom_signatures_of  # noqa: PLC0415 - needs the DB

        try:
            return build_library(custom_signatures_of(cluster_name))
        except InvalidSignature as exc:
            raise CommandError(f"cluster {cluster_name}: {exc}") from exc

    def _excerpt(self, stream: BinaryIO, context: DiagnosisContext, library: Any) -> None:
        data, skipped = _read_tail(stream)
        diagnosis, report = diagnose_bytes(data, context, library=library)
        self.stdout.write(json.dumps(diagnosis.to_dict()))
        self._report(report, skipped)

    def _records(self, stream: BinaryIO, context: DiagnosisContext, library: Any) -> None:
        for number, raw in enumerate(stream, start=1):
            if not raw.strip():
                continue
            try:
                record = json.loads(raw)
                text = record["text"]
                if not isinstance(text, str):
                    raise TypeError("text is not a string")
            except (ValueError, KeyError, TypeError) as exc:
                self.stderr.write(f"record {number}: skipped, not a {{id, text}} object ({exc})")
                # A bad record still gets its output line, so none goes silently missing.
                self.stdout.write(json.dumps({"id": None, "record": number, "error": str(exc)}))
                continue
            # Encoded back, so both modes go through the same byte-level decoding.
            diagnosis, _ = diagnose_bytes(text.encode("utf-8", "replace"), context, library=library)
            self.stdout.write(json.dumps({"id": record.get("id"), **diagnosis.to_dict()}))

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


def _read_tail(stream: BinaryIO) -> tuple[bytes, int]:
    """The whole input, or its last MAX_INPUT_BYTES and how many bytes came before them."""
    chunks: list[bytes] = []
    kept = skipped = 0
    while chunk := stream.read(8 * 1024 * 1024):
        chunks.append(chunk)
        kept += len(chunk)
        # Whole chunks drop off the front, so memory stays near the cap however long the input.
        while kept - len(chunks[0]) >= MAX_INPUT_BYTES:
            skipped += len(chunks[0])
            kept -= len(chunks.pop(0))
    return b"".join(chunks), skipped
