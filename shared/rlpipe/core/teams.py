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
from collections.abc import Hashable, Iterator, Mapping
from typing import Annotated, Any

import yaml
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
    # The Secret Manager secret holding the team's own Hub read token, which Terraform mounts on the
    # stage function as RLPIPE_HF_TOKEN_<TEAM> (control.adapters.hub_client.plan_token); plan reads
    # the Hub with it, or anonymously without one, never with the deployment's token.
    hf_token_secret: Entry | None = None
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
    """The deployment's teams; empty when it declares none (one ``default`` team). ``project`` is
    the deployment's project: a topic path names a team's topic only in that project."""

    teams: tuple[Team, ...] = ()
    project: str = ""

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

    def for_topic(self, topic: str, project: str | None = None) -> Team | None:
        """The team owning ``topic``: ``projects/P/topics/ID`` as events name it, or a bare topic
        id (read as Pub/Sub clients read one: a topic of the deployment's project). A path is the
        team's only with the deployment's project (``project``, else the one the teams were read
        with): the same id in another project is anyone's topic. No project known: no path is."""
        where = self.project if project is None else project
        if not topic.startswith("projects/"):
            return next((t for t in self.teams if t.topic_id == topic), None) if "/" not in topic else None
        return next((t for t in self.teams if where and topic_path(t.topic_id, where) == topic), None)

    def requests_topics(self, project: str | None = None) -> list[str]:
        """Every team's requests topic, as a full path (none where the project is not known)."""
        where = self.project if project is None else project
        return [p for p in (topic_path(t.topic_id, where) for t in self.teams) if p]

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


def topic_path(topic: str, project: str) -> str:
    """``topic`` as Pub/Sub reads it: a full path stays as it is, a bare id is a topic of
    ``project``; "" when that project is not known (nothing can be proved about the topic)."""
    if topic.startswith("projects/"):
        return topic
    return f"projects/{project}/topics/{topic}" if project and topic and "/" not in topic else ""


class Declared(dict[str, Any]):
    """A mapping as the declaration's parser built it, with the keys it met more than once.

    Why: ``json.loads`` and YAML's loaders keep the last of two equal keys without a word, so
    ``RLPIPE_TEAMS`` naming a team twice would run with whichever came last. The parser records
    the repeats while it reads (``object_pairs_hook``, the YAML loader's mapping constructor);
    ``parse_teams`` then names each with its place."""

    def __init__(self, pairs: list[tuple[Any, Any]]) -> None:
        super().__init__(pairs)
        seen: set[Any] = set()
        self.repeated: list[str] = []
        for key, _ in pairs:
            if key in seen and str(key) not in self.repeated:
                self.repeated.append(str(key))
            seen.add(key)


class _DeclarationLoader(yaml.SafeLoader):
    """YAML's safe loader, building every mapping as a ``Declared`` (repeated keys recorded)."""


def _declared_mapping(loader: _DeclarationLoader, node: yaml.MappingNode) -> Declared:
    loader.flatten_mapping(node)
    pairs = []
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        if not isinstance(key, Hashable):  # as SafeLoader's own construct_mapping refuses it
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping",
                node.start_mark,
                "found an unhashable key",
                key_node.start_mark,
            )
        pairs.append((key, loader.construct_object(value_node, deep=True)))
    return Declared(pairs)


_DeclarationLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _declared_mapping)


def read_declaration(text: str, source: str = "RLPIPE_TEAMS") -> Any:
    """The declaration's text (JSON, as Terraform renders ``RLPIPE_TEAMS``, or YAML, as a local
    ``--teams`` file holds it) read with every mapping a ``Declared``: repeated keys are recorded
    while it is parsed. Raises ``RequestInvalid`` for text that is neither."""
    try:
        return json.loads(text, object_pairs_hook=Declared)
    except json.JSONDecodeError as not_json:
        try:
            return yaml.load(text, Loader=_DeclarationLoader)  # a SafeLoader subclass
        except yaml.YAMLError:
            raise RequestInvalid(
                [
                    Problem(
                        source,
                        f"is neither JSON nor YAML: {not_json.msg}",
                        "give the teams as a JSON object (or a YAML mapping)",
                    )
                ]
            ) from not_json


