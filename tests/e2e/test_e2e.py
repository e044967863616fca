"""End to end on the local stack, the real chain: GCS drop → notifications → shim → functions →
Workflows engine → stage → Kubernetes API double → simulator (writes to GCS) → events → callbacks.

One stack serves the module; each test sets its own faults (for workloads created from then on)
and submits a request with its own request_id, so runs never share state.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from rlpipe.cli import runs
from rlpipe.cli import submit as submit_cli
from rlpipe.control.adapters.blobstore import BlobStore, make_client
from rlpipe.control.adapters.identities import WORKFLOW_IDENTITY_ENV
from rlpipe.control.adapters.settings import Settings
from rlpipe.control.lifecycle.ledger import Ledger
from rlpipe.core import chip_hours, identity, layout
from rlpipe.core.runs.record import RunRecord
from rlpipe.local import pubsub
from rlpipe.local.identities import OPERATOR_IDENTITY_ENV, SIGNING_KEY_ENV, played_id_token
from rlpipe.local.stack import LocalStack, StackConfig
from tests.conftest import ROOT, minimal_request
from tests.harness.functions import gcs_event, post
from tests.harness.patience import ceiling, wait_until

pytestmark = pytest.mark.slow
PUBSUB_MISSING = pubsub.unavailable_reason()
# CI builds pstest (make test → components-if-go): there, Pub/Sub is required, never skipped.
EVENTS = "pubsub" if os.environ.get("CI") == "true" else "auto"
FAST_RETRY = {"backoff": {"initial_delay": 1.0, "max_delay": 2.0, "multiplier": 1.5}}


class Local:
    def __init__(self, stack: LocalStack, tmp: Path):
        self.stack, self.tmp = stack, tmp
        assert stack.state is not None
        self.state = stack.state
        os.environ.update(self.state.env)
        self.settings = Settings.from_env()
        self.client = make_client(self.settings.project)
        self.ledger = Ledger(BlobStore(self.client, self.settings.state_bucket))

    def request(self, *, fresh_cache: bool = False, **fields: Any) -> Path:
        """A request file; ``fresh_cache`` gives it its own conversion-cache key (an image tag only
        it uses), so its conversion really runs instead of hitting an earlier test's cache."""
        fields.setdefault("request_id", f"e2e-{uuid.uuid4().hex[:12]}")
        if fresh_cache:
            fields["image"] = (
                f"us-docker.pkg.dev/cloud-tpu-images/maxtext-images/tpu_post_training:{fields['request_id']}"
            )
        fields.setdefault("retry", FAST_RETRY)
        path = self.tmp / f"{fields['request_id']}.yaml"
        path.write_text(yaml.safe_dump(minimal_request(**fields)))
        return path

    def submit(self, path: Path, via: str = "gcs") -> str:
        return submit_cli.submit(self.settings, path, via=via, storage_client=self.client).run_id

    def wait(self, run_id: str, expected: float = 15, until: Any = None) -> RunRecord:
        timeout = ceiling(expected)
        deadline = time.monotonic() + timeout
        record = None
        while time.monotonic() < deadline:
            record = self.ledger.get(run_id)
            if record is not None and (until(record) if until else record.terminal):
                return record
            time.sleep(0.25)
        raise AssertionError(
            f"run {run_id} not done in {timeout}s: {record and runs.describe(record)}\n{self.stack.logs}"
        )

    def executions_of(self, run_id: str) -> int:
        """Executions started for a run, counted through the real ExecutionsClient."""
        from google.cloud.workflows.executions_v1 import ExecutionView, ListExecutionsRequest

        from rlpipe.control.adapters.orchestrator import Orchestrator

        client = Orchestrator(self.settings).client
        listing = client.list_executions(
            request=ListExecutionsRequest(parent=self.settings.workflow_path, view=ExecutionView.FULL)
        )
        return sum(1 for e in listing if json.loads(e.argument or "{}").get("run_id") == run_id)

    def workloads(self) -> list[str]:
        url = self.state.endpoints["simulator control"] + "/workloads"
        return list(requests.get(url, timeout=10).json()["workloads"])

    def assert_consistent(self, record: RunRecord, state: str) -> None:
        assert record.state == state, runs.describe(record)
        assert record.execution.name, "every run has its execution recorded"
        history = [e["event"] for e in self.ledger.history(record.run_id)]
        assert history[0] == "accepted" and history.count("accepted") == 1
        assert history[-1] == state or state in history
        launched = [e for e in self.ledger.history(record.run_id) if e["event"] == "launched"]
        assert sorted((e["stage"], e["attempt"]) for e in launched) == sorted(
            (a.stage, a.attempt) for a in record.attempts
        ), "every attempt is recorded once"
        assert all(a.uid for a in record.attempts)
        # Cleanup runs on every terminal path (the workflow's, or `rlpipe cancel`).
        deadline = time.monotonic() + ceiling(2)
        while time.monotonic() < deadline and [w for w in self.workloads() if w.startswith(record.run_id)]:
            time.sleep(0.2)
        assert not [w for w in self.workloads() if w.startswith(record.run_id)], "objects left in the cluster"


