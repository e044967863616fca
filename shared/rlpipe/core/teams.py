"""Teams on one deployment: who may submit and operate, where a team's requests arrive, what its
runs may reach, its share of the TPUs and its limits.

Why the source decides the team: a request that could say which team it belongs to could claim
another team's Secrets, queue or budget. A drop is under ``requests/<team>/``, a folder only the
team's submitters may write (an IAM condition on the object name prefix, infra/terraform/iam.tf);
a message arrives on the team's own topic, on which only they may publish; an upstream watch
entry names its team in the deployment's watch list. So the team is known before the document is
read, and the request holds no team field at all.

A deployment that declares no teams is one team, ``default``: today's single trust domain, with the
deployment-wide allowlists, the requests topic and any folder under ``requests/`` (a folder there
only scopes ``request_id``s). Declaring teams replaces that: each team's allowlists are its own
(nothing inherited but the image registries and the environment names every team may set), and a
drop outside every team's folder, or a message on a topic no team owns, is refused.

The declaration is one document, the same for Terraform (``var.teams``, jsonencoded into the
functions' ``RLPIPE_TEAMS``) and the local stack (``rlpipe local up --teams FILE``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError, field_validator

from rlpipe.core.problems import Problem, RequestInvalid

DEFAULT_TEAM = "default"
# A team's name is a folder, a topic's suffix, a Kubernetes namespace's and a Kueue ClusterQueue's
# suffix and a label value: a DNS label short enough for all of them with a prefix.
TEAM_NAME = r"^[a-z]([a-z0-9-]{0,38}[a-z0-9])?$"
# What the stage function can verify of an operator: the e-mail of a Google-signed ID token
# (control/adapters/callers.py). A group's members cannot be read there, so operators are listed
# one identity each; submitters only ever meet IAM, which takes groups too.
OPERATOR_MEMBER = r"^(user|serviceAccount):[^\s@:]+@[^\s@:]+$"
SUBMITTER_MEMBER = r"^(user|group|serviceAccount):[^\s@:]+@[^\s@:]+$"
NAMESPACE_PREFIX = "rlpipe-"  # a team's Kubernetes namespace: rlpipe-<team>
TOPIC_PREFIX = "rlpipe-requests-"  # a team's requests topic: rlpipe-requests-<team>

TeamName = Annotated[str, StringConstraints(pattern=TEAM_NAME)]
Operator = Annotated[str, StringConstraints(pattern=OPERATOR_MEMBER)]
Submitter = Annotated[str, StringConstraints(pattern=SUBMITTER_MEMBER)]
Entry = Annotated[str, StringConstraints(min_length=1, max_length=512)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Quota(_Strict):
    """The team's ClusterQueue in the deployment's cohort (Kueue v1beta2 ``resourceGroups`` for
    ``google.com/tpu``): ``chips`` is its nominalQuota; ``borrowing_limit`` how many chips beyond
    that it may take from idle teams of the cohort, ``lending_limit`` how many of its own it lends
    (None: no limit, Kueue's default when the field is absent)."""

    chips: int = Field(ge=0)
    borrowing_limit: int | None = Field(default=None, ge=0)
    lending_limit: int | None = Field(default=None, ge=0)

    @field_validator("lending_limit")
    @classmethod
    def _within_quota(cls, value: int | None, info: Any) -> int | None:
        chips = info.data.get("chips")
        if value is not None and chips is not None and value > chips:
            raise ValueError(f"lends {value} chips of the {chips} it has: lend at most its quota")
        return value


class Limits(_Strict):
    """What Kueue cannot see, counted by the control plane from the ledgers: runs that have not
    ended, sweep children that have not ended, and TPU chip-hours per calendar month (UTC)."""

    active_runs: int | None = Field(default=None, ge=1)
    sweep_children: int | None = Field(default=None, ge=1)
    monthly_chip_hours: float | None = Field(default=None, gt=0)


class Team(_Strict):
    """One team's declaration. The lists are the team's own allowlists, in the forms the
    deployment-wide settings take (docs/security.md): ``name:key`` Secrets, ``org/`` or
    ``org/name`` publish targets, ``gs://bucket/prefix/`` read-only data, LocalQueue, reservation
    and node pool names, and environment names added to every team's."""

    name: TeamName
    submitters: tuple[Submitter, ...] = ()
    operators: tuple[Operator, ...] = ()
    topic: str | None = None  # default rlpipe-requests-<name>
    # default rlpipe-<name>; always under rlpipe-, where the deployment's roles and the render of the
    # team's queues (core.manifests.team_queues) reach, never another system's namespace
    namespace: (
        Annotated[str, StringConstraints(pattern=r"^rlpipe-[a-z0-9]([-a-z0-9]{0,53}[a-z0-9])?$")] | None
    ) = None
    read_secrets: tuple[Entry, ...] = ()
    write_secrets: tuple[Entry, ...] = ()
    publish_repos: tuple[Entry, ...] = ()
    read_only_gcs: tuple[Entry, ...] = ()
    queues: tuple[Entry, ...] | None = None  # None: the presets' queue names, in its own namespace
    reservations: tuple[Entry, ...] = ()
    node_pools: tuple[Entry, ...] | None = None  # None: the presets' node pools
    extra_env: tuple[Entry, ...] = ()
    allow_user_code: bool = False
    quota: Quota | None = None
    limits: Limits = Field(default_factory=Limits)

    @field_validator("name")
    @classmethod
    def _not_the_default(cls, name: str) -> str:
        if name == DEFAULT_TEAM:
            raise ValueError(
                f"{DEFAULT_TEAM!r} names the runs of a deployment without teams (and those from before "
                "teams were declared): give the team another name"
            )
        return name

    @property
    def topic_id(self) -> str:
        return self.topic or f"{TOPIC_PREFIX}{self.name}"

    @property
    def k8s_namespace(self) -> str:
        return self.namespace or f"{NAMESPACE_PREFIX}{self.name}"

    @property
    def folder(self) -> str:
        """The folder below ``requests/`` only its submitters may write."""
        return self.name

    def may_operate(self, caller: str | None) -> bool:
        """Whether the verified ``caller`` (an e-mail) is one of this team's operators. E-mail
        addresses compare without case, as Google's identities do."""
        return caller is not None and any(
            m.split(":", 1)[1].lower() == caller.lower() for m in self.operators
        )


class Teams(_Strict):
    """The deployment's teams; empty when it declares none (one ``default`` team)."""

    teams: tuple[Team, ...] = ()

    @field_validator("teams")
    @classmethod
    def _distinct(cls, teams: tuple[Team, ...]) -> tuple[Team, ...]:
        for what, values in (
            ("name", [t.name for t in teams]),
            ("topic", [t.topic_id for t in teams]),
            ("namespace", [t.k8s_namespace for t in teams]),
        ):
            twice = sorted({v for v in values if values.count(v) > 1})
            if twice:
                raise ValueError(f"two teams share a {what}: {', '.join(twice)}")
        return teams

    @property
    def declared(self) -> bool:
        return bool(self.teams)

    def __iter__(self) -> Iterator[Team]:  # type: ignore[override]  # iterate the teams, not fields
        return iter(self.teams)

    def named(self, name: str) -> Team | None:
        return next((t for t in self.teams if t.name == name), None)

    def for_folder(self, folder: str) -> Team | None:
        """The team whose request folder ``folder`` is (layout.request_namespace of the object)."""
        return next((t for t in self.teams if t.folder == folder), None) if folder else None

    def for_topic(self, topic: str) -> Team | None:
        """The team owning ``topic``: a topic id, or ``projects/P/topics/ID`` as events name it."""
        topic_id = topic.rsplit("/topics/", 1)[-1]
        return next((t for t in self.teams if t.topic_id == topic_id), None)

    def namespace_of(self, team: str, default: str) -> str:
        """Where a run of ``team`` has its workloads: the team's namespace, or ``default`` (the
        deployment's) for a team this deployment does not declare, ``default`` among them."""
        named = self.named(team)
        return named.k8s_namespace if named is not None else default

    def names(self) -> list[str]:
        return [t.name for t in self.teams]

    def cache_scope(self, team: str) -> str:
        """Whose conversions a run of ``team`` reads and writes (``layout.conversion_cache_key``'s
        scope): its team's own, wherever teams are declared, so a team never loads weights converted
        with another team's token or the deployment's; "" (the deployment's keys, as before teams)
        only where none are. Conversions made before teams were declared are therefore never read by
        a team's run: each team converts a repository once, with its own token (docs/teams.md)."""
        return team if self.declared else ""


def parse_teams(document: str | Mapping[str, Any], source: str = "RLPIPE_TEAMS") -> Teams:
    """The deployment's teams from their declaration: a mapping ``{name: {...}}`` (what Terraform's
    ``jsonencode(var.teams)`` and a local ``--teams`` YAML file give) or ``{"teams": {...}}``.
    Raises ``RequestInvalid`` naming each field that is wrong, with ``source`` in its path, so a
    deployment with a bad declaration refuses to load instead of running with a guess."""
    raw: Any = document
    if isinstance(document, str):
        if not document.strip():
            return Teams()
        try:
            raw = json.loads(document)
        except json.JSONDecodeError as exc:
            raise RequestInvalid(
                [Problem(source, f"is not JSON: {exc.msg}", "give the teams as a JSON object")]
            ) from exc
    if isinstance(raw, Mapping) and set(raw) == {"teams"}:
        raw = raw["teams"]
    if not isinstance(raw, Mapping):
        raise RequestInvalid([Problem(source, "is not a mapping of team names", "give {name: {...}, ...}")])
    teams = []
    problems: list[Problem] = []
    for name, body in raw.items():
        try:
            teams.append(Team.model_validate({**(body or {}), "name": name}))
        except ValidationError as exc:
            problems += [_problem(source, str(name), e) for e in exc.errors()]
        except TypeError:
            problems.append(
                Problem(f"{source}.{name}", "is not a mapping", "give the team's settings as a mapping")
            )
    if problems:
        raise RequestInvalid(problems)
    try:
        return Teams(teams=tuple(teams))
    except ValidationError as exc:
        raise RequestInvalid(
            [
                Problem(source, e["msg"].removeprefix("Value error, "), "give each team its own")
                for e in exc.errors()
            ]
        ) from exc


def _problem(source: str, team: str, error: Any) -> Problem:
    where = ".".join(str(p) for p in error["loc"])
    message = str(error["msg"]).removeprefix("Value error, ")
    if error["type"] == "string_pattern_mismatch" and where == "name":
        return Problem(
            f"{source}.{team}",
            f"{team!r} is not a team name",
            "use lowercase letters, digits and -, starting with a letter (at most 40)",
        )
    if error["type"] == "string_pattern_mismatch":
        return Problem(
            f"{source}.{team}.{where}",
            f"{error['input']!r} {message}",
            _MEMBER_FIX.get(where.split(".")[0], "see docs/teams.md"),
        )
    if error["type"] == "extra_forbidden":
        return Problem(
            f"{source}.{team}.{where}",
            "is not a team setting",
            "see docs/teams.md for the settings a team takes",
        )
    return Problem(f"{source}.{team}.{where}", message, "see docs/teams.md")


_MEMBER_FIX = {
    "operators": "name each operator as user:EMAIL or serviceAccount:EMAIL (the stage function checks the caller's verified e-mail; a group cannot be checked there)",
    "submitters": "name each submitter as user:, group: or serviceAccount: and an e-mail",
    "namespace": "leave it out (rlpipe-<team>), or name one under rlpipe-: lowercase letters, digits and -",
}
