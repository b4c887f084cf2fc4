"""``manage.py score_diagnosis [DIR]``: how often the advice on a labelled corpus of real log
excerpts agrees with an operator's, as JSON (macro-F1 over categories, action agreement, missed
failures, benign false positives, host recall; per category and per action)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from lab.bench.corpus import (
    CorpusError,
    disagreements,
    judge_cases,
    load_cases,
    score,
)

DEFAULT_CORPUS = Path(settings.BASE_DIR) / "tests" / "fixtures" / "logs"


class Command(BaseCommand):
    help = "Score the diagnosis and the advice on a labelled corpus of log excerpts (JSON)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "corpus",
            nargs="?",
            default=str(DEFAULT_CORPUS),
            help="a directory with excerpts and their expected.json (default: the test corpus)",
        )
        parser.add_argument(
            "--cluster", help="judge with this cluster's policy and signatures, not the defaults"
        )
        parser.add_argument(
            "--disagreements", action="store_true", help="also list the excerpts judged otherwise"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        directory = Path(options["corpus"])
        policy = library = None
        if options["cluster"]:
            from remediation.services import ClusterUnknown, excerpt_settings  # noqa: PLC0415

            try:
                policy, library = excerpt_settings(options["cluster"])
            except ClusterUnknown as exc:
                raise CommandError(str(exc)) from exc
        try:
            judged = judge_cases(directory, load_cases(directory), policy, library)
        except CorpusError as exc:
            raise CommandError(str(exc)) from exc
        result = score(judged)
        if options["disagreements"]:
            result["disagreements"] = disagreements(judged)
        self.stdout.write(json.dumps(result, indent=2))
