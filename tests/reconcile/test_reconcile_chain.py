"""The reconciler's real chain (shared with ``bench/reconcile_1000.py``), and tests of its parts:
fake-gcs-server buckets, the Kubernetes API double with the real client, and the local Workflows
engine serving the Executions API to the production ``ExecutionsClient``.

The workflow definition is tiny on purpose: what an execution does is chosen by its run id, so
the production ``Orchestrator.start(run_id)`` produces every state the reconciler must handle: the
``rfail…`` ids its ``outcomes`` map names FAILED with a pipeline-shaped error map, the ``rdone…``
ones SUCCEEDED, any other ACTIVE (asleep) until it is cancelled. (A map, not a regular expression:
the engine plays the standard library the pipeline calls, which has no ``text`` functions.)
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest

from rlpipe.cluster import ClusterClient
from rlpipe.control.adapters import blobstore
from rlpipe.control.adapters.logs import Logger
from rlpipe.control.adapters.orchestrator import Orchestrator
from rlpipe.control.adapters.settings import Settings
from rlpipe.control.lifecycle.intake import Intake
from rlpipe.control.lifecycle.ledger import Ledger
from rlpipe.core.manifests import RenderContext, render
from rlpipe.core.request import validate_request
from rlpipe.core.runs.record import Attempt, Execution, RunRecord, Source
from rlpipe.local.kube_api import KubeApiServer
from rlpipe.local.workflows import LocalWorkflows, RealClock
from rlpipe.reconcile.cursor import Cursor, CursorStore
from rlpipe.reconcile.runner import Reconciler
from tests.harness.patience import ceiling

NS = "rlpipe"
PROJECT, LOCATION, WORKFLOW = "p1", "us-central1", "pipeline"
GONE_PREFIX = (
    f"projects/{PROJECT}/locations/{LOCATION}/workflows/{WORKFLOW}/executions/"  # + an id nobody started
)
REQUEST = validate_request({"model": "gemma4-26b", "hf_repo": "google/gemma-4-26b-a4b-it"})

DEFINITION = """
main:
  params: [args]
  steps:
    - init:
        assign:
          - outcomes:
              rfail0000001: fail
              rfail0000002: fail
              rdone0000001: done
              rdone0000002: done
              rdone0000003: done
    - route:
        switch:
          - condition: ${map.get(outcomes, args.run_id) == "fail"}
            next: fail
          - condition: ${map.get(outcomes, args.run_id) == "done"}
            next: done
    - wait:
        call: sys.sleep
        args:
          seconds: 86400
    - done:
        return:
          run_id: ${args.run_id}
          outcome: succeeded
    - fail:
        raise:
          tags: ["resources"]
          message: ${"train pod of " + args.run_id + " was OOMKilled twice; resources budget exhausted"}
          stage: train
          attempt: 2
