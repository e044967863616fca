"""No stage operation asks whether a run is a sweep's or a team's: those questions belong to the run
policies (control/lifecycle/policies.py; the sweep's in control/sweep, the team's limits in
control/lifecycle/team_places.py), which the operations call at named points.

Read from the code's syntax, not by a list of spellings: every condition (``if``, a conditional
expression, a comprehension's filter, an ``assert``, a ``while``) in the modules that used to weave
the features in is walked, and none may read a record's ``sweep`` or ``team``, or the deployment's
``teams()``. Looking a run's team up (its namespace, its cache scope) is not a condition, and stays.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.conftest import ROOT

LIB = ROOT / "shared" / "rlpipe"
WOVEN_BEFORE = [
    *sorted((LIB / "control" / "stage").glob("*.py")),
    LIB / "control" / "operator_ops.py",
    LIB / "control" / "lifecycle" / "promotion.py",
    LIB / "control" / "lifecycle" / "retry_rounds.py",
]
POLICY_WORDS = {"sweep", "team", "teams"}


def _conditions(tree: ast.AST) -> list[ast.expr]:
    found: list[ast.expr] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.If | ast.IfExp | ast.While | ast.Assert):
            found.append(node.test)
        elif isinstance(node, ast.comprehension):
            found.extend(node.ifs)
        elif isinstance(node, ast.match_case) and node.guard is not None:
            found.append(node.guard)
    return found


def policy_questions(source: str) -> list[str]:
    """Each condition of ``source`` that reads a sweep or a team (as ``line: text``)."""
    asked = []
    for test in _conditions(ast.parse(source)):
        names = {n.attr for n in ast.walk(test) if isinstance(n, ast.Attribute)}
        names |= {n.id for n in ast.walk(test) if isinstance(n, ast.Name)}
        if names & POLICY_WORDS:
            asked.append(f"{test.lineno}: {ast.unparse(test)}")
    return asked


@pytest.mark.parametrize("path", WOVEN_BEFORE, ids=lambda p: str(p.relative_to(LIB)))
def test_no_stage_operation_asks_whether_a_run_is_a_sweeps_or_a_teams(path: Path) -> None:
    assert path.exists(), path
    assert policy_questions(path.read_text()) == [], f"{path}: ask the run policies instead"


@pytest.mark.parametrize(
    "question",
    [
        "if record.sweep is not None:\n    pass",
        "x = 1 if r.lineage.sweep else 2",
        "ids = [r for r in rs if r.team != DEFAULT_TEAM]",
        "assert self.settings.teams().declared",
        "while parent.sweep.slots:\n    break",
    ],
)
def test_the_check_finds_each_kind_of_condition(question: str) -> None:
    assert policy_questions(question), question


def test_looking_a_team_up_is_not_a_question() -> None:
    lookup = "ns = self.settings.teams().namespace_of(record.team, default)\nctx = Ctx(team=record.team)"
    assert policy_questions(lookup) == []
