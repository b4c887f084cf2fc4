"""An excerpt judged as ``manage.py diagnose`` judges it: the diagnosis, attribution and the
default policy's decision, read through one object."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from detection.core.context import DiagnosisContext
from detection.core.diagnosis import diagnose_lines
from detection.core.interruption import Confidence, Interruption
from fleet.core.taxonomy import (
    Action,
)
from remediation.core.attribution import AttemptView
from remediation.core.verdict import Verdict, judge, judge_excerpt

EIGHT_NODES = DiagnosisContext(nodes=tuple(f"node-{i:02d}" for i in range(8)), tasks_per_node=8)


@dataclass(frozen=True)
class Judged:
    """What ``diagnose`` reports of an excerpt: the interruption and the policy's decision."""

    verdict: Verdict

    def __getattr__(self, name: str) -> Any:
        return getattr(self.verdict.interruption, name)

    @property
    def action(self) -> Action:
        return self.verdict.decision.action

    @property
    def implicated_hosts(self) -> tuple[str, ...]:
        return self.verdict.incident.hosts

    @property
    def confidence(self) -> Confidence:
        return self.verdict.confidence

    @property
    def explanation(self) -> str:
        return self.verdict.explanation

    def to_dict(self) -> dict[str, object]:
        return self.verdict.to_dict()


def judged(interruption: Interruption, context: DiagnosisContext | None = None) -> Judged:
    nodes = context.nodes if context else ()
    return Judged(judge(interruption, attempt=AttemptView(nodes=nodes)))


def diagnose(*lines: str, context: DiagnosisContext | None = None) -> Judged:
    return judged(diagnose_lines(list(lines), context), context)


def watchdog(rank: int, seq: int = 1580) -> str:
    return (
        f"[rank{rank}]:[E321 02:07:08.408271257 ProcessGroupNCCL.cpp:607] [Rank {rank}] "
        f"Watchdog caught collective operation timeout: WorkNCCL(SeqNum={seq}, "
        "OpType=ALLREDUCE, NumelIn=466119168, NumelOut=466119168, Timeout(ms)=600000) "
        "ran for 600060 milliseconds before timing out."
    )


def decided(*lines: str) -> dict[str, object]:
    """These lines judged as one excerpt, as ``diagnose --json`` reports it."""
    found, _ = judge_excerpt("\n".join(lines).encode())
    return found.to_dict()
