"""``rlpipe teams render --teams FILE [--params FILE] [--output FILE]``: the teams' Kueue queues and
namespaces (``rlpipe.core.manifests.team_queues``) as the file infra/cluster/k8s includes.

Thin on purpose: it reads the declaration (the document Terraform's ``var.teams`` holds, as JSON or
YAML) and params.env (the cluster's TPU chips and cpu-np pool), and writes what the library renders.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml

from rlpipe.cli.exit_codes import CliError, ExitCode
from rlpipe.core.problems import RequestInvalid


def read_params(path: Path) -> dict[str, str]:
    """``KEY=VALUE`` lines of an env file (params.env), comments and blank lines skipped."""
    params = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, value = line.partition("=")
            params[key.strip()] = value.strip()
    return params


def cmd_teams_render(args: argparse.Namespace) -> int:
    from rlpipe.cluster import role_rules
    from rlpipe.core.manifests import team_queues
    from rlpipe.core.request.targets import DEFAULT_QUEUES
    from rlpipe.core.teams import parse_teams

    try:
        # the text, read as the functions read RLPIPE_TEAMS (a team given twice is refused)
        teams = parse_teams(Path(args.teams).read_text(), source=args.teams)
        capacity = (
            team_queues.Capacity.from_params(read_params(Path(args.params)), source=args.params)
            if args.params
            else None
        )
        text = team_queues.render_file(teams, capacity, role_rules())
    except yaml.YAMLError as exc:
        raise CliError(ExitCode.INVALID_INPUT, f"{args.teams}: not JSON or YAML ({exc})") from exc
    except RequestInvalid as exc:
        lines = [f"rlpipe teams render: refused ({len(exc.problems)} problems)"]
        raise CliError(ExitCode.INVALID_INPUT, "\n".join(lines + [f"  - {p}" for p in exc.problems])) from exc
    for line in team_queues.unserved_queues(teams, DEFAULT_QUEUES):
        print(f"warning: {line}", file=sys.stderr)
    if args.output:
        Path(args.output).write_text(text)
        print(f"wrote {args.output}: {len(teams.teams)} teams", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return int(ExitCode.OK)


def register(sub: Any) -> None:
    p = sub.add_parser("teams", help="the teams' share of the cluster (docs/teams.md)")
    teams_sub = p.add_subparsers(dest="teams_command", required=True)
    r = teams_sub.add_parser(
        "render",
        help="write the teams' Kueue queues and namespaces for infra/cluster/k8s/teams.yaml",
    )
    r.add_argument("--teams", required=True, help="the teams declaration (JSON or YAML; var.teams' document)")
    r.add_argument(
        "--params",
        help="infra/cluster/k8s/params.env: the cluster's TPU_CHIPS and CPU_NP_* (needed when teams are declared)",
    )
    r.add_argument("--output", help="write here (infra/cluster/k8s/teams.yaml) instead of stdout")
    r.set_defaults(func=cmd_teams_render)
