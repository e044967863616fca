"""Shared test helpers: example requests and the hand-written tutorial fixture."""

from __future__ import annotations

import faulthandler
import os
import signal
import sys
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
FIXTURES = Path(__file__).resolve().parent / "fixtures"


@pytest.fixture(scope="session")
def tutorials() -> dict[str, Any]:
    return yaml.safe_load((FIXTURES / "tutorials.yaml").read_text())


def minimal_request(**fields: Any) -> dict[str, Any]:
    return {"model": "gemma4-26b", "hf_repo": "google/gemma-4-26b-a4b-it", **fields}


# ---- real local servers ---------------------------------------------------------------------------


@pytest.fixture(scope="session")
def fake_gcs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """fake-gcs-server behind the strict proxy: downloads of a superseded generation fail, as on GCS."""
    from rlpipe.local.gcs import FakeGcs
    from tests.harness.strict_gcs import StrictGcs

    server = FakeGcs(tmp_path_factory.mktemp("fake-gcs")).start()
    proxy = StrictGcs(server.url).start()
    yield proxy
    proxy.stop()
    server.stop()


@dataclass
class Buckets:
    client: Any
    requests: str
    artifacts: str
    state: str
    emulator: str

    def store(self, which: str) -> Any:
        """``requests``, ``artifacts`` (what workloads write) or ``state`` (ledgers, READY.json, ...)."""
        from rlpipe.control.adapters.blobstore import BlobStore

        names = {"requests": self.requests, "artifacts": self.artifacts, "state": self.state}
        return BlobStore(self.client, names[which])

    def store_of(self, bucket: str) -> Any:
        """Any bucket by name (a request may name a gs:// file in a shared read-only bucket)."""
        from rlpipe.control.adapters.blobstore import BlobStore

        return BlobStore(self.client, bucket)

    def ledger(self) -> Any:
        """The ledger, where production keeps it: in the state bucket."""
        from rlpipe.control.lifecycle.ledger import Ledger

        return Ledger(self.store("state"))

    def env(self, **extra: str) -> dict[str, str]:
        return {
            "STORAGE_EMULATOR_HOST": self.emulator,
            "RLPIPE_PROJECT": "rlpipe-test",
            "RLPIPE_REQUESTS_BUCKET": self.requests,
            "RLPIPE_ARTIFACTS_BUCKET": self.artifacts,
            "RLPIPE_STATE_BUCKET": self.state,
            **extra,
        }


@pytest.fixture
def buckets(fake_gcs: Any, monkeypatch: pytest.MonkeyPatch) -> Buckets:
    """Fresh requests, artifacts and state buckets on the shared fake-gcs-server, reached by the
    real storage client."""
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", fake_gcs.url)
    return new_buckets(fake_gcs)


def new_buckets(fake_gcs: Any) -> Buckets:
    """Three new buckets on the shared fake-gcs-server (``STORAGE_EMULATOR_HOST`` set to it)."""
    from rlpipe.control.adapters.blobstore import make_client

    client = make_client("rlpipe-test")
    suffix = uuid.uuid4().hex[:10]
    requests_bucket = client.create_bucket(f"requests-{suffix}").name
    artifacts_bucket = client.create_bucket(f"artifacts-{suffix}").name
    state_bucket = client.create_bucket(f"state-{suffix}").name
    return Buckets(client, requests_bucket, artifacts_bucket, state_bucket, fake_gcs.url)


def emptied(buckets: Buckets) -> Buckets:
    """``buckets`` with every object deleted: fresh for the next test of a module that shares
    them with its function processes (whose settings name them)."""
    for name in (buckets.requests, buckets.artifacts, buckets.state):
        for blob in buckets.client.list_blobs(name):
            blob.delete()
    return buckets


@pytest.fixture
def executions() -> Iterator[Any]:
    from tests.harness.executions import RecordingExecutions

    server = RecordingExecutions().start()
    yield server
    server.stop()


def all_objects(store: Any) -> dict[str, bytes]:
    return {name: store.read(name, max_bytes=1 << 30).data for name in store.list("")}


def real_intake(buckets: Buckets, executions: Any, **kwargs: Any) -> Any:
    """The library's Intake on the test buckets, starting executions on the recording servicer."""
    from rlpipe.control.adapters.logs import Logger
    from rlpipe.control.adapters.orchestrator import Orchestrator
    from rlpipe.control.adapters.settings import Settings
    from rlpipe.control.lifecycle.intake import Intake
    from rlpipe.control.lifecycle.ledger import Ledger
    from rlpipe.control.sweep.coordinator import SweepCoordinator

    settings = Settings(
        project="rlpipe-test",
        workflows_endpoint=executions.target,
        requests_bucket=buckets.requests,
        artifacts_bucket=buckets.artifacts,
        state_bucket=buckets.state,
    )
    kwargs.setdefault("artifacts", buckets.store("artifacts"))
    kwargs.setdefault(
        "read_gcs", lambda bucket, name, limit: buckets.store_of(bucket).read(name, max_bytes=limit).data
    )
    ledger = Ledger(buckets.store("state"))
    kwargs.setdefault("coordinator", SweepCoordinator(ledger, Logger("test")))  # as control.services wires it
    return Intake(
        requests=buckets.store("requests"),
        ledger=ledger,
        orchestrator=Orchestrator(settings),
        log=Logger("test"),
        **kwargs,
    )