def running_stack(root: Path, **config: Any) -> Iterator[Local]:
    """A local stack under ``root`` for a test module (``config``: more of its StackConfig), the
    process environment it sets put back when it stops."""
    saved = dict(os.environ)
    stack = LocalStack(
        StackConfig(root=root, **{"poll_seconds": 1, "timing": "fast", "events": EVENTS, **config}),
        say=lambda text: None,
    )
    stack.start()
    try:
        yield Local(stack, root)
    finally:
        stack.stop()
        os.environ.clear()
        os.environ.update(saved)


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Local]:
    yield from running_stack(tmp_path_factory.mktemp("local-stack"))


@pytest.fixture
def faults(local: Local) -> Iterator[Any]:
    """Sets the simulator's faults, and its timing: ``fast`` unless the test is about time (a
    disruption that must land mid-training, a state that must be seen while it lasts)."""

    def apply(specs: list[Any], *, timing: str = "fast") -> dict[str, Any]:
        local.stack.set_timing(timing)
        return local.stack.set_faults(specs)

    yield apply
    local.stack.set_faults([])
    local.stack.set_timing("fast")


def test_happy_path_by_file_drop(local: Local, faults: Any) -> None:
    faults([])
    run_id = local.submit(local.request(fresh_cache=True))
    record = local.wait(run_id)
    local.assert_consistent(record, "succeeded")
    assert [(a.stage, a.attempt, a.phase) for a in record.attempts] == [
        ("convert", 1, "succeeded"),
        ("train", 1, "succeeded"),
        ("export", 1, "succeeded"),
    ]
    bucket = local.client.bucket(local.settings.artifacts_bucket)
    index = json.loads(bucket.blob(f"runs/{run_id}/hf/model.safetensors.index.json").download_as_bytes())
    for shard in set(index["weight_map"].values()):
        assert bucket.blob(f"runs/{run_id}/hf/{shard}").exists()
    # The export Job's last step wrote the manifest after every file, listing each at its size.
    hf = {b.name: b for b in local.client.list_blobs(bucket, prefix=f"runs/{run_id}/hf/")}
    manifest = hf.pop(f"runs/{run_id}/hf/rlpipe-export.json")
    listed = {f["path"]: f["size"] for f in json.loads(manifest.download_as_bytes())["files"]}
    assert {f"runs/{run_id}/hf/{p}": n for p, n in listed.items()} == {n: b.size for n, b in hf.items()}
    assert manifest.generation > max(b.generation for b in hf.values())
    assert record.lineage.final_step == 50 and record.lineage.export_uri.endswith(f"/runs/{run_id}/hf/")
    assert record.progress.get("step") == 50 and record.progress.get("mean_reward") is not None


def test_happy_path_by_pubsub(local: Local, faults: Any) -> None:
    if PUBSUB_MISSING is not None:
        if EVENTS == "pubsub":
            pytest.fail(f"CI builds pstest, but: {PUBSUB_MISSING}")
        pytest.skip(f"Pub/Sub unavailable: {PUBSUB_MISSING}")
    assert local.stack.pubsub is not None, "the notifications went through Pub/Sub, not a bucket watcher"
    faults([])
    run_id = local.submit(local.request(), via="pubsub")
    record = local.wait(run_id)
    local.assert_consistent(record, "succeeded")
    assert record.source.kind == "pubsub" and record.source.message_id


