"""Deterministic names: idempotency key → run id → workload names and labels.

Everything that must be found again later (after a crash, a duplicate event or a reconcile
pass) is derived from the idempotency key rather than stored or generated at random, so two
deliveries of one request compute the same run id and the same workload names.
"""

from __future__ import annotations

import base64
import hashlib
import re
from typing import Literal, TypeGuard

Stage = Literal["convert", "train", "export", "publish"]
# Every stage a run can have, in order; ``publish`` only when the request asks for it.
STAGES: tuple[Stage, ...] = ("convert", "train", "export", "publish")
MAXTEXT_STAGES: tuple[Stage, ...] = ("convert", "train", "export")


def stages_for(*, publish: bool) -> tuple[Stage, ...]:
    """The stages a request with these sections runs, in order: the one place that decides it (the
    manifests, the retry rounds and the CLI's summary ask here), so that a new optional stage is
    one argument more, which the type checker then asks of every caller."""
    return STAGES if publish else MAXTEXT_STAGES


LABEL_RUN = "rlpipe.dev/run"
LABEL_STAGE = "rlpipe.dev/stage"
LABEL_ATTEMPT = "rlpipe.dev/attempt"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
# The team whose run it is (core.teams; ``default`` without teams): cost allocation and any
# per-team view of the cluster group by it. The source decides it; a request's own labels cannot
# set it (core.request.checks reserves rlpipe.dev/).
LABEL_TEAM = "rlpipe.dev/team"
LABEL_QUEUE = "kueue.x-k8s.io/queue-name"

RUN_ID_LENGTH = 12
MAX_WORKLOAD_NAME = 28  # Cluster Toolkit's limit for JobSets: pod names must stay within 63 characters


def key_for_request_id(request_id: str, namespace: str = "") -> str:
    """A request_id names a run only within its submitter's namespace (``layout.request_namespace``):
    one team's folder cannot take another's id. The default namespace keeps the key it always had,
    so runs submitted before namespaces existed keep their run ids. Upstream releases have keys of
    their own (``upstream.release.release_key``); their templates may not carry a request_id."""
    return f"request:{namespace}/{request_id}" if namespace else f"request:{request_id}"


def key_for_object(bucket: str, name: str, generation: int | str) -> str:
    return f"gcs:{bucket}/{name}#{generation}"


def key_for_message(topic: str, message_id: str) -> str:
    return f"pubsub:{topic}/{message_id}"


NAMESPACE_PATTERN = re.compile(r"^[a-z0-9][a-z0-9-]{0,39}$")


def is_namespace(value: object) -> bool:
    """A team folder name the CLI will drop under (``requests/<namespace>/``)."""
    return isinstance(value, str) and NAMESPACE_PATTERN.fullmatch(value) is not None


# Every id run_id_for makes matches, and so does any DNS-label-like id a test or tool picks; a
# caller's text outside it is refused without being echoed.
RUN_ID_PATTERN = re.compile(r"^[a-z][a-z0-9-]{0,39}$")


def is_run_id(value: object) -> TypeGuard[str]:
    """Shaped like a run id: lowercase letters, digits and '-', at most 40 characters."""
    return isinstance(value, str) and RUN_ID_PATTERN.match(value) is not None


# Exactly the ids run_id_for makes: what a delivery can produce (a mistyped id is told at once).
PRODUCED_RUN_ID_PATTERN = re.compile(rf"^r[a-z2-7]{{{RUN_ID_LENGTH - 1}}}$")


def could_be_produced(value: str) -> bool:
    """Whether some delivery could have this id (``run_id_for``'s alphabet and length)."""
    return PRODUCED_RUN_ID_PATTERN.fullmatch(value) is not None


def run_id_for(key: str) -> str:
    """``r`` + 11 base32 characters of SHA-256(key): short, lowercase, DNS-safe, starts with a letter."""
    digest = hashlib.sha256(key.encode("utf-8")).digest()
    return "r" + base64.b32encode(digest).decode("ascii").lower()[: RUN_ID_LENGTH - 1]


def workload_name(run_id: str, stage: Stage, attempt: int) -> str:
    if attempt < 1:
        raise ValueError(f"attempt must be >= 1, got {attempt}")
    name = f"{run_id}-{stage}-a{attempt}"
    if len(name) > MAX_WORKLOAD_NAME:
        raise ValueError(f"workload name {name!r} is longer than {MAX_WORKLOAD_NAME} characters")
    return name


def network_subdomain(run_id: str, attempt: int) -> str:
    """A train JobSet's network subdomain: short, and unique per attempt.

    JobSet stamps ``<jobset>-pathways-head-0-0.<subdomain>`` into the label
    ``jobset.sigs.k8s.io/coordinator`` on every child Job and pod (v0.10.1
    ``pkg/controllers/jobset_controller.go`` ``coordinatorEndpoint``/``GetSubdomain``), and a label
    value has at most 63 characters. With the default subdomain (the JobSet's own name) that is
    twice the name plus 19: over 63 from attempt 100 on, and v0.10.1 never validates it: every
    Job create fails, logged only, while Kueue holds the quota. With this subdomain the endpoint
    stays within 63 characters up to attempt 99,999. Each attempt has its own, because the JobSet
    creates (and its deletion removes) a headless Service of that name.
    """
    return f"{run_id}-a{attempt}"


def run_labels(run_id: str, stage: Stage, attempt: int, team: str) -> dict[str, str]:
    """Labels on every object of a run, so cleanup and reconciliation work by selector, and a
    cluster's cost and usage can be read by team."""
    return {
        LABEL_RUN: run_id,
        LABEL_STAGE: stage,
        LABEL_ATTEMPT: str(attempt),
        LABEL_TEAM: team,
        LABEL_MANAGED_BY: "rlpipe",
    }


def run_selector(run_id: str) -> str:
    return f"{LABEL_RUN}={run_id}"