"""


def workflows_engine() -> LocalWorkflows:
    return LocalWorkflows(
        DEFINITION, workflow_id=WORKFLOW, project=PROJECT, location=LOCATION, clock=RealClock()
    )


def stamp(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass
class Chain:
    store: blobstore.BlobStore  # the state bucket: ledgers and the cursor
    kube: KubeApiServer
    workflows: LocalWorkflows
    settings: Settings
    published: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.ledger = Ledger(self.store)
        # What workloads write (exports), on the same client as the state bucket.
        self.artifacts = blobstore.BlobStore(self.store.client, self.settings.artifacts_bucket)
        self.orchestrator = Orchestrator(self.settings)
        self.cluster = ClusterClient.from_settings(self.settings, sleep=lambda s: None)

    def reconciler(
        self,
        *,
        clock: Callable[[], float] = time.time,
        orchestrator: Orchestrator | None = None,
        **kwargs: Any,
    ) -> Reconciler:
        orchestrator = orchestrator or self.orchestrator
        intake = Intake(
            requests=self.store,
            ledger=self.ledger,
            orchestrator=orchestrator,
            log=Logger("intake"),
            clock=clock,
        )
        return Reconciler(
            settings=self.settings,
            ledger=self.ledger,
            artifacts=self.artifacts,
            orchestrator=orchestrator,
            cluster=kwargs.pop("cluster", self.cluster),
            intake=intake,
            log=Logger("reconcile"),
            publish=lambda topic, msg: self.published.append((topic, msg)),
            clock=clock,
            **kwargs,
        )

    # ---- building a world ------------------------------------------------------------------------

    def run(
        self,
        run_id: str,
        state: str = "training",
        *,
        execution: str | None = None,
        age: float = 3600,
        attempts: tuple[tuple[str, int, float], ...] = (),
        lease_until: float | None = None,
        write_event: bool = True,
    ) -> RunRecord:
        """A ledger as the pipeline would have left it; ``attempts`` are (stage, attempt, seconds ago)."""
        now = time.time()
        record = RunRecord(
            run_id=run_id,
            key=f"test:{run_id}",
            source=Source(kind="cli"),
            request=REQUEST.model_dump(mode="json"),
            state=state,
            created_at=stamp(now - age),
            updated_at=stamp(now - age),
            execution=Execution(
                name=execution,
                started_at=stamp(now - age) if execution else None,
                lease_holder="crashed-intake" if lease_until else None,
                lease_until=lease_until,
            ),
            attempts=[
                Attempt(stage=s, attempt=n, workload=f"{run_id}-{s}-a{n}", launched_at=stamp(now - ago))
                for s, n, ago in attempts
            ],
        )
        if attempts:
            record.stage, record.attempt = attempts[-1][0], attempts[-1][1]
        if write_event:
            assert self.ledger.claim(record)
        else:
            assert (
                self.store.create(
                    self.ledger.layout(run_id).ledger, blobstore.dumps(record.model_dump(mode="json"))
                )
                is not None
            )
        return record

    def runs(self, records: list[tuple[str, dict[str, Any]]], workers: int = 16) -> None:
        """Many small ledgers at once (one object each), for the load test and the bench."""
        with ThreadPoolExecutor(workers) as pool:
            list(pool.map(lambda item: self.run(item[0], write_event=False, **item[1]), records))

    def start(self, run_id: str) -> str:
        return self.orchestrator.start(run_id)

    def settled(self, name: str, timeout: float = ceiling(5)) -> str:
        """Wait until the execution left ACTIVE; its final state."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            info = self.orchestrator.get(name)
            if info is not None and info.state != "ACTIVE":
                return info.state
            time.sleep(0.01)
        raise AssertionError(f"{name} is still ACTIVE")

    def workload(self, run_id: str, stage: str, attempt: int) -> dict[str, Any]:
        obj = render(
            REQUEST, stage, attempt, RenderContext(run_id=run_id, bucket=self.store.bucket_name, namespace=NS)
        )  # type: ignore[arg-type]
        return self.cluster.apply(obj)

    def objects(self) -> list[dict[str, Any]]:
        return sorted(
            self.kube.list("jobs", namespace=NS) + self.kube.list("jobsets", namespace=NS),
            key=lambda o: (o["kind"], o["metadata"]["name"]),
        )

    def exists(self, kind: str, name: str) -> bool:
        return self.kube.find("jobsets" if kind == "JobSet" else "jobs", name, namespace=NS) is not None

    def history(self, run_id: str) -> list[str]:
        return [e["event"] for e in self.ledger.history(run_id)]

    def executions_of(self, run_id: str) -> list[Any]:
        return [e for e in self.workflows.engine.executions() if (e.argument or {}).get("run_id") == run_id]

    def clear_cluster(self) -> None:
        for obj in self.objects():
            self.kube.delete(
                "jobs" if obj["kind"] == "Job" else "jobsets", obj["metadata"]["name"], namespace=NS
            )


def chain_settings(
    artifacts: str, requests: str, kube: KubeApiServer, workflows: LocalWorkflows, *, state: str
) -> Settings:
    return Settings(
        project=PROJECT,
        location=LOCATION,
        workflow=WORKFLOW,
        workflows_endpoint=workflows.grpc_target,
        artifacts_bucket=artifacts,
        state_bucket=state,
        requests_bucket=requests,
        namespace=NS,
        kube_url=kube.url,
        status_topic="rlpipe-status",
    )