def test_three_drops_and_a_redelivered_event_make_one_run(local: Local, faults: Any) -> None:
    faults([])
    path = local.request()
    run_ids = {local.submit(path) for _ in range(3)}
    assert len(run_ids) == 1
    run_id = run_ids.pop()
    record = local.wait(run_id, until=lambda r: r.execution.name is not None)
    blob = next(local.client.list_blobs(local.settings.requests_bucket, prefix=f"requests/{path.stem}"))
    redelivered = gcs_event(local.settings.requests_bucket, blob.name, blob.generation, blob.size)
    assert post(local.state.endpoints["function intake_object"], redelivered).status_code == 200
    record = local.wait(run_id)
    local.assert_consistent(record, "succeeded")
    assert local.executions_of(run_id) == 1


def test_the_stacks_pages_folder_is_its_own_and_the_cli_is_told(local: Local) -> None:
    """`rlpipe report` without -o wrote into the current folder (the repository's root in a demo):
    the stack names its own pages folder in the environment the CLI loads (cli/output_files.py)."""
    assert local.state.env["RLPIPE_PAGES_DIR"] == str(local.stack.root / "pages")


def test_executions_are_listed_by_the_real_client(local: Local) -> None:
    assert local.executions_of("r-no-such-run") == 0


def test_preempted_training_resumes_from_the_last_committed_step(local: Local, faults: Any) -> None:
    faults(["train:1:preempt@70"], timing="demo")
    run_id = local.submit(local.request(training={"num_batches": 120}))
    record = local.wait(run_id, expected=30)
    local.assert_consistent(record, "succeeded")
    train = [a for a in record.attempts if a.stage == "train"]
    assert [(a.attempt, a.failure_class) for a in train] == [(1, "preempted"), (2, None)]
    assert train[1].resume_step == 50, "attempt 2 resumes from the step-50 checkpoint"
    # Every attempt held the slice for a while: each has its own chip-hours, the resumed one too.
    assert all(a.chip_hours and a.chip_hours > 0 for a in train), [(a.attempt, a.chip_hours) for a in train]
    # Each attempt's evaluations are kept with its number, the resumed attempt's too.
    assert {e.get("attempt") for e in record.results["intermediate"]} == {1, 2}, record.results[
        "intermediate"
    ]


def test_kueue_eviction_mid_train_resumes_from_the_last_committed_step(local: Local, faults: Any) -> None:
    """Kueue preempts the running training JobSet at step 70 (suspends it, EvictedDueToPreempted on
    its Workload, Stopped on the JobSet): attempt 1 is ``preempted``, not "never admitted", and
    attempt 2 resumes from the step-50 checkpoint."""
    faults(["train:1:evict@70"], timing="demo")
    run_id = local.submit(local.request(training={"num_batches": 120}))
    record = local.wait(run_id, expected=30)
    local.assert_consistent(record, "succeeded")
    train = [a for a in record.attempts if a.stage == "train"]
    assert [(a.attempt, a.failure_class) for a in train] == [(1, "preempted"), (2, None)]
    assert "evicted by Kueue" in train[0].reason and "Preempted" in train[0].reason
    assert train[1].resume_step == 50, "attempt 2 resumes from the step-50 checkpoint"


def test_unschedulable_then_admitted_is_visible_as_queued(local: Local, faults: Any) -> None:
    faults(["convert:1:unschedulable:3000"], timing="demo")
    run_id = local.submit(local.request(fresh_cache=True))
    queued = local.wait(
        run_id, until=lambda r: any(a.stage == "convert" and a.phase == "queued" for a in r.attempts)
    )
    assert runs.describe(queued)["stages"][0]["phase"] == "queued"
    record = local.wait(run_id)
    local.assert_consistent(record, "succeeded")
    assert [a.attempt for a in record.attempts if a.stage == "convert"] == [1], "waiting is not a failure"


def test_oom_in_convert_is_retried_once_then_fails(local: Local, faults: Any) -> None:
    faults(["convert:oom"])
    run_id = local.submit(local.request(fresh_cache=True))
    record = local.wait(run_id)
    local.assert_consistent(record, "failed")
    convert = [a for a in record.attempts if a.stage == "convert"]
    assert [a.failure_class for a in convert] == ["resources", "permanent"]
    assert "OOMKilled" in convert[0].reason and "resources budget of 1 exhausted" in record.failure.message


