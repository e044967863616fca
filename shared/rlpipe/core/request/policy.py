"""What a deployment lets a request reach: its images, variables, Secrets, data and topics.

Why allowlists the deployment declares: every check written as a list of what not to accept had a
way around it (a dotted spelling of a protected key, another team's Secret, another run's
checkpoints). Here each thing a request can name is checked against what the deployment lists, so
what is not listed is refused, and the problem names the setting an operator would change. The
same checks run at intake and in ``rlpipe validate``; both say which policy they used.

A run's trust domain (docs/security.md): it may read and write under its own prefix
``runs/<run_id>/`` of the artifacts bucket, and read under the prefixes the deployment lists as
shared and read-only. The workload identity may write under ``runs/`` and ``cache/maxtext/`` for
every run, so a ``gs://`` value is the only way one run could reach another's data, and it is
checked here. A value MaxText reads as a path is accepted only in forms whose target is known
(``gs://``, or a relative path where MaxText only reads); one it writes to, only under the run's
own prefix: read-only data is never a write target, and never inside the artifacts bucket.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from rlpipe.core import identity, layout
from rlpipe.core.presets import (
    DEFAULT_MAX_SWEEP_CHILDREN,
    DEFAULT_READ_SECRETS,
    DEFAULT_WRITE_SECRETS,
    TUTORIAL_IMAGE_PREFIXES,
)
from rlpipe.core.problems import Problem, RequestInvalid
from rlpipe.core.request import checks, env_allowlist, reading, targets
from rlpipe.core.request.model import Request
from rlpipe.core.teams import Team, Teams, topic_path

# A team's settings, as core.teams names them (where they differ from the keys here).
TEAM_FIELDS = {
    "gcs": "read_only_gcs",
    "code": "allow_user_code",
    "env": "extra_env",
    "publish": "publish_repos",
}

# Setting names, as the problems quote them (rlpipe.control.adapters.settings reads them).
SETTINGS = {
    "images": "RLPIPE_ALLOWED_IMAGE_PREFIXES",
    "env": env_allowlist.SETTING,
    "read_secrets": "RLPIPE_READ_TOKEN_SECRETS",
    "write_secrets": "RLPIPE_WRITE_TOKEN_SECRETS",
    "gcs": "RLPIPE_READ_ONLY_GCS_PREFIXES",
    "topics": "RLPIPE_NOTIFY_TOPICS",
    "code": "RLPIPE_ALLOW_USER_CODE",
    "sweep": "RLPIPE_MAX_SWEEP_CHILDREN",
    "labels": checks.LABEL_PREFIX_SETTING,
    **targets.SETTINGS,
}


class SettingsInvalid(RequestInvalid):
    """A deployment setting that can never be right (``RLPIPE_ALLOWED_ENV=*``), refused when the
    deployment loads. A ``RequestInvalid`` so that every caller that already answers one with its
    problems (the CLI's plain message and exit code) answers this one too."""

    def render(self) -> str:
        count = len(self.problems)
        lines = [f"deployment settings refused: {count} problem{'s' if count != 1 else ''}"]
        lines += [f"  - {p}" for p in self.problems]
        return "\n".join(lines)


@dataclass(frozen=True)
class Policy:
    """A deployment's allowlists. ``source`` says where they came from, for the user to read."""

    project: str = ""  # the deployment's project; unknown (no topic check) in the defaults
    artifacts_bucket: str = "rlpipe-artifacts"
    image_prefixes: tuple[str, ...] = TUTORIAL_IMAGE_PREFIXES
    extra_env: tuple[str, ...] = ()  # NAME or WORD_*, added to env_allowlist's names (env_names)
    read_secrets: tuple[str, ...] = DEFAULT_READ_SECRETS  # name:key
    write_secrets: tuple[str, ...] = DEFAULT_WRITE_SECRETS  # name:key
    read_only_gcs: tuple[str, ...] = ()  # gs://bucket/prefix/ a request may read
    # Topics a request's notify may name beside the status topic: projects/P/topics/ID (a bare ID is
    # a topic of ``project``). What is not listed is refused (docs/security.md).
    notify_topics: tuple[str, ...] = ()
    status_topic: str = ""  # the deployment's status topic (RLPIPE_STATUS_TOPIC): always a target
    # Topics whose messages the deployment acts on (its requests topic, every team's, its ticks and
    # dead-letter topic; ``deployment_topics``): never a notify target, whatever a list says.
    reserved_topics: tuple[str, ...] = ()
    allow_user_code: bool = False  # may a request bring Python that runs in its training pods
    max_sweep_children: int = DEFAULT_MAX_SWEEP_CHILDREN  # the largest grid one request may make
    # What a request may name outside the run (core.request.targets): org/ or org/name, and names.
    publish_repos: tuple[str, ...] = targets.DEFAULT_PUBLISH_REPOS
    queues: tuple[str, ...] = targets.DEFAULT_QUEUES
    reservations: tuple[str, ...] = targets.DEFAULT_RESERVATIONS
    node_pools: tuple[str, ...] = targets.DEFAULT_NODE_POOLS
    # Label key prefixes a request's labels may use beside plain names (checks.label_key_problems):
    # a label can opt a pod into another controller's control, so none by default.
    label_prefixes: tuple[str, ...] = checks.DEFAULT_LABEL_PREFIXES
    source: str = "the built-in defaults"
    # The submitter's request_id namespace (layout.request_namespace): with a request_id, the
    # run's own prefix depends on it. Intake sets it per request (Policy.for_namespace).
    namespace: str = ""
    # Whose allowlists these are, as a problem names them: the deployment's settings (SETTINGS),
    # or a team's (``Policy.for_team``: ``teams.<name>.read_secrets``...).
    names: Mapping[str, str] = field(default_factory=lambda: dict(SETTINGS))
    holder: str = "this deployment"
    # Whose run prefix a request's write paths must stay under: its team's (layout.RunLayout.scope),
    # where the deployment declares teams; "" for the deployment's one team.
    artifacts_scope: str = ""

    def __post_init__(self) -> None:
        """A deployment's settings are checked when it loads, not when a request arrives: an
        allowlist that could never be right (``RLPIPE_ALLOWED_ENV=*``) stops it here."""
        problems = [
            *env_allowlist.deployment_problems(self.extra_env, setting=self.names["env"]),
            *checks.label_prefix_setting_problems(self.label_prefixes, self.names["labels"]),
            *self._target_setting_problems(),
            *self._read_only_setting_problems(),
        ]
        if problems:
            raise SettingsInvalid(problems)

    def _targets(self) -> targets.Targets:
        return targets.Targets(
            self.publish_repos, self.queues, self.reservations, self.node_pools, self.names, self.holder
        )

    def _target_setting_problems(self) -> list[Problem]:
        return self._targets().setting_problems()

    def _read_only_setting_problems(self) -> Iterator[Problem]:
        """A read-only prefix must be a ``gs://bucket/prefix`` outside the artifacts bucket: every
        run's workloads may write there (``runs/``, ``cache/maxtext/``, ``pathways/``), so data in it
        is not read-only, and listing it would let every request read other runs' outputs."""
        setting = self.names["gcs"]
        for entry in self.read_only_gcs:
            normal = _normalize(entry) if entry.startswith("gs://") else None
            bucket = normal[len("gs://") :].split("/", 1)[0] if normal else ""
            if not bucket:
                yield Problem(
                    setting,
                    f"{entry[:200]!r} is not a gs://BUCKET/PREFIX/ prefix",
                    f"list read-only data in {setting} as gs://BUCKET/PREFIX/ (no '.', '..' or empty parts)",
                )
            elif bucket == self.artifacts_bucket:
                yield Problem(
                    setting,
                    f"{entry[:200]} is inside the artifacts bucket gs://{bucket}/, where every run's "
                    "workloads write: nothing there is read-only",
                    f"remove it from {setting}, and keep shared read-only data in a bucket of its own",
                )

    def for_namespace(self, namespace: str) -> Policy:
        return dataclasses.replace(self, namespace=namespace)

    def for_team_named(self, teams: Teams, name: str | None) -> Policy:
        """``for_team`` of the team ``name`` when ``teams`` declares it; else these allowlists (a
        name no team has is refused where the run is made, by intake, naming the teams)."""
        declared = teams.named(name or "") if teams.declared else None
        return self.for_team(declared) if declared is not None else self

    def for_team(self, team: Team) -> Policy:
        """The allowlists a request of ``team`` is checked against: the team's own lists in place of
        the deployment's (one team can never name another's Secret, data, target or queue), the
        deployment's image registries and the environment names every team may set, plus the team's.
        Its folder is its request_id namespace."""
        names = {key: f"teams.{team.name}.{TEAM_FIELDS.get(key, key)}" for key in SETTINGS}
        names["images"], names["topics"], names["sweep"], names["labels"] = (
            SETTINGS["images"],
            SETTINGS["topics"],
            SETTINGS["sweep"],
            SETTINGS["labels"],  # the deployment's: a team has no label prefixes of its own
        )
        return dataclasses.replace(
            self,
            extra_env=(*self.extra_env, *team.extra_env),
            read_secrets=team.read_secrets,
            write_secrets=team.write_secrets,
            read_only_gcs=team.read_only_gcs,
            allow_user_code=team.allow_user_code,
            publish_repos=team.publish_repos,
            queues=targets.DEFAULT_QUEUES if team.queues is None else team.queues,
            reservations=team.reservations,
            node_pools=targets.DEFAULT_NODE_POOLS if team.node_pools is None else team.node_pools,
            namespace=team.folder,
            names=names,
            holder=f"team {team.name}",
            artifacts_scope=team.name,
            source=f"team {team.name}'s allowlists",
        )

    def problems(self, request: Request, run_id: str | None = None) -> list[Problem]:
        """Everything in ``request`` this policy does not allow. ``run_id`` (when the run is known)
        lets ``gs://`` values name the run's own prefix."""
        doc = request.model_dump(mode="python")
        paths = list(reading.path_values(request))  # read once: the path rules and the code rule
        return [
            *self._images(doc),
            *checks.label_key_problems(request.labels, self.label_prefixes, self.names["labels"]),
            *env_allowlist.env_problems(_env_maps(doc), self.extra_env),
            *self._secrets(request),
            *self._gcs(
                [*_strings(doc, ()), *reading.read_strings(request)],
                run_id if run_id is not None else _run_id_of(request, self.namespace),
            ),
            *self._paths(
                paths,
                run_id if run_id is not None else _run_id_of(request, self.namespace),
            ),
            *self._notify(request.notify),
            *self._code(request, paths),
            *self._targets().problems(request),
        ]

    def _images(self, doc: Mapping[str, Any]) -> Iterator[Problem]:
        allowed = tuple(p for p in self.image_prefixes if p)
        for path in ("image", "pathways.proxy_image", "pathways.server_image", "pathways.worker_image"):
            image = _at(doc, tuple(path.split(".")))
            if isinstance(image, str) and not image.startswith(allowed):
                yield Problem(
                    path,
                    f"{image} is not from a registry this deployment runs",
                    f"use an image under {' or '.join(allowed) or '(no registry is allowed)'}, "
                    f"or ask the operator to add its registry to {self.names['images']}",
                )

    def _secrets(self, request: Request) -> Iterator[Problem]:
        uses = [("hf_token_secret", request.hf_token_secret, self.read_secrets, "read_secrets")]
        if request.publish is not None:
            uses.append(
                ("publish.token_secret", request.publish.token_secret, self.write_secrets, "write_secrets")
            )
        for path, ref, allowed, setting in uses:
            if f"{ref.name}:{ref.key}" not in allowed:
                yield Problem(
                    path,
                    f"Secret {ref.name} (key {ref.key}) is not one {self.holder} lets requests use here",
                    f"use one of: {', '.join(allowed) or '(none)'} (name:key); an operator lists them in "
                    f"{self.names[setting]}",
                )

    def _gcs(self, strings: Iterable[tuple[str, str]], run_id: str | None) -> Iterator[Problem]:
        """Every ``gs://`` value: the request's strings as written, and every string MaxText reads
        from its arguments (``reading``: ``'gs://…'`` is read as ``gs://…``)."""
        own = self._own_prefix(run_id)
        allowed = tuple(p for p in (own, *self.read_only_gcs) if p)
        reported: dict[str, list[str]] = {}  # value -> paths already named for it
        for path, value in dict.fromkeys(strings):
            if not value.lower().startswith("gs://"):
                continue
            named = reported.setdefault(value, [])
            if any(p.startswith(path + ".") or path.startswith(p + ".") or p == path for p in named):
                continue  # one problem per value and place: a map's entry, not the map again
            named.append(path)
            normal = _normalize(value)
            if normal is None or not any(_as_dir(normal).startswith(_as_dir(p)) for p in allowed):
                yield Problem(
                    path,
                    f"{value[:200]} is outside this run's own prefix and the read-only data of {self.holder}",
                    "use data under "
                    + (" or ".join(allowed) if allowed else "a prefix the deployment lists")
                    + f"; an operator lists shared read-only prefixes in {self.names['gcs']}",
                )

    def _own_prefix(self, run_id: str | None) -> str | None:
        if not run_id:
            return None
        run = layout.RunLayout(self.artifacts_bucket, run_id, scope=self.artifacts_scope)
        return layout.gs(self.artifacts_bucket, run.artifacts_prefix)

    def _paths(self, values: Iterable[reading.PathValue], run_id: str | None) -> Iterator[Problem]:
        """Every value MaxText reads as a path (``reading.path_values``), by an allowlist of forms:
        ``gs://`` (whose prefixes ``_gcs`` checks; a key MaxText writes to only under the run's own
        prefix), or a plain relative path (a file of the image, a Hub id) for a key MaxText only
        reads. Anything else (another scheme, an fsspec chain such as ``simplecache::gs://``, an
        absolute path such as a ``/gcs/`` mount, ``~``, ``..``) is refused: rlpipe cannot prove
        where it leads."""
        own = self._own_prefix(run_id)
        unnamed = f"{layout.team_prefix(self.artifacts_scope)}{layout.RUNS_PREFIX}<run_id>/"
        where = own or f"gs://{self.artifacts_bucket}/{unnamed} (give the request a request_id)"
        for item in values:
            value, writes = item.value, item.writes
            if not value:
                continue  # no value: MaxText's default
            if value.startswith("gs://") and "::" not in value:
                normal = _normalize(value)
                if writes and normal and not _under(normal, own) and _under(normal, *self.read_only_gcs):
                    yield Problem(
                        item.field,
                        f"MaxText writes to {item.key}, and {value[:200]} is read-only data of {self.holder}",
                        f"point {item.key} under this run's own prefix {where}, or leave it out",
                    )
                continue  # any other gs:// value outside the allowed prefixes: _gcs names it
            if _PLAIN_RELATIVE.match(value) and not writes:
                continue
            kind = "a local path" if _PLAIN_RELATIVE.match(value) else "not a gs:// path"
            yield Problem(
                item.field,
                f"MaxText {'writes to' if writes else 'reads'} {item.key} as a path, and "
                f"{value[:200]!r} is {kind}; only gs:// "
                + (
                    "under the run's own prefix is accepted here"
                    if writes
                    else "or a relative path is accepted"
                )
                + " (another scheme, an fsspec chain, an absolute path, '~' or '..' could lead anywhere)",
                (
                    f"point it under this run's own prefix {where}, or leave it out"
                    if writes
                    else "use a gs://BUCKET/PATH this deployment allows, or a relative path such as a Hub "
                    "id (org/name) or a file of the image (no leading '/', no '..', no 'scheme:')"
                ),
            )

    def _code(self, request: Request, paths: Iterable[reading.PathValue] = ()) -> Iterator[Problem]:
        """A request's Python runs in its training pods, with the run's identity; a deployment
        decides whether requests may bring any (docs/security.md). The chat template is JSON,
        read as data, and always allowed. So are the MaxText keys that load code or a file that
        decides what runs (``reading.CODE_KEYS`` among ``paths``: ``formatting_func_path`` is a
        module MaxText imports): a request sets them only where it may bring code."""
        if self.allow_user_code:
            return
        uses = [
            ("rewards", request.rewards is not None),
            ("dataset.processor", request.dataset.processor is not None),
        ]
        for path, used in uses:
            if used:
                yield Problem(
                    path,
                    f"{self.holder} runs no code a request brings",
                    "remove it and use MaxText's built-in "
                    + (
                        "rewards"
                        if path == "rewards"
                        else "processor (a dataset with question and answer columns)"
                    )
                    + f", or ask the operator to set {self.names['code']}=true",
                )
        named = dict.fromkeys((v.field, v.key) for v in paths if v.key in reading.CODE_KEYS)
        for path, key in named:
            yield Problem(
                path,
                f"MaxText loads {key} as code or a file that decides what runs, and {self.holder} runs no "
                "code a request brings",
                f"remove it (MaxText's default is used), or ask the operator to set {self.names['code']}=true",
            )

    def _notify(self, topic: str | None) -> Iterator[Problem]:
        """A status message lands on the topic ``notify`` names, published with the functions'
        identity. So ``notify`` names only a topic this deployment lists (its status topic,
        ``notify_topics``), matched as a full path with its project, and never one whose messages
        the deployment acts on (``reserved_topics``): a status message on a requests topic is read
        by intake as a request of whichever team owns it. A bare name is a topic of the
        deployment's project, as the publisher reads it. No project (the built-in defaults of
        ``rlpipe validate``): nothing to read a bare name with, no check."""
        if topic is None or not self.project:
            return
        path = topic_path(topic, self.project)
        listed = {topic_path(t, self.project) for t in (self.status_topic, *self.notify_topics) if t}
        reserved = {topic_path(t, self.project) for t in self.reserved_topics if t}
        choices = ", ".join(sorted(listed - reserved)) or "(none)"
        if path and path in reserved:
            yield Problem(
                "notify",
                f"{topic} is a topic this deployment reads requests or ticks from, not a status topic",
                f"leave notify out (the deployment's status topic) or name one of: {choices}; an operator "
                f"lists status topics in {self.names['topics']}",
            )
        elif not path or path not in listed:
            yield Problem(
                "notify",
                f"{topic} is not a status topic {self.holder} lists (read as {path or 'an unknown path'})",
                f"leave notify out (the deployment's status topic) or name one of: {choices} (a full path "
                f"projects/P/topics/ID); an operator lists others in {self.names['topics']}",
            )


def deployment_topics(project: str, requests_topic: str, teams: Teams) -> tuple[str, ...]:
    """Every topic whose messages the deployment acts on, as full paths: its requests topic, each
    team's, the scheduler's ticks and the dead-letter topic (Terraform names them
    ``<prefix>-requests``, ``<prefix>-upstream-tick``, ``<prefix>-reconcile-tick`` and
    ``<prefix>-dead-letter``, infra/terraform/pubsub.tf; the prefix is read off the requests
    topic, and rlpipe's default prefix is always included)."""
    prefixes = {"rlpipe"}
    if requests_topic.rsplit("/", 1)[-1].endswith("-requests"):
        prefixes.add(requests_topic.rsplit("/", 1)[-1].removesuffix("-requests"))
    names = [requests_topic, *(f"{p}-{s}" for p in sorted(prefixes) for s in _DEPLOYMENT_TOPICS)]
    found = [topic_path(n, project) for n in names if n]
    return tuple(dict.fromkeys(p for p in (*found, *teams.requests_topics(project)) if p))


_DEPLOYMENT_TOPICS = ("requests", "upstream-tick", "reconcile-tick", "dead-letter")
# A relative path: no scheme or fsspec chain (no ':'), not absolute or under '~', no '..' part, no '\'.
_PLAIN_RELATIVE = re.compile(r"^(?![/~])(?!.*(?:^|/)\.\.(?:/|$))[^:\\\s]+$")


def _run_id_of(request: Request, namespace: str) -> str | None:
    """The run a request with a request_id will become (intake derives it the same way)."""
    if not request.request_id:
        return None
    return identity.run_id_for(identity.key_for_request_id(request.request_id, namespace))


def _env_maps(doc: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, object], Mapping[str, Any]]]:
    for path, where, allowed in env_allowlist.ENV_FIELDS:
        env = _at(doc, where)
        if isinstance(env, Mapping):
            yield path, env, allowed


