"""The teams declaration Terraform takes (var.teams) is the one rlpipe reads (core.teams): the same
settings by name, at every level, the same names of teams accepted, and the functions given it as
RLPIPE_TEAMS. A setting added on one side only would be dropped or refused on the way."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import hcl2
import pytest

from rlpipe.core.teams import DEFAULT_TEAM, TEAM_NAME, Limits, Quota, Team, parse_teams

ROOT = Path(__file__).resolve().parents[2]
TERRAFORM = ROOT / "infra" / "terraform"


def _teams_variable() -> dict[str, Any]:
    variables = hcl2.load((TERRAFORM / "variables.tf").open())["variable"]
    [teams] = [
        v['"teams"'] if '"teams"' in v else v["teams"] for v in variables if {"teams", '"teams"'} & set(v)
    ]
    return dict(teams)


def _fields(type_expression: str, block: str | None = None) -> set[str]:
    """The attribute names of ``object({...})`` at the top of the type, or of the nested ``block``."""
    text = type_expression
    if block is not None:
        start = text.index(f"{block} = optional(object(")
        text = text[start + len(f"{block} = optional(") :]
    body = text[text.index("object({") + len("object({") :]
    depth, end = 1, 0
    while depth and end < len(body):
        depth += {"(": 1, "{": 1, ")": -1, "}": -1}.get(body[end], 0)
        end += 1
    top, nested = [], 0
    for token in re.finditer(r"[(){}]|(\b[a-z_]+) =", body[:end]):
        if token.group(1) is None:
            nested += 1 if token.group(0) in "({" else -1
        elif nested == 0:
            top.append(token.group(1))
    return set(top)


def test_terraforms_team_settings_are_core_teams_by_name() -> None:
    declared = _teams_variable()["type"]
    # topic and namespace are derived (Terraform sets topic from the team's name; the namespace
    # defaults to rlpipe-<team>), and the name is the map's key.
    assert _fields(declared) == set(Team.model_fields) - {"name", "topic", "namespace"}
    assert _fields(declared, "quota") == set(Quota.model_fields)
    assert _fields(declared, "limits") == set(Limits.model_fields)


@pytest.mark.parametrize(
    "name", ["vision", "abc", "ml-2", "x" * 14, "x" * 20, "Vision", "-a", "a-", "9a", "a", "default"]
)
def test_a_team_name_terraform_accepts_is_one_rlpipe_accepts(name: str) -> None:
    [terraform] = [v for v in _teams_variable()["validation"] if "keys(var.teams)" in v["condition"]]
    pattern = re.search(r'regex\("([^"]+)"', terraform["condition"]).group(1)  # type: ignore[union-attr]
    takes = bool(re.fullmatch(pattern, name)) and f'name != "{DEFAULT_TEAM}"' in terraform["condition"]
    takes = takes and name != DEFAULT_TEAM
    if takes:
        assert re.fullmatch(TEAM_NAME, name), f"Terraform takes {name!r}, rlpipe refuses it"
        parse_teams({name: {}})  # and the whole declaration reads
    if name == DEFAULT_TEAM:
        assert f'name != "{DEFAULT_TEAM}"' in terraform["condition"], (
            "Terraform must refuse the default team's name"
        )


def test_the_functions_read_the_declaration_as_rlpipe_teams() -> None:
    functions = (TERRAFORM / "functions.tf").read_text()
    assert re.search(
        r"RLPIPE_TEAMS\s*=\s*length\(var\.teams\) > 0 \? jsonencode\(local\.teams_declaration\)", functions
    )