def test_exit_1_in_train_fails_without_retry(local: Local, faults: Any) -> None:
    faults(["train:exit:1"])
    run_id = local.submit(local.request())
    record = local.wait(run_id)
    local.assert_consistent(record, "failed")
    assert [a.attempt for a in record.attempts if a.stage == "train"] == [1]
    assert record.failure.tag == "permanent" and "exited with code 1" in record.failure.message
    assert record.failure.stage == "train"
    # The program's own last words, from its log (the container's FallbackToLogsOnError message):
    # the error it printed and its exit, not the exit code alone.
    said = record.failure.message.split("exited with code 1 (Error): ", 1)[1]
    assert "ERROR: simulated fault: the program exits with status 1" in said, said
    assert "train_rl exited with status 1" in said, said


def test_image_pull_error_fails_the_run(local: Local, faults: Any) -> None:
    faults(["convert:image-pull"])
    run_id = local.submit(local.request(fresh_cache=True))
    record = local.wait(run_id)
    local.assert_consistent(record, "failed")
    assert record.failure.tag == "permanent" and (
        "ErrImagePull" in record.failure.message or "ImagePullBackOff" in record.failure.message
    )


def test_kubernetes_api_5xx_burst_is_absorbed(local: Local, faults: Any) -> None:
    faults(["convert:api-5xx:4"])
    run_id = local.submit(local.request(fresh_cache=True))
    record = local.wait(run_id)
    local.assert_consistent(record, "succeeded")
    assert [a.attempt for a in record.attempts if a.stage == "convert"] == [1]


def test_dropped_convert_events_are_finished_by_polling(local: Local, faults: Any) -> None:
    faults(["drop-events:convert"])
    run_id = local.submit(local.request(fresh_cache=True))
    record = local.wait(run_id)
    local.assert_consistent(record, "succeeded")
    artifact_log = (local.stack.logs / "artifact_event.log").read_text()
    sent = [json.loads(line) for line in artifact_log.splitlines() if line.startswith("{")]
    stages_woken = {(e.get("run_id"), e.get("stage")) for e in sent if e.get("message") == "callback sent"}
    assert (run_id, "convert") not in stages_woken and (run_id, "export") in stages_woken


def _signed(local: Local, email: str, audience: str | None = None, **kwargs: Any) -> str:
    """A token as the stack signs the callers it plays (local/identities.py)."""
    key = Path(local.state.env[SIGNING_KEY_ENV])
    return played_id_token(email, audience or local.settings.stage_url, key_path=key, **kwargs)


def test_the_stack_refuses_a_token_signed_by_another_key_for_another_audience_or_expired(
    local: Local, tmp_path: Path
) -> None:
    """The stage function verifies every token it is sent, against the stack's published key, for
    its own URL, unexpired (control/adapters/callers.py): each of these names the workflow, and
    each is a 401; the stack's own token for the same call is not."""
    import time

    from rlpipe.local.identities import TOKEN_SECONDS, ensure_signing_key

    workflow = local.state.env[WORKFLOW_IDENTITY_ENV]
    url = local.settings.stage_url
    call = {"op": "status", "run_id": "rnosuchrun01", "stage": "train", "attempt": 1, "execution_id": "x"}
    forged = {
        "another key": played_id_token(workflow, url, key_path=ensure_signing_key(tmp_path / "k")),
        "another audience": _signed(local, workflow, "https://rlpipe-stage-other.a.run.app"),
        "expired": _signed(local, workflow, now=time.time() - 2 * TOKEN_SECONDS),
    }
    for what, token in forged.items():
        answer = requests.post(url, json=call, headers={"Authorization": f"Bearer {token}"}, timeout=60)
        assert answer.status_code == 401, (what, answer.text)
    own = requests.post(
        url, json=call, headers={"Authorization": f"Bearer {_signed(local, workflow)}"}, timeout=60
    )
    assert own.status_code not in (401, 403), own.text