def _strings(value: Any, path: tuple[str, ...]) -> Iterator[tuple[str, str]]:
    if isinstance(value, Mapping):
        for key, item in value.items():
            yield from _strings(item, (*path, str(key)))
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from _strings(item, (*path, str(i)))
    elif isinstance(value, str):
        yield ".".join(path), value


def _normalize(uri: str) -> str | None:
    """``gs://bucket/a/b`` with no ``.``/``..`` or empty segments, or None: a path GCS would store
    under another name than it reads as is refused, not resolved."""
    rest = uri[len("gs://") :]
    parts = rest.split("/")
    if any(p in (".", "..") for p in parts) or "" in parts[:-1] or "\\" in rest or "%" in rest:
        return None
    return "gs://" + rest


def _under(path: str, *prefixes: str | None) -> bool:
    """Whether the normalized ``gs://`` ``path`` lies under one of ``prefixes`` (as directories)."""
    return any(p and _as_dir(path).startswith(_as_dir(p)) for p in prefixes)


def _as_dir(prefix: str) -> str:
    return prefix if prefix.endswith("/") else prefix + "/"


def _at(doc: Mapping[str, Any], where: tuple[str, ...]) -> Any:
    node: Any = doc
    for key in where:
        if not isinstance(node, Mapping):
            return None
        node = node.get(key)
    return node
