"""Deployment settings, read once from the environment: the only place that knows variable names.

Functions, the CLI and the local stack all configure themselves from these variables, so a test
or the local stack points the real code at emulators by setting the environment, nothing else.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

from rlpipe.core.presets import (
    DEFAULT_MAX_SWEEP_CHILDREN,
    DEFAULT_READ_SECRETS,
    DEFAULT_WRITE_SECRETS,
    TUTORIAL_IMAGE_PREFIXES,
)

if TYPE_CHECKING:  # the request models load only where a request is checked, not on every cold start
    from rlpipe.core.request.policy import Policy
    from rlpipe.core.teams import Teams

ENV_PREFIX = "RLPIPE_"


def _env(name: str, default: str = "") -> str:
    return os.environ.get(ENV_PREFIX + name, default).strip()


def _list(name: str, default: tuple[str, ...]) -> tuple[str, ...]:
    """A comma-separated setting; unset keeps the default, set-but-empty means none."""
    raw = os.environ.get(ENV_PREFIX + name)
    if raw is None:
        return default
    return tuple(p.strip() for p in raw.split(",") if p.strip())


def _optional_list(name: str) -> tuple[str, ...] | None:
    """A comma-separated setting whose default lives with the request checks: None when unset."""
    return None if os.environ.get(ENV_PREFIX + name) is None else _list(name, ())


def _switch(name: str) -> bool:
    """An on/off setting, off when unset; a value that is neither is refused by name, since reading
    a typo as "off" or "on" would each surprise someone."""
    raw = _env(name).lower()
    if raw in ("", "false", "0", "no", "off"):
        return False
    if raw in ("true", "1", "yes", "on"):
        return True
    raise ValueError(f"{ENV_PREFIX}{name}={raw!r} is not true or false")


def _positive(raw: str, default: float) -> float:
    """A positive number of seconds; empty, unparsable or non-positive values keep the default
    (a timeout of 0 or less would mean "never time out" to some clients, which is the bug)."""
    try:
        value = float(raw)
    except ValueError:
        return default
    return value if value > 0 else default


@dataclass(frozen=True)
class Settings:
    project: str = "rlpipe-local"
    location: str = "us-central1"
    requests_bucket: str = "rlpipe-requests"
    # What workloads write (checkpoints, exports, conversion attempts, Pathways scratch): the
    # workload identity may write here, under runs/, cache/maxtext/ and pathways/ only.
    artifacts_bucket: str = "rlpipe-artifacts"
    # The control plane's own state (ledgers, events, error records, the conversion cache's
    # READY.json, the upstream watcher's state, the reconcile cursor): workloads cannot touch it.
    state_bucket: str = "rlpipe-state"
    workflow: str = "rlpipe-pipeline"
    workflows_endpoint: str = ""  # host:port of a local Executions gRPC server; empty = Google's
    # Base URL of a local Cloud Logging API (entries.list; the local stack's stand-in), reached
    # without credentials; empty = Google's, with the function's own (control/adapters/cloud_logs.py).
    logging_endpoint: str = ""
    status_topic: str = ""  # default notification topic (a request's `notify` overrides it)
    requests_topic: str = "rlpipe-requests"
    kube_url: str = ""  # plain URL of a local API server; empty = GKE from gke_endpoint
    # A kubeconfig file (the local stack's real control plane: TLS, and the pipeline identity's
    # client certificate); it takes precedence over kube_url and the GKE endpoint.
    kubeconfig: str = ""
    gke_endpoint: str = ""
    gke_ca_cert: str = ""  # path to the cluster CA (PEM)
    namespace: str = "rlpipe"
    workload_service_account: str = "rlpipe-workload"
    stage_url: str = ""  # the `stage` function's URL (passed to the workflow by the local stack)
    # The audiences a caller's ID token may name (RLPIPE_STAGE_AUDIENCE, comma-separated): the
    # stage function's own URL, which Workflows' OIDC auth and the CLI put in ``aud``. Empty: no
    # token can be verified, so every call that carries one is refused (control/adapters/callers.py).
    stage_audiences: tuple[str, ...] = ()
    # Where the keys that sign callers' ID tokens are published: Google's; the local stack's own.
    id_token_certs_url: str = "https://www.googleapis.com/oauth2/v1/certs"
    start_lease_seconds: float = 180.0  # > the intake functions' timeout (docs/timeouts.md)
    callback_timeout_seconds: int = 300
    # Every Hugging Face Hub request (connect, and each wait for bytes) gives up after this long.
    # The client's shared session has no timeout at all (huggingface_hub 2.4.0 utils/_http.py:348),
    # and auth_check/list_repo_commits accept none; 10 s is the client's own per-request default
    # where it has one (constants.py:37-39). A function's deadline must outlast a few of these.
    hub_timeout_seconds: float = 10.0
    # Image prefixes a request may run (RLPIPE_ALLOWED_IMAGE_PREFIXES, comma-separated). Default:
    # the registries of the tutorials' images (rlpipe.core.presets).
    allowed_image_prefixes: tuple[str, ...] = TUTORIAL_IMAGE_PREFIXES
    # The deployment's TPU prices per chip-hour (RLPIPE_PRICES, JSON; rlpipe.core.cost): overrides
    # the shipped list, which has no published v6e price.
    prices_json: str = ""
    # The rest of the deployment's allowlists (rlpipe.core.request.policy; docs/security.md), each a
    # comma-separated RLPIPE_ variable: variables a request may set beyond the built-in list
    # (ALLOWED_ENV: NAME, NAME=int:LOW..HIGH or NAME=word|word, or WORD_*), the Secrets it may name (READ_TOKEN_SECRETS,
    # WRITE_TOKEN_SECRETS: name:key), shared data it may read (READ_ONLY_GCS_PREFIXES) and topics
    # outside the project it may notify (NOTIFY_TOPICS).
    allowed_env: tuple[str, ...] = ()
    read_token_secrets: tuple[str, ...] = DEFAULT_READ_SECRETS
    write_token_secrets: tuple[str, ...] = DEFAULT_WRITE_SECRETS
    read_only_gcs_prefixes: tuple[str, ...] = ()
    notify_topics: tuple[str, ...] = ()
    # Whether a request may bring Python that runs in its training pods (reward functions, a
    # dataset processor): RLPIPE_ALLOW_USER_CODE=true. Off by default (docs/security.md).
    allow_user_code: bool = False
    # The most children one sweep may make: RLPIPE_MAX_SWEEP_CHILDREN (docs/sweeps.md).
    max_sweep_children: int = DEFAULT_MAX_SWEEP_CHILDREN
    # What a request may name outside its run (rlpipe.core.request.targets; docs/security.md):
    # Hub repositories it publishes to (ALLOWED_PUBLISH_REPOS: org/ or org/name), Kueue LocalQueues
    # (ALLOWED_QUEUES), TPU reservations (ALLOWED_RESERVATIONS) and node pools (ALLOWED_NODE_POOLS).
    # None (unset): the defaults, what the presets name and the organisation the examples publish
    # to (rlpipe.core.request.targets, read only where a request is checked).
    allowed_publish_repos: tuple[str, ...] | None = None
    allowed_queues: tuple[str, ...] | None = None
    allowed_reservations: tuple[str, ...] | None = None
    allowed_node_pools: tuple[str, ...] | None = None
    # Label key prefixes a request may use beside plain names (RLPIPE_ALLOWED_LABEL_PREFIXES): none
    # by default, since a label can opt a pod into another controller's control (docs/security.md).
    allowed_label_prefixes: tuple[str, ...] = ()
    # The deployment's teams (core.teams; docs/teams.md): RLPIPE_TEAMS, the JSON Terraform renders
    # from var.teams. Empty: one team, ``default``, with the deployment-wide allowlists above.
    teams_json: str = ""
    extra: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_env(cls) -> Settings:
        project = _env("PROJECT") or os.environ.get("GOOGLE_CLOUD_PROJECT", "") or cls.project
        return cls(
            project=project,
            location=_env("LOCATION", cls.location),
            requests_bucket=_env("REQUESTS_BUCKET", cls.requests_bucket),
            artifacts_bucket=_env("ARTIFACTS_BUCKET", cls.artifacts_bucket),
            state_bucket=_env("STATE_BUCKET", cls.state_bucket),
            workflow=_env("WORKFLOW", cls.workflow),
            workflows_endpoint=_env("WORKFLOWS_ENDPOINT"),
            logging_endpoint=_env("LOGGING_ENDPOINT"),
            status_topic=_env("STATUS_TOPIC"),
            requests_topic=_env("REQUESTS_TOPIC", cls.requests_topic),
            kube_url=_env("KUBE_URL"),
            kubeconfig=_env("KUBECONFIG"),
            gke_endpoint=_env("GKE_ENDPOINT"),
            gke_ca_cert=_env("GKE_CA_CERT"),
            namespace=_env("NAMESPACE", cls.namespace),
            workload_service_account=_env("WORKLOAD_SERVICE_ACCOUNT", cls.workload_service_account),
            stage_url=_env("STAGE_URL"),
            stage_audiences=_list("STAGE_AUDIENCE", cls.stage_audiences),
            id_token_certs_url=_env("ID_TOKEN_CERTS_URL", cls.id_token_certs_url),
            start_lease_seconds=float(_env("START_LEASE_SECONDS", str(cls.start_lease_seconds))),
            callback_timeout_seconds=int(_env("CALLBACK_TIMEOUT_SECONDS", str(cls.callback_timeout_seconds))),
            hub_timeout_seconds=_positive(_env("HUB_TIMEOUT_SECONDS"), cls.hub_timeout_seconds),
            prices_json=_env("PRICES"),
            allowed_image_prefixes=_list("ALLOWED_IMAGE_PREFIXES", cls.allowed_image_prefixes),
            allowed_env=_list("ALLOWED_ENV", cls.allowed_env),
            read_token_secrets=_list("READ_TOKEN_SECRETS", cls.read_token_secrets),
            write_token_secrets=_list("WRITE_TOKEN_SECRETS", cls.write_token_secrets),
            read_only_gcs_prefixes=_list("READ_ONLY_GCS_PREFIXES", cls.read_only_gcs_prefixes),
            notify_topics=_list("NOTIFY_TOPICS", cls.notify_topics),
            allow_user_code=_switch("ALLOW_USER_CODE"),
            max_sweep_children=int(_positive(_env("MAX_SWEEP_CHILDREN"), cls.max_sweep_children)),
            allowed_publish_repos=_optional_list("ALLOWED_PUBLISH_REPOS"),
            allowed_queues=_optional_list("ALLOWED_QUEUES"),
            allowed_reservations=_optional_list("ALLOWED_RESERVATIONS"),
            allowed_node_pools=_optional_list("ALLOWED_NODE_POOLS"),
            allowed_label_prefixes=_list("ALLOWED_LABEL_PREFIXES", cls.allowed_label_prefixes),
            teams_json=os.environ.get(ENV_PREFIX + "TEAMS", "").strip(),
        )

    def teams(self) -> Teams:
        """The declared teams. Raises ``RequestInvalid`` naming each wrong field: a deployment
        with a declaration it cannot read refuses every call that needs it rather than run as one
        team. Read and checked once per Settings: the stage operations ask for a run's namespace
        several times a call."""
        return self._declared_teams

    @cached_property
    def _declared_teams(self) -> Teams:
        from rlpipe.core.problems import Problem
        from rlpipe.core.request.policy import SettingsInvalid
        from rlpipe.core.teams import parse_teams

        source = ENV_PREFIX + "TEAMS"
        teams = parse_teams(
            self.teams_json, source=source, project=self.project, deployment_topics=self._own_topics()
        )
        deployment = self.policy() if teams.declared else None
        problems: list[Problem] = []
        for team in teams:  # a list no request could ever satisfy (``extra_env: ["*"]``): refused now
            try:
                deployment.for_team(team)  # type: ignore[union-attr]
            except SettingsInvalid as exc:
                problems += [
                    Problem(f"{source}.{team.name}", f"{p.path}: {p.message}", p.fix) for p in exc.problems
                ]
        if problems:
            raise SettingsInvalid(problems)
        return teams

    def _own_topics(self) -> dict[str, str]:
        """The deployment's own topics by setting: no team may take one as its requests topic."""
        named = {"REQUESTS_TOPIC": self.requests_topic, "STATUS_TOPIC": self.status_topic}
        return {ENV_PREFIX + name: topic for name, topic in named.items() if topic}

    def _topics_it_reads(self) -> tuple[str, ...]:
        """Every topic whose messages the deployment acts on (policy.deployment_topics), its teams'
        requests topics among them; a declaration that cannot be read adds none here, and is
        refused by ``teams()`` itself."""
        from rlpipe.core.problems import RequestInvalid
        from rlpipe.core.request.policy import deployment_topics
        from rlpipe.core.teams import Teams, parse_teams

        try:
            teams = parse_teams(self.teams_json, source=ENV_PREFIX + "TEAMS", project=self.project)
        except RequestInvalid:
            teams = Teams(project=self.project)
        return deployment_topics(self.project, self.requests_topic, teams)

    def policy(self, source: str = "this deployment's settings") -> Policy:
        """The allowlists a request is checked against. Raises ``SettingsInvalid`` (a
        ``RequestInvalid``) for a setting that can never be right, such as ``RLPIPE_ALLOWED_ENV=*``:
        the deployment is refused when it loads, not each request."""
        from rlpipe.core.request import targets
        from rlpipe.core.request.policy import Policy

        def given(value: tuple[str, ...] | None, default: tuple[str, ...]) -> tuple[str, ...]:
            return default if value is None else value  # set but empty: none allowed

        return Policy(
            project=self.project,
            artifacts_bucket=self.artifacts_bucket,
            image_prefixes=self.allowed_image_prefixes,
            extra_env=self.allowed_env,
            read_secrets=self.read_token_secrets,
            write_secrets=self.write_token_secrets,
            read_only_gcs=self.read_only_gcs_prefixes,
            notify_topics=self.notify_topics,
            status_topic=self.status_topic,
            reserved_topics=self._topics_it_reads(),
            allow_user_code=self.allow_user_code,
            max_sweep_children=self.max_sweep_children,
            publish_repos=given(self.allowed_publish_repos, targets.DEFAULT_PUBLISH_REPOS),
            queues=given(self.allowed_queues, targets.DEFAULT_QUEUES),
            reservations=given(self.allowed_reservations, targets.DEFAULT_RESERVATIONS),
            node_pools=given(self.allowed_node_pools, targets.DEFAULT_NODE_POOLS),
            label_prefixes=self.allowed_label_prefixes,
            source=source,
        )

    @property
    def workflow_path(self) -> str:
        return f"projects/{self.project}/locations/{self.location}/workflows/{self.workflow}"

    def topic_path(self, topic: str) -> str:
        return topic if topic.startswith("projects/") else f"projects/{self.project}/topics/{topic}"

    @property
    def local(self) -> bool:
        """Talking to emulators: anonymous credentials everywhere."""
        return (
            bool(os.environ.get("RLPIPE_LOCAL"))
            or bool(os.environ.get("STORAGE_EMULATOR_HOST"))
            or bool(self.kube_url)
            or bool(self.workflows_endpoint)
        )