# ---- fixtures (module-scoped servers, fresh buckets per test; other modules import them by name) ---------------------------------------


@pytest.fixture(scope="module", name="kube")
def kube_server() -> Iterator[KubeApiServer]:
    with KubeApiServer() as server:
        yield server


@pytest.fixture(scope="module", name="workflows")
def local_workflows() -> Iterator[LocalWorkflows]:
    with workflows_engine() as engine:
        yield engine


@pytest.fixture(name="chain")
def chain_fixture(buckets: Any, kube: KubeApiServer, workflows: LocalWorkflows) -> Chain:
    made = Chain(
        buckets.store("state"),
        kube,
        workflows,
        chain_settings(buckets.artifacts, buckets.requests, kube, workflows, state=buckets.state),
    )
    made.clear_cluster()
    return made


# ---- the parts ---------------------------------------------------------------------------------------


def test_the_definition_yields_every_execution_state(chain: Chain) -> None:
    failed, done, waiting = (
        chain.start("rfail0000001"),
        chain.start("rdone0000001"),
        chain.start("rwait0000001"),
    )
    assert chain.settled(failed) == "FAILED" and chain.settled(done) == "SUCCEEDED"
    assert chain.orchestrator.get(waiting).state == "ACTIVE"
    assert chain.orchestrator.cancel(waiting) and chain.settled(waiting) == "CANCELLED"
    assert "OOMKilled" in (chain.orchestrator.get(failed).error or "")
    assert chain.orchestrator.get(failed.rsplit("/", 1)[0] + "/gone") is None


def test_run_ids_are_listed_in_pages_after_a_cursor(chain: Chain) -> None:
    ids = [f"rpage{n:07d}" for n in range(7)]
    for run_id in ids:
        chain.run(run_id, "succeeded")
    chain.store.put(f"runs/{ids[2]}/hf/model.safetensors", b"x")  # a run's other objects are not listed
    first = chain.ledger.list_run_ids_page("", 3)
    assert first.run_ids == ids[:3] and first.more
    second = chain.ledger.list_run_ids_page(first.run_ids[-1], 3)
    assert second.run_ids == ids[3:6] and second.more
    last = chain.ledger.list_run_ids_page(second.run_ids[-1], 3)
    assert last.run_ids == ids[6:] and not last.more
    assert chain.ledger.list_run_ids_page(ids[-1], 3).run_ids == []


def test_peek_reads_the_record_in_one_request_and_none_when_absent(chain: Chain) -> None:
    written = chain.run("rpeek0000001", "training", execution=GONE_PREFIX + "x")
    assert chain.ledger.peek("rpeek0000001") == chain.ledger.get("rpeek0000001") == written
    assert chain.ledger.peek("rpeek0000002") is None


def test_a_run_id_that_extends_the_cursor_is_not_skipped(chain: Chain) -> None:
    for run_id in ("rab", "rab0", "rabc", "rb"):
        chain.store.put(f"runs/{run_id}/run.json", b"{}")
    assert chain.ledger.list_run_ids_page("rab", 10).run_ids == ["rab0", "rabc", "rb"]


def test_the_cursor_is_written_with_compare_and_swap(chain: Chain) -> None:
    cursors = CursorStore(chain.store)
    cursor, generation = cursors.load()
    assert cursor == Cursor() and generation is None
    assert cursors.save(Cursor(after="rb"), None)
    assert not cursors.save(Cursor(after="ra"), None)  # someone created it first
    cursor, generation = cursors.load()
    assert cursor.after == "rb"
    assert cursors.save(Cursor(after="rc", round=1), generation)
    assert not cursors.save(Cursor(after="ra"), generation)  # stale generation: never moves back
    assert cursors.load()[0].after == "rc"
    chain.store.put(cursors.name, b"not json")
    assert cursors.load()[0] == Cursor()  # unreadable: a new round, not a failing tick
