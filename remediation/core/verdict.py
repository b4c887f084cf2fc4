"""A verdict on one interruption: attribution, then the policy's decision, in one record.

The loop, ``manage.py diagnose`` and the console's Test signals page all decide through here,
so what an operator tries on a pasted log is what the loop would advise.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from detection.core.context import DiagnosisContext
from detection.core.decoding import DecodeReport
from detection.core.diagnosis import diagnose_bytes
from detection.core.interruption import Confidence, Interruption
from detection.core.signatures import SignatureLibrary
from fleet.core.taxonomy import ConfidenceLabel

from .attribution import AttemptView, attribute
from .decisions import Decision, decide
from .incident import History, Incident
from .policy import Policy
from .shape import shape_sentence

# Attribution can only ever raise a hypothesis to supported (the scheduler confirmed a node).
_LABEL_VALUE = {ConfidenceLabel.SUPPORTED: 0.7}


@dataclass(frozen=True)
class Verdict:
    """An interruption, the incident attribution made of it, and the decision on it."""

    interruption: Interruption
    incident: Incident
    decision: Decision
    explanation: str

    @property
    def confidence(self) -> Confidence:
        label = ConfidenceLabel(self.incident.confidence_label)
        found = self.interruption.confidence
        if label is found.label:
            return found
        return replace(found, label=label, value=max(found.value, _LABEL_VALUE.get(label, 0.0)))

    def to_dict(self) -> dict[str, object]:
        """The JSON object ``manage.py diagnose`` prints (DESIGN.md §3)."""
        return {
            "kind": self.interruption.kind.value,
            "category": self.incident.category,
            "attribution": self.incident.attribution,
            "action": self.decision.action.value,
            "implicated_hosts": list(self.incident.hosts),
            "confidence": self.confidence.to_dict(),
            "evidence": [
                {"line": item.line, "text": item.text, "signature": item.signature}
                for item in self.interruption.evidence
            ],
            "explanation": self.explanation,
        }


def judge(
    interruption: Interruption,
    policy: Policy | None = None,
    attempt: AttemptView | None = None,
    history: History | None = None,
    comment: str = "",
) -> Verdict:
    """Attribute the interruption and decide on it under ``policy`` (the defaults without)."""
    attributed = attribute(interruption, attempt)
    decision = decide(policy or Policy(), attributed.incident, history or History(), comment)
    reasons = " ".join(_sentence(reason) for reason in decision.reasons)
    explanation = attributed.explanation
    if interruption.is_failure:
        explanation = f"{explanation} {shape_sentence(attributed.incident)}"
    if reasons:
        explanation = f"{explanation} Decision: {reasons}"
    return Verdict(interruption, attributed.incident, decision, explanation)


def _sentence(reason: str) -> str:
    text = reason.strip()
    text = text[:1].upper() + text[1:]
    return text if text.endswith(".") else text + "."


def judge_excerpt(
    data: bytes,
    context: DiagnosisContext | None = None,
    policy: Policy | None = None,
    library: SignatureLibrary | None = None,
) -> tuple[Verdict, DecodeReport]:
    """A log excerpt's verdict (any bytes), as a fresh workload's first failure: what
    ``manage.py diagnose`` and the Test signals page show."""
    ctx = context or DiagnosisContext()
    interruption, report = diagnose_bytes(data, ctx, library=library)
    return judge(interruption, policy, AttemptView(nodes=ctx.nodes)), report