def test_cancel_mid_train(local: Local, faults: Any) -> None:
    faults(["train:stall"])
    run_id = local.submit(local.request())
    local.wait(run_id, until=lambda r: r.state == "training" and r.attempts[-1].phase == "running")
    assert any(w.startswith(f"{run_id}-train") for w in local.workloads())
    operator = local.state.env[OPERATOR_IDENTITY_ENV]  # the operator the stack plays
    assert operator and operator != local.state.env[WORKFLOW_IDENTITY_ENV]
    # Before the operator cancels: an operator's forged end of the run (a workflow-only finish)
    # is refused by the stage function, and the run trains on.
    forged = requests.post(
        local.settings.stage_url,
        json={
            "op": "finish",
            "run_id": run_id,
            "outcome": "failed",
            "failure": {"tag": "permanent", "message": "TPU host 3 reported ECC errors"},
        },
        headers={"Authorization": f"Bearer {_signed(local, operator)}"},
        timeout=60,
    )
    assert forged.status_code == 403 and forged.json()["error"]["tag"] == "forbidden"
    assert local.ledger.get(run_id).state == "training"  # type: ignore[union-attr]
    pods = requests.get(
        local.state.endpoints["kubernetes-api (simulated cluster)"] + "/api/v1/namespaces/rlpipe/pods",
        timeout=10,
    ).json()["items"]
    started = [
        p
        for p in pods
        if p["metadata"]["name"].startswith(f"{run_id}-train") and p["status"].get("startTime")
    ]
    asked = datetime.now(UTC)
    result = runs.cancel(local.settings, local.ledger, run_id)
    assert result["execution_cancelled"] is True and f"{run_id}-train-a1" in result["deleted"]
    record = local.wait(run_id)
    local.assert_consistent(record, "cancelled")
    # Its pods' chip-hours are recorded up to the cancel, not to the workflow's last poll before it:
    # the cancel reads them once more before it deletes them.
    held_to_cancel = chip_hours.chip_hours(started, asked)
    train = record.attempt_record("train", 1)
    assert held_to_cancel > 0 and train is not None and (train.chip_hours or 0.0) >= held_to_cancel
    # The CLI called as the operator the stack plays; the stage function recorded that identity.
    assert record.failure is not None and record.failure.caller == operator


def _is_control_plane_state(name: str) -> bool:
    """Objects only the control plane may write (the state bucket's; layout.py says which)."""
    parts = name.split("/")
    return (
        (
            parts[0] == "runs"
            and len(parts) >= 3
            and (parts[2] in ("run.json", "error.json", "delivery.json", "events"))
        )
        or (name.startswith(layout.CACHE_PREFIX) and name.endswith("/READY.json"))
        or name.startswith((layout.UPSTREAM_PREFIX, layout.RECONCILE_PREFIX, layout.TEAMS_PREFIX))
    )


def test_the_control_planes_state_is_never_in_the_artifacts_bucket(local: Local, faults: Any) -> None:
    """Ledgers, events, error records, READY.json and the upstream state are written to the state
    bucket, which no workload can write; the artifacts bucket holds only what workloads write."""
    faults([])
    run_id = local.submit(local.request(fresh_cache=True))  # a real conversion: READY.json is written
    record = local.wait(run_id)
    assert record.state == "succeeded" and record.lineage.conversion_cache_hit is False
    # A rejected request leaves an error record.
    bad = local.client.bucket(local.settings.requests_bucket).blob(
        f"requests/bad-{uuid.uuid4().hex[:8]}.yaml"
    )
    bad.upload_from_string(b"model: gemma4-26b\nhf_repo: google/gemma-4-26b-a4b-it\nbatchsize: 3\n")
    rejected = identity.run_id_for(identity.key_for_object(bad.bucket.name, bad.name, bad.generation))
    state = BlobStore(local.client, local.settings.state_bucket)
    wait_until(
        lambda: state.exists(f"runs/{rejected}/error.json"), 3, what="the rejected request's error record"
    )
    # The upstream watcher's first poll records its baseline.
    watch = yaml.safe_load((ROOT / "examples" / "upstream" / "watch.yaml").read_text())
    watch_list = local.client.bucket(local.settings.requests_bucket).blob("config/watch.yaml")
    watch_list.upload_from_string(yaml.safe_dump(watch))
    try:
        assert local.stack.upstream_tick() == 200
    finally:
        watch_list.delete()

    in_state = set(state.list(""))
    cache = layout.ConversionCache(local.settings.artifacts_bucket, record.lineage.conversion_key or "")
    for name in (
        f"runs/{run_id}/run.json",
        f"runs/{rejected}/error.json",
        cache.ready,
        layout.upstream_state(watch["watch"][0]["hf_repo"]),
    ):
        assert name in in_state, f"{name} is not in the state bucket"
    assert any(n.startswith(f"runs/{run_id}/events/") for n in in_state)
    assert all(_is_control_plane_state(n) for n in in_state), sorted(
        n for n in in_state if not _is_control_plane_state(n)
    )[:5]
    in_artifacts = [b.name for b in local.client.list_blobs(local.settings.artifacts_bucket)]
    assert any(n.startswith(f"runs/{run_id}/hf/") for n in in_artifacts), "the outputs are artifacts"
    assert any(n.startswith(cache.attempt_dir(run_id, 1)) for n in in_artifacts)
    leaked = [n for n in in_artifacts if _is_control_plane_state(n)]
    assert not leaked, f"control-plane state in the artifacts bucket: {leaked[:5]}"


