"""``manage.py score_diagnosis [DIR]``: how often the advice on a labelled corpus of real log
excerpts agrees with an operator's, as JSON (macro-F1 over categories, action agreement, missed
failures, benign false positives, host recall; per category and per action), for the held-out
part of the corpus first, then the development part and the whole."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from lab.bench.corpus import (
    HELD_OUT,
    CorpusError,
    disagreements,
    judge_cases,
    load_cases,
    score_by_part,
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
            "--disagreements",
            action="store_true",
            help="also list the excerpts judged otherwise (the development part's only, unless "
            "--show-held-out: rules are written against the development part)",
        )
        parser.add_argument(
            "--show-held-out",
            action="store_true",
            help="with --disagreements, list the held-out part's too",
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
        result = score_by_part(judged)
        if options["disagreements"]:
            shown = [j for j in judged if options["show_held_out"] or j.case.part != HELD_OUT]
            result["disagreements"] = disagreements(shown)
        self.stdout.write(json.dumps(result, indent=2))