# ---- xdist workers: isolated from each other's signals, and a post-mortem when one is lost -----


def _worker_fault_log(controller_pid: int, worker: str) -> Path:
    return Path(tempfile.gettempdir()) / f"rlpipe-xdist-{controller_pid}" / f"{worker}.faults"


def pytest_configure(config: pytest.Config) -> None:
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if not worker:
        return
    # Its own process group: a test that signals a group (a shell's `kill 0`, a killpg of the
    # wrong id) can take down its own worker at worst, never the other workers or the controller.
    os.setpgrp()
    path = _worker_fault_log(os.getppid(), worker)
    path.parent.mkdir(parents=True, exist_ok=True)
    log = path.open("w")
    config.stash[_FAULT_LOG] = log
    faulthandler.enable(file=log, all_threads=True)  # a crash (SIGSEGV, SIGABRT) leaves its stacks
    for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
        faulthandler.register(signum, file=log, all_threads=True, chain=True)


def pytest_runtest_logstart(nodeid: str, location: tuple[str, int | None, str]) -> None:
    """The worker's fault log names the test it was running, so a lost worker points at it."""
    log = _current_fault_log()
    if log is not None:
        log.write(f"running {nodeid}\n")
        log.flush()


def _current_fault_log() -> Any:
    config = _CONFIG.get("config")
    return config.stash.get(_FAULT_LOG, None) if config is not None else None


def pytest_sessionstart(session: pytest.Session) -> None:
    _CONFIG["config"] = session.config


def pytest_testnodedown(node: Any, error: Any) -> None:
    """The controller's side: when a worker is lost, print what it was running and how it died."""
    if not error:
        return
    worker = node.gateway.id
    path = _worker_fault_log(os.getpid(), worker)
    text = path.read_text(errors="replace") if path.exists() else "(no fault log)"
    lines = text.splitlines()
    sys.stderr.write(f"\n[rlpipe] worker {worker} lost ({error}); its fault log {path}:\n")
    sys.stderr.write("\n".join(lines[-60:]) + "\n")


_FAULT_LOG = pytest.StashKey[Any]()
_CONFIG: dict[str, pytest.Config] = {}


# ---- tiers: `make test-fast` runs what needs no local server --------------------------------------

# Fixtures that start a real local server (fake-gcs-server, the local stack, a recording Workflows
# servicer): a test that uses one, directly or through another fixture, is an integration test.
SERVER_FIXTURES = frozenset({"fake_gcs", "local", "executions"})


# ---- scheduling across xdist workers (`--dist loadgroup`) ----------------------------------------

# Files that share one real control plane (~15 CPU-s to start, ~850 MiB, and about 4 CPU-s a minute
# while it idles): two groups, so two planes serve them all instead of one per worker. The plane
# is package-scoped (tests/cluster/real_plane/conftest.py): it stops when its worker moves on to
# another package's tests, not at the session's end.
REAL_PLANE_GROUPS = {
    "test_real_conformance.py": "real-plane-1",
    "test_real_conformance_race.py": "real-plane-1",
    "test_real_admission.py": "real-plane-1",
    "test_real_conformance_capacity.py": "real-plane-2",
    "test_real_flex_start.py": "real-plane-2",
    "test_real_teams.py": "real-plane-2",
    "test_real_team_namespaces.py": "real-plane-1",
    "test_real_kueue_reservation.py": "real-plane-2",
}
# Files with no module-scoped fixture whose tests are long each: a group per test function.
PER_TEST_GROUPS = frozenset({"test_entry_points_hostile.py"})
# Files whose every case is long and stands alone (each bench section, in its own interpreter): a
# group per case.
PER_CASE_GROUPS = frozenset({"test_bench_smoke.py"})
# The longest groups start first, longest first, so that none is left running alone at the end
# (xdist keeps this order only with --no-loadscope-reorder, in pyproject's addopts: by default it
# queues the groups with the most tests first, which left the one-test long groups for the end)
# (each over a minute of CPU alone, measured file by file: the combination suite ~180 s, each real-plane group ~170 s, the end-to-end files 40-50 s each).
LONG_FIRST = (
    "test_combinations",
    "test_real_",
    "test_bench_smoke",
    "test_e2e",
    "test_entry_points_hostile",
    "test_intake",
    "test_retry_e2e",
    "test_simulator",
    "test_reconcile",
)


def _schedule(items: list[pytest.Item]) -> None:
    """Each file is one group (a module-scoped stack starts once), except the real-plane files,
    which share theirs; long groups are queued first."""
    for item in items:
        name = item.path.name
        if name in PER_CASE_GROUPS:
            group = f"{name}::{item.name}"
        elif name in PER_TEST_GROUPS:
            group = f"{name}::{getattr(item, 'originalname', item.name)}"
        else:
            group = name
        item.add_marker(pytest.mark.xdist_group(REAL_PLANE_GROUPS.get(name, group)))
    order = {id(item): i for i, item in enumerate(items)}
    items.sort(key=lambda item: (_rank(item.path.name), order[id(item)]))


def _rank(name: str) -> int:
    return next((i for i, prefix in enumerate(LONG_FIRST) if name.startswith(prefix)), len(LONG_FIRST))


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which reads the groups into the node ids
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if SERVER_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.integration)
    _schedule(items)


# The stage function's token issuer (tests/harness/id_tokens.py), registered once for every module.
from tests.harness.id_tokens import signed_calls, token_issuer  # noqa: E402, F401