# The deployment's own topics, as a team's declaration may not use them: setting -> topic.
DeploymentTopics = Mapping[str, str]


def parse_teams(
    document: str | Mapping[str, Any],
    source: str = "RLPIPE_TEAMS",
    *,
    project: str = "",
    deployment_topics: DeploymentTopics | None = None,
) -> Teams:
    """The deployment's teams from their declaration: a mapping ``{name: {...}}`` (what Terraform's
    ``jsonencode(var.teams)`` and a local ``--teams`` YAML file give) or ``{"teams": {...}}``, as
    text (JSON or YAML, read by ``read_declaration``: a team or setting given twice is refused) or
    already read. ``project`` is the deployment's (``Teams.for_topic`` matches paths with it);
    ``deployment_topics`` its own topics by setting (``RLPIPE_REQUESTS_TOPIC``...), which no team
    may take as its requests topic. Raises ``RequestInvalid`` naming each field that is wrong, with
    ``source`` in its path, so a deployment with a bad declaration refuses to load instead of
    running with a guess."""
    raw: Any = document
    if isinstance(document, str):
        if not document.strip():
            return Teams(project=project)
        raw = read_declaration(document, source)
    if isinstance(raw, Mapping) and set(raw) == {"teams"}:
        if isinstance(raw, Declared) and raw.repeated:
            raise RequestInvalid([_twice(source, "teams")])
        raw = raw["teams"]
    if not isinstance(raw, Mapping):
        raise RequestInvalid([Problem(source, "is not a mapping of team names", "give {name: {...}, ...}")])
    problems: list[Problem] = [_twice(source, name) for name in getattr(raw, "repeated", [])]
    problems += [_twice(f"{source}.{name}", key) for name, body in raw.items() for key in _repeated(body)]
    if problems:
        raise RequestInvalid(problems)
    teams = []
    for name, body in raw.items():
        try:
            teams.append(Team.model_validate({**(body or {}), "name": name}))
        except ValidationError as exc:
            problems += [_problem(source, str(name), e) for e in exc.errors()]
        except TypeError:
            problems.append(
                Problem(f"{source}.{name}", "is not a mapping", "give the team's settings as a mapping")
            )
    problems += _deployment_topic_problems(source, teams, project, deployment_topics or {})
    if problems:
        raise RequestInvalid(problems)
    try:
        return Teams(teams=tuple(teams), project=project)
    except ValidationError as exc:
        raise RequestInvalid(
            [
                Problem(source, e["msg"].removeprefix("Value error, "), "give each team its own")
                for e in exc.errors()
            ]
        ) from exc


def _repeated(body: Any, path: str = "") -> Iterator[str]:
    """The keys given twice anywhere inside one team's settings, each as its dotted place."""
    if isinstance(body, Mapping):
        yield from (f"{path}{key}" for key in getattr(body, "repeated", []))
        for key, value in body.items():
            yield from _repeated(value, f"{path}{key}.")
    elif isinstance(body, list):
        for i, value in enumerate(body):
            yield from _repeated(value, f"{path}{i}.")


def _twice(where: str, key: str) -> Problem:
    return Problem(
        f"{where}.{key}",
        "is given twice in the declaration, and a reader would keep only one of them",
        "give it once: merge the two into one entry",
    )


def _deployment_topic_problems(
    source: str, teams: list[Team], project: str, topics: DeploymentTopics
) -> list[Problem]:
    """A team whose requests topic is one of the deployment's own (its requests topic, whose
    messages are the default team's; its status topic, on which every run's status is published):
    the team's submitters would be granted publishing there, and status messages read as requests."""
    problems = []
    for team in teams:
        mine = topic_path(team.topic_id, project) or team.topic_id
        for setting, topic in topics.items():
            theirs = topic_path(topic, project) or topic
            if topic and mine == theirs:
                problems.append(
                    Problem(
                        f"{source}.{team.name}.topic",
                        f"{team.topic_id} is the deployment's own topic ({setting}={topic})",
                        f"leave it out ({TOPIC_PREFIX}{team.name}) or name a topic only this team's "
                        "requests arrive on",
                    )
                )
    return problems


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
