"""Wiring: build the library's services from Settings, in one place (``Wiring``), once per process.

Function instances are reused across invocations, so clients are created on first use and
kept; nothing here runs at import time (cold starts stay cheap).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING, Any

from rlpipe.control.adapters import blobstore
from rlpipe.control.adapters.callers import TokenCheck
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


@dataclass
class Wiring:
    """The library's services for one deployment's settings, built here and nowhere else: the
    functions' (``wiring()``, once per process), the reconciler the CLI runs (``reconcile.runner.
    build``) and the CLI's own reads all take them from a ``Wiring``. ``publish`` sends a status
    message (Pub/Sub by default)."""

    settings: Settings
    client: Any  # a google.cloud.storage.Client (the library ships no types)
    publish: Callable[[str, dict[str, Any]], Any] | None = None
    _orchestrator: Orchestrator | None = field(default=None, init=False, repr=False)

    def store(self, bucket: str) -> blobstore.BlobStore:
        return blobstore.BlobStore(self.client, bucket)

    def artifacts(self) -> blobstore.BlobStore:
        """What workloads write: completeness checks read here; the control plane writes nothing here."""
        return self.store(self.settings.artifacts_bucket)

    def state(self) -> blobstore.BlobStore:
        """The control plane's records (ledgers, events, READY.json, upstream state, the cursor)."""
        return self.store(self.settings.state_bucket)

    def requests_store(self) -> blobstore.BlobStore:
        return self.store(self.settings.requests_bucket)

    def ledger(self) -> Ledger:
        return Ledger(self.state())

    def orchestrator(self) -> Orchestrator:
        if self._orchestrator is None:
            from rlpipe.control.adapters.orchestrator import Orchestrator

            self._orchestrator = Orchestrator(self.settings)
        return self._orchestrator

    def read_gcs(self, bucket: str, name: str, max_bytes: int) -> bytes:
        """One small object of any bucket the policy let a request name (a user's file)."""
        return self.store(bucket).read(name, max_bytes=max_bytes).data

    def notifier(self, log: Logger) -> Notifier:
        """Status messages, best-effort (control.adapters.notify)."""
        from rlpipe.control.adapters import notify

        return notify.Notifier(self.settings, self.publish or notify.publish, log)

    def coordinator(self, log: Logger, ledger: Ledger | None = None) -> RunCoordinator:
        """How a run coordinates with others: a sweep's children through their parent's record; any
        other run alone (``control.lifecycle.coordinator``)."""
        from rlpipe.control.sweep.coordinator import SweepCoordinator

        return SweepCoordinator(ledger or self.ledger(), log)

    def intake(self, log: Logger, ledger: Ledger | None = None) -> Intake:
        from rlpipe.control.lifecycle.intake import Intake

        ledger = ledger or self.ledger()
        return Intake(
            requests=self.requests_store(),
            ledger=ledger,
            orchestrator=self.orchestrator(),
            log=log,
            lease_seconds=self.settings.start_lease_seconds,
            notify=self.notifier(log).send,
            policy=self.settings.policy(),
            teams=self.settings.teams(),
            artifacts=self.artifacts(),
            read_gcs=self.read_gcs,
            coordinator=self.coordinator(log, ledger),
        )


@cache
def settings() -> Settings:
    return Settings.from_env()


@cache
def storage_client() -> Any:  # a google.cloud.storage.Client (the library ships no types)
    return blobstore.make_client(settings().project)


@cache
def wiring() -> Wiring:
    """This process's services, from the environment's settings (a function instance keeps them)."""
    return Wiring(settings(), storage_client())


def artifacts() -> blobstore.BlobStore:
    return wiring().artifacts()


def state() -> blobstore.BlobStore:
    return wiring().state()


def requests_store() -> blobstore.BlobStore:
    return wiring().requests_store()


def ledger() -> Ledger:
    return wiring().ledger()


def orchestrator() -> Orchestrator:
    return wiring().orchestrator()


@cache
def cluster() -> ClusterClient:
    from rlpipe.cluster import ClusterClient

    return ClusterClient.from_settings(settings())


def intake(log: Logger) -> Intake:
    return wiring().intake(log)


def coordinator(log: Logger) -> RunCoordinator:
    return wiring().coordinator(log)


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
    """The run policies over this process's settings and ledger (each read here, so that what the
    operator operations decide and what the stage operations do read the same ones)."""
    return run_policies(settings(), ledger(), state(), log)


def read_gcs(bucket: str, name: str, max_bytes: int) -> bytes:
    return wiring().read_gcs(bucket, name, max_bytes)


def notifier(log: Logger) -> Notifier:
    return wiring().notifier(log)


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


def token_check() -> TokenCheck:
    """What a caller's ID token must satisfy here (control/adapters/callers.py)."""
    s = settings()
    return TokenCheck(audiences=s.stage_audiences, certs_url=s.id_token_certs_url)


def reset() -> None:
    """Forget cached settings and clients (tests and the local stack change the environment)."""
    for fn in (settings, storage_client, wiring, cluster, cloud_log_reader):
        fn.cache_clear()
