"""Rule-table edits proposed by reviewers' corrections.

When reviewers disagree with advice and say what they would have done, the corrections are
grouped by what decided the advice (its signature, or its category when it had none). A group
where most labels chose the same other action becomes a proposal: "stop on signature X: 6 of 6
reviewers chose stop", with the advice behind it and the agreement the cluster would have had
with the rule. Accepting one is a policy change like any other (a second person approves it).

Pure Python: labelled advice in, proposals out.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

# A proposal needs corrections on this many advices, and this share of the group's labels
# choosing the one action: a pattern, not one reviewer's view of one case.
MIN_ADVICE = 3
MIN_SHARE = 0.8


@dataclass(frozen=True)
class LabelledAdvice:
    """One advice and its current labels: ``preferred`` holds each label's action (an
    agreeing label prefers the advised action)."""

    advice_id: int
    key: str  # the rule-table key a rule for it would use: its signature, else its category
    action: str
    preferred: tuple[str, ...]

    @property
    def agreed(self) -> bool:
        return bool(self.preferred) and all(p == self.action for p in self.preferred)


@dataclass(frozen=True)
class RuleProposal:
    key: str
    action: str
    advised: tuple[str, ...]  # what the advice in the group was, most often first
    chose: int  # labels that chose ``action``
    labels: int  # labels on the group's advice
    advice_ids: tuple[int, ...]
    agreement_now: float | None
    agreement_with_rule: float | None

    @property
    def summary(self) -> str:
        return (
            f"{self.action} on {self.key}: {self.chose} of {self.labels} reviewers chose "
            f"{self.action} (advised: {', '.join(self.advised)})"
        )


def propose(advice: Sequence[LabelledAdvice]) -> list[RuleProposal]:
    """The proposals the labels support, the one that would lift the agreement most first."""
    groups: dict[str, list[LabelledAdvice]] = defaultdict(list)
    for item in advice:
        if item.preferred and item.key:
            groups[item.key].append(item)
    proposals = [p for key, group in groups.items() if (p := _proposal(key, group, advice))]
    return sorted(proposals, key=lambda p: (-(p.agreement_with_rule or 0.0), p.key))


def _proposal(
    key: str, group: list[LabelledAdvice], everything: Sequence[LabelledAdvice]
) -> RuleProposal | None:
    choices = Counter(p for item in group for p in item.preferred)
    action, chose = choices.most_common(1)[0]
    labels = sum(choices.values())
    corrected = [item for item in group if any(p != item.action for p in item.preferred)]
    advised = Counter(item.action for item in group)
    if action == advised.most_common(1)[0][0] or len(corrected) < MIN_ADVICE:
        return None
    if chose < MIN_SHARE * labels:
        return None
    return RuleProposal(
        key=key,
        action=action,
        advised=tuple(a for a, _ in advised.most_common()),
        chose=chose,
        labels=labels,
        advice_ids=tuple(sorted(item.advice_id for item in group)),
        agreement_now=_agreement(everything),
        agreement_with_rule=_agreement(everything, key, action),
    )


def _agreement(advice: Iterable[LabelledAdvice], key: str = "", action: str = "") -> float | None:
    """The share of labelled advice every reviewer agreed with; with ``key`` and ``action``,
    as if the advice of that key had been ``action``."""
    verdicts = [
        all(p == action for p in item.preferred) if key and item.key == key else item.agreed
        for item in advice
        if item.preferred
    ]
    return sum(verdicts) / len(verdicts) if verdicts else None
