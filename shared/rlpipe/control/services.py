"""Wiring: build the library's services from Settings, once per process.

Function instances are reused across invocations, so clients are created on first use and
kept; nothing here runs at import time (cold starts stay cheap).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import cache
from typing import TYPE_CHECKING, Any

from rlpipe.control.adapters import blobstore
from rlpipe.control.adapters.logs import Logger
from rlpipe.control.adapters.settings import Settings
from rlpipe.control.lifecycle.ledger import Ledger

if TYPE_CHECKING:
    from rlpipe.cluster import ClusterClient
    from rlpipe.control.adapters.notify import Notifier
    from rlpipe.control.adapters.orchestrator import Orchestrator
    from rlpipe.control.lifecycle.coordinator import RunCoordinator
    from rlpipe.control.lifecycle.intake import Intake
    from rlpipe.control.lifecycle.policies import RunPolicies
    from rlpipe.control.stage.service import StageService
    from rlpipe.control.stage.train_status import LogReader


@cache
def settings() -> Settings:
    return Settings.from_env()


@cache
def storage_client() -> Any:  # a google.cloud.storage.Client (the library ships no types)
    return blobstore.make_client(settings().project)


def artifacts() -> blobstore.BlobStore:
    """What workloads write: completeness checks read here; the control plane writes nothing here."""
    return blobstore.BlobStore(storage_client(), settings().artifacts_bucket)


def state() -> blobstore.BlobStore:
    """The control plane's records (ledgers, events, READY.json, upstream state, the cursor)."""
    return blobstore.BlobStore(storage_client(), settings().state_bucket)


def requests_store() -> blobstore.BlobStore:
    return blobstore.BlobStore(storage_client(), settings().requests_bucket)


def ledger() -> Ledger:
    return Ledger(state())


@cache
def orchestrator() -> Orchestrator:
    from rlpipe.control.adapters.orchestrator import Orchestrator

    return Orchestrator(settings())


@cache
def cluster() -> ClusterClient:
    from rlpipe.cluster import ClusterClient

    return ClusterClient.from_settings(settings())


def intake(log: Logger) -> Intake:
    from rlpipe.control.lifecycle.intake import Intake

    return Intake(
        requests=requests_store(),
        ledger=ledger(),
        orchestrator=orchestrator(),
        log=log,
        lease_seconds=settings().start_lease_seconds,
        notify=notifier(log).send,
        policy=settings().policy(),
        teams=settings().teams(),
        artifacts=artifacts(),
        read_gcs=read_gcs,
        coordinator=coordinator(log),
    )


def coordinator(log: Logger) -> RunCoordinator:
    """How a run coordinates with others: a sweep's children through their parent's record; any
    other run alone (``control.lifecycle.coordinator``)."""
    from rlpipe.control.sweep.coordinator import SweepCoordinator

    return SweepCoordinator(ledger(), log)


def run_policies(
    settings: Settings,
    ledger: Ledger,
    state: blobstore.BlobStore,
    log: Logger,
    *,
    clock: Callable[[], float] = time.time,
) -> RunPolicies:
    """The deployment's run policies, in the order the stage operations call them
    (``control.lifecycle.policies``): a sweep's (its slots come before a team's places: a child
    without a slot takes none), its early-stopping rule, then the team's limits."""
    from rlpipe.control.lifecycle.policies import RunPolicies
    from rlpipe.control.lifecycle.team_places import TeamPlaces
    from rlpipe.control.sweep.coordinator import SweepCoordinator
    from rlpipe.control.sweep.early_stopping import EarlyStopping

    return RunPolicies(
        (
            SweepCoordinator(ledger, log),
            EarlyStopping(ledger, log),
            TeamPlaces(settings, ledger, state, log, clock=clock),
        )
    )


def policies(log: Logger) -> RunPolicies:
    """The deployment's run policies on its own buckets (``run_policies``)."""
    return run_policies(settings(), ledger(), state(), log)


def read_gcs(bucket: str, name: str, max_bytes: int) -> bytes:
    """One small object of any bucket the policy let a request name (a user's file)."""
    return blobstore.BlobStore(storage_client(), bucket).read(name, max_bytes=max_bytes).data


def notifier(log: Logger) -> Notifier:
    """Status messages, best-effort, to Pub/Sub (control.adapters.notify)."""
    from rlpipe.control.adapters import notify

    return notify.Notifier(settings(), notify.publish, log)


def stage_service(log: Logger) -> StageService:
    from rlpipe.control.adapters import notify
    from rlpipe.control.stage.service import StageService

    return StageService(
        settings=settings(),
        ledger=ledger(),
        artifacts=artifacts(),
        state=state(),
        cluster=cluster(),
        log=log,
        publish=notify.publish,
        cloud_logs=cloud_log_reader(),
        policies=policies(log),
    )


@cache
def cloud_log_reader() -> LogReader | None:
    """The head's train_rl lines from Cloud Logging (GKE ships every container line there; the
    local stack plays it), or None where there is none."""
    from rlpipe.control.adapters import cloud_logs

    return cloud_logs.head_reader(settings())


def reset() -> None:
    """Forget cached settings and clients (tests and the local stack change the environment)."""
    for fn in (settings, storage_client, orchestrator, cluster, cloud_log_reader):
        fn.cache_clear()
