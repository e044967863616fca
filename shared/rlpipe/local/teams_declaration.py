"""The teams a local stack runs with (``rlpipe local up --teams FILE``): the declaration a
deployment gives Terraform as ``var.teams`` (core.teams), read from a YAML file.

Why the same document: the functions read it as ``RLPIPE_TEAMS`` in both places, so what a team
may do locally is what it may do deployed. The stack wires each declared team as Terraform does
(infra/terraform/teams.tf): its requests topic routed to ``intake_message``, its folder under
``requests/`` (the requests bucket's one trigger already covers it), and its namespace on the
cluster, holding the Secrets its allowlists name, so a request naming them runs.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlpipe.core.problems import RequestInvalid
from rlpipe.core.teams import Team, Teams, parse_teams, read_declaration

SECRET_KEY = "token"  # the key of a Secret an allowlist entry names without one
TEAM_LABEL = "rlpipe.dev/team"  # on what the stack makes for a team


class TeamsFileInvalid(ValueError):
    """The teams file cannot be read as a declaration; the message names the file and each field."""


@dataclass(frozen=True)
class LocalTeams:
    """The declared teams, and the declaration as the functions read it."""

    teams: Teams
    declaration: Mapping[str, Any]  # {name: settings}: what Terraform's jsonencode(var.teams) gives

    @property
    def env_json(self) -> str:
        """``RLPIPE_TEAMS`` for the functions and the CLI, its teams in name order, as Terraform's
        ``jsonencode`` of a map writes them."""
        return json.dumps(self.declaration, sort_keys=True)

    def env_json_operated_by(self, operator: str) -> str:
        """``env_json`` with ``operator`` (the identity the stack plays for ``rlpipe cancel``,
        ``retry`` and ``promote``; local/identities.py) among every team's operators: the person
        running a local stack operates each of its teams, as a deployment lists its operators per
        team. Without it, every operator call on a team's run is refused (403)."""
        declaration = {
            name: {**body, "operators": [*dict.fromkeys([*body.get("operators", []), operator])]}
            for name, body in self.declaration.items()
        }
        return json.dumps(declaration, sort_keys=True)

    def describe(self) -> list[str]:
        """One line per team: where its requests arrive and where its runs go."""
        return [
            f"{t.name}: folder requests/{t.folder}/, topic {t.topic_id}, namespace {t.k8s_namespace}"
            for t in self.teams
        ]


def read_teams_file(path: str | Path) -> LocalTeams:
    """The teams of ``path`` (YAML or JSON: ``{teams: {name: {...}}}`` or ``{name: {...}}``),
    checked as the functions will check them. Raises ``TeamsFileInvalid`` naming the file and every
    wrong field, before anything starts."""
    where = Path(path)
    try:
        # read as the functions read RLPIPE_TEAMS: a team or setting given twice is refused
        document = read_declaration(where.read_text(encoding="utf-8"), str(where))
    except OSError as exc:
        raise TeamsFileInvalid(f"{where}: cannot read it ({exc.strerror})") from None
    except RequestInvalid as exc:
        raise TeamsFileInvalid(f"{where}: not YAML or JSON ({exc.problems[0].message})") from None
    if isinstance(document, Mapping) and set(document) == {"teams"}:
        document = document["teams"]
    if not isinstance(document, Mapping) or not document:
        raise TeamsFileInvalid(
            f"{where}: declares no teams; write teams: {{NAME: {{...}}, ...}} (docs/teams-local.md)"
        )
    try:
        teams = parse_teams(document, source=str(where))
    except RequestInvalid as exc:
        lines = [f"{p.path}: {p.message} ({p.fix})" for p in exc.problems]
        raise TeamsFileInvalid("\n".join([f"{where}: not a teams declaration:", *lines])) from None
    return LocalTeams(teams, {str(name): dict(body or {}) for name, body in document.items()})


def team_secrets(team: Team) -> dict[str, dict[str, str]]:
    """The Secrets the team's allowlists name (``name:key``), each with a token the Hub double
    accepts: what the team's operator creates in its namespace before its first run (docs/deploy.md).
    Secret name → {key: token}; a write token is a token of its own, never marked read-only."""
    secrets: dict[str, dict[str, str]] = {}
    for entry in (*team.read_secrets, *team.write_secrets):
        name, _, key = entry.partition(":")
        secrets.setdefault(name, {})[key or SECRET_KEY] = f"local-{team.name}-{name}"
    return secrets


def secret_documents(team: Team) -> list[dict[str, Any]]:
    """The Secrets of :func:`team_secrets` in the team's namespace, as Opaque Secrets (what GKE's
    secret sync, or the team's operator, creates there)."""
    return [
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": name,
                "namespace": team.k8s_namespace,
                "labels": {"app.kubernetes.io/part-of": "rlpipe", TEAM_LABEL: team.name},
            },
            "type": "Opaque",
            "data": {key: base64.b64encode(token.encode()).decode() for key, token in keys.items()},
        }
        for name, keys in team_secrets(team).items()
    ]