def test_second_request_for_the_same_sha_skips_convert(local: Local, faults: Any) -> None:
    faults([])
    image = (
        f"us-docker.pkg.dev/cloud-tpu-images/maxtext-images/tpu_post_training:cache-{uuid.uuid4().hex[:8]}"
    )
    first = local.wait(local.submit(local.request(image=image)))
    assert first.state == "succeeded" and first.lineage.conversion_cache_hit is False
    second = local.wait(local.submit(local.request(image=image)))
    local.assert_consistent(second, "succeeded")
    assert second.lineage.conversion_cache_hit is True
    assert [a.stage for a in second.attempts] == ["train", "export"]
    assert second.lineage.converted_uri == first.lineage.converted_uri


def test_a_short_split_ends_training_early_and_cleanly_on_the_staged_pinned_data(
    local: Local, faults: Any
) -> None:
    """Issue 27: plan pins the dataset, the head stages its files under the run's prefix, train_rl
    reads them, and a split shorter than the run asks for ends training early: `succeeded` at the
    step the data allows (30 examples, batch 4, drop_remainder: 7 batches), which export loads."""
    from rlpipe.local.standins_process import SHORT_DATASET

    faults([])
    run_id = local.submit(local.request(dataset={"repo": SHORT_DATASET}))
    record = local.wait(run_id)
    local.assert_consistent(record, "succeeded")
    assert record.lineage.final_step == 7, record.results
    assert "ran out" in json.dumps((record.results or {}).get("training_end")), record.results
    pinned = (record.lineage.data or {})["train"]
    assert pinned["repo"] == SHORT_DATASET and len(pinned["sha"]) == 40 and pinned["num_examples"] == 30
    run = layout.RunLayout(local.settings.artifacts_bucket, run_id)
    store = BlobStore(local.client, local.settings.artifacts_bucket)
    staged = store.read(run.data_file("train", 0), max_bytes=1 << 30).data
    import hashlib

    assert hashlib.sha256(staged).hexdigest() == pinned["files"][0]["sha256"], "the pinned bytes"
    assert store.exists(run.data_manifest)
    export_args = record.attempt_record("export", 1)
    assert export_args is not None and export_args.phase == "succeeded"


def test_a_split_the_dataset_does_not_have_fails_the_run_at_plan_naming_the_field(
    local: Local, faults: Any
) -> None:
    faults([])
    run_id = local.submit(local.request(dataset={"train_split": "validation"}))
    record = local.wait(run_id)
    assert record.state == "failed" and record.failure is not None
    assert record.failure.stage == "plan"
    assert record.failure.message.startswith("dataset.train_split:"), record.failure.message
    assert "validation" in record.failure.message and "train" in record.failure.message
    assert record.attempts == [], "no workload was created"


def test_a_dataset_evaluated_on_itself_trains_on_what_train_rl_does_not_hold_out(
    local: Local, faults: Any
) -> None:
    """OpenR1-Math-220k (48 examples on the local Hub): train_rl holds ceil(5%) = 3 out for its
    evaluation, stages no evaluation split, and trains on 45: 11 batches of 4."""
    faults([])
    dataset = {"repo": "open-r1/OpenR1-Math-220k", "subset": "default", "train_split": "train"}
    run_id = local.submit(local.request(dataset=dataset))
    record = local.wait(run_id)
    local.assert_consistent(record, "succeeded")
    assert "eval" not in (record.lineage.data or {})
    assert record.lineage.final_step == 11, record.results
