"""A rule, what it decides, and the ordered application of a list of them: the first rule whose
condition holds decides, so a list reads as the precedence it is."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from rlpipe.core.failure_rules.evidence import Phase
from rlpipe.core.failures import FailureClass

E = TypeVar("E")


@dataclass(frozen=True)
class Decision:
    """What one rule says when its condition holds (its name is added by :func:`first_match`)."""

    phase: Phase
    message: str
    failure_class: FailureClass | None = None
    evidence: str | None = None  # the finding this is the failure of (not repeated in the details)
    exhausted: FailureClass | None = None  # the class whose retry budget (or the cap) ran out


@dataclass(frozen=True)
class Verdict:
    """What a rule decided: the phase, the failure class (when failed), the line a person reads,
    and the rule's name (recorded with the failure: ``Attempt.failure_rule``, ``Failure.rule``)."""

    phase: Phase
    rule: str | None  # None only for a status no rule made (a test's stand-in cluster)
    message: str
    failure_class: FailureClass | None = None
    evidence: str | None = None
    exhausted: FailureClass | None = None

    def failure(self) -> dict[str, str] | None:
        """The failure as the status answer carries it (``workflow_contract.StageFailure``)."""
        if self.phase != "failed":
            return None
        failure = {"tag": (self.failure_class or FailureClass.PERMANENT).value, "message": self.message}
        if self.exhausted is not None:
            failure["exhausted"] = self.exhausted.value
        if self.rule is not None:
            failure["rule"] = self.rule
        return failure


@dataclass(frozen=True)
class Rule(Generic[E]):
    """A named condition over evidence ``E``: ``decide`` answers None when it does not hold."""

    name: str
    decide: Callable[[E], Decision | None]


def first_match(rules: Sequence[Rule[E]], evidence: E) -> Verdict | None:
    """The verdict of the first rule in ``rules`` that holds for ``evidence``; None if none does."""
    for rule in rules:
        decision = rule.decide(evidence)
        if decision is not None:
            return Verdict(
                decision.phase,
                rule.name,
                decision.message,
                decision.failure_class,
                decision.evidence,
                decision.exhausted,
            )
    return None
