"""Intake over real wire protocols: fake-gcs-server, functions-framework processes, real CloudEvents,
and the real ExecutionsClient talking gRPC to a recording Executions server."""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import yaml

from rlpipe.control.lifecycle.intake import Intake
from rlpipe.core import identity
from tests.conftest import Buckets, all_objects, emptied, minimal_request, new_buckets, real_intake
from tests.harness.functions import FunctionServer, gcs_event, post, pubsub_event

PLANTED = "hf_PLANTEDsecretTOKENvalue0123456789abcd"
TOPIC = "projects/rlpipe-test/topics/requests"


# The two function processes are started once for the module, with one set of buckets and one
# Executions server, and every test starts from them emptied (``buckets``, ``executions`` below):
# a process start is most of a short test's cost, and a warm instance handling many events is
# what production runs. Each test reads only its own part of the processes' logs.


@pytest.fixture(scope="module")
def module_buckets(fake_gcs: Any) -> Iterator[Buckets]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("STORAGE_EMULATOR_HOST", fake_gcs.url)
        yield new_buckets(fake_gcs)


@pytest.fixture
def buckets(module_buckets: Buckets, monkeypatch: pytest.MonkeyPatch) -> Buckets:
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", module_buckets.emulator)
    return emptied(module_buckets)


@pytest.fixture(scope="module")
def module_executions() -> Iterator[Any]:
    from tests.harness.executions import RecordingExecutions

    server = RecordingExecutions().start()
    yield server
    server.stop()


@pytest.fixture
def executions(module_executions: Any) -> Any:
    return module_executions.reset()


@pytest.fixture(scope="module")
def module_functions(
    module_buckets: Buckets, module_executions: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, FunctionServer]]:
    env = module_buckets.env(
        RLPIPE_WORKFLOWS_ENDPOINT=module_executions.target, RLPIPE_HF_TOKEN=PLANTED, THREADS="16"
    )
    yield from intake_functions(env, tmp_path_factory.mktemp("intake-functions"))


@pytest.fixture
def functions(
    module_functions: dict[str, FunctionServer], buckets: Buckets, executions: Any
) -> dict[str, FunctionServer]:
    for server in module_functions.values():
        server.begin_test()
    return module_functions


def intake_functions(env: dict[str, str], tmp_path: Path) -> Iterator[dict[str, FunctionServer]]:
    """Both intake functions, each its own functions-framework process with ``env``."""
    servers = {
        "object": FunctionServer("intake_object", "cloudevent", env, tmp_path),
        "message": FunctionServer("intake_message", "cloudevent", env, tmp_path),
    }
    for server in servers.values():
        server.spawn()
    for server in servers.values():
        server.wait()
    yield servers
    for server in servers.values():
        server.stop()


def _upload(buckets: Buckets, name: str, data: bytes) -> tuple[int, int]:
    blob = buckets.client.bucket(buckets.requests).blob(name)
    blob.upload_from_string(data)
    return int(blob.generation), len(data)


def _runs(buckets: Buckets) -> list[str]:
    return buckets.ledger().list_run_ids()


def _error_records(buckets: Buckets) -> list[dict[str, Any]]:
    store = buckets.store("state")
    return [store.read(n).json() for n in store.list("runs/") if n.endswith("/error.json")]


REQUEST = yaml.safe_dump(minimal_request()).encode()


@pytest.mark.parametrize("mode", ["binary", "structured"])
def test_request_file_starts_one_execution(
    mode: str, buckets: Buckets, executions: Any, functions: dict[str, FunctionServer]
) -> None:
    generation, size = _upload(buckets, "requests/team/a.yaml", REQUEST)
    response = post(
        functions["object"].url,
        gcs_event(buckets.requests, "requests/team/a.yaml", generation, size),
        mode=mode,
    )
    assert response.status_code == 200, functions["object"].logs()
    [run_id] = _runs(buckets)
    assert executions.creates() == [{"run_id": run_id}]
    record, _ = buckets.ledger().load(run_id)
    assert record.execution.name and record.execution.name.endswith("/executions/exec-1")
    assert record.source.kind == "gcs" and record.source.generation == str(generation)
    assert record.request["preset"] == "v6e-32" and record.request["training"]["batch_size"] == 4


def test_duplicate_burst_gives_one_claim_one_execution_one_accepted_event(
    buckets: Buckets, executions: Any, functions: dict[str, FunctionServer]
) -> None:
    generation, size = _upload(buckets, "requests/burst.json", json.dumps(minimal_request()).encode())
    event = gcs_event(buckets.requests, "requests/burst.json", generation, size, event_id="same-event")
    with ThreadPoolExecutor(50) as pool:
        codes = list(pool.map(lambda _: post(functions["object"].url, event).status_code, range(200)))
    assert set(codes) == {200}, functions["object"].logs()[-3000:]
    [run_id] = _runs(buckets)
    assert len(executions.creates()) == 1
    history = buckets.ledger().history(run_id)
    assert [e["event"] for e in history].count("accepted") == 1


def test_same_request_id_twice_makes_one_run_and_different_ids_two(
    buckets: Buckets, executions: Any, functions: dict[str, FunctionServer]
) -> None:
    body = json.dumps(minimal_request(request_id="nightly-1")).encode()
    assert post(functions["message"].url, pubsub_event(TOPIC, body, "m-1")).status_code == 200
    assert post(functions["message"].url, pubsub_event(TOPIC, body, "m-2")).status_code == 200
    assert len(_runs(buckets)) == 1 and len(executions.creates()) == 1
    other = json.dumps(minimal_request(request_id="nightly-2")).encode()
    assert post(functions["message"].url, pubsub_event(TOPIC, other, "m-3")).status_code == 200
    assert len(_runs(buckets)) == 2 and len(executions.creates()) == 2
    record = buckets.ledger().get(_runs(buckets)[0])
    assert record is not None and record.source.kind == "pubsub"


def test_a_request_id_is_scoped_to_its_teams_folder_so_no_team_can_take_anothers(
    buckets: Buckets, executions: Any, functions: dict[str, FunctionServer]
) -> None:
    """Team b drops its own request under a request_id team a published: two runs, no conflict.
    The same id at the top of requests/ and on the topic share the default namespace."""
    theirs = json.dumps(minimal_request(request_id="nightly")).encode()
    ours = json.dumps(minimal_request(request_id="nightly", training={"num_batches": 7})).encode()
    for name, body in [
        ("requests/team-b/first.json", ours),  # b gets there first
        ("requests/team-a/nightly.json", theirs),
        ("requests/team-a/again.json", theirs),  # a's own resubmission: the same run
    ]:
        generation, size = _upload(buckets, name, body)
        assert (
            post(functions["object"].url, gcs_event(buckets.requests, name, generation, size)).status_code
            == 200
        )
    assert _error_records(buckets) == [], "no conflict across namespaces"
    assert len(executions.creates()) == 2
    runs = {buckets.ledger().get(r).key: r for r in _runs(buckets)}  # type: ignore[union-attr]
    assert set(runs) == {"request:team-a/nightly", "request:team-b/nightly"}
    assert runs["request:team-a/nightly"] == identity.run_id_for(
        identity.key_for_request_id("nightly", "team-a")
    )

    generation, size = _upload(buckets, "requests/top.json", theirs)
    post(functions["object"].url, gcs_event(buckets.requests, "requests/top.json", generation, size))
    post(functions["message"].url, pubsub_event(TOPIC, theirs, "m-default"))
    assert len(executions.creates()) == 3, "the top of requests/ and the topic: one default namespace"
    assert "request:nightly" in {buckets.ledger().get(r).key for r in _runs(buckets)}  # type: ignore[union-attr]


def test_reused_request_id_with_different_content_is_reported_not_lost(
    buckets: Buckets, executions: Any, functions: dict[str, FunctionServer]
) -> None:
    first = json.dumps(minimal_request(request_id="dup")).encode()
    second = json.dumps(minimal_request(request_id="dup", training={"num_batches": 7})).encode()
    post(functions["message"].url, pubsub_event(TOPIC, first, "a"))
    assert post(functions["message"].url, pubsub_event(TOPIC, second, "b")).status_code == 200
    assert len(executions.creates()) == 1
    [error] = _error_records(buckets)
    assert "already used by run" in error["message"] and error["source"]["message_id"] == "b"


BAD_INPUTS = [
    ("requests/malformed.json", b'{"model": "gemma4-26b",', "not valid JSON"),
    ("requests/malformed.yaml", b"model: [gemma4", "not valid JSON or YAML"),
    (
        "requests/unknown.yaml",
        b"model: gemma4-26b\nhf_repo: google/gemma-4-26b-a4b-it\nbatchsize: 3\n",
        "unknown key",
    ),
    ("requests/empty.yaml", b"", "is empty"),
    ("requests/garbage.json", bytes(range(256)) * 4, "not UTF-8"),
    ("requests/notes.txt", b"hello", "is not a request file"),
    (
        "requests/token.yaml",
        f"model: gemma4-26b\nhf_repo: a/b\nhf_token: {PLANTED}\n".encode(),
        "secrets are never accepted",
    ),
]


@pytest.mark.parametrize(("name", "data", "fragment"), BAD_INPUTS, ids=[n for n, _, _ in BAD_INPUTS])
def test_bad_input_gives_a_readable_error_record_and_2xx(
    name: str,
    data: bytes,
    fragment: str,
    buckets: Buckets,
    executions: Any,
    functions: dict[str, FunctionServer],
) -> None:
    generation, size = _upload(buckets, name, data)
    event = gcs_event(buckets.requests, name, generation, size)
    assert post(functions["object"].url, event).status_code == 200
    assert post(functions["object"].url, event).status_code == 200  # redelivery changes nothing
    [error] = _error_records(buckets)
    assert fragment in error["message"] and error["source"]["name"] == name
    assert all(p["fix"] for p in error["problems"])
    assert not any(n.endswith("/run.json") for n in buckets.store("state").list("runs/")), (
        "nothing half-written"
    )
    assert executions.creates() == []
    assert [e["event"] for e in buckets.ledger().history(error["run_id"])] == ["rejected"]
    logs = [json.loads(line) for line in functions["object"].logs().splitlines() if line.startswith("{")]
    assert any(rec.get("message") == "request rejected" and name in rec.get("object", "") for rec in logs)


def test_a_50_mib_request_is_rejected_by_size_before_reading(
    buckets: Buckets, executions: Any, functions: dict[str, FunctionServer]
) -> None:
    big = b"model: x\n" + b"#" * (50 * 1024 * 1024)
    generation, size = _upload(buckets, "requests/huge.yaml", big)
    assert (
        post(
            functions["object"].url, gcs_event(buckets.requests, "requests/huge.yaml", generation, size)
        ).status_code
        == 200
    )
    [error] = _error_records(buckets)
    assert f"{size} bytes" in error["message"]
    assert executions.creates() == []


@pytest.mark.parametrize(
    "event_type", ["google.cloud.storage.object.v1.deleted", "google.cloud.storage.object.v1.metadataUpdated"]
)
def test_wrong_event_types_are_acknowledged_and_ignored(
    event_type: str, buckets: Buckets, executions: Any, functions: dict[str, FunctionServer]
) -> None:
    generation, size = _upload(buckets, "requests/a.yaml", REQUEST)
    event = gcs_event(buckets.requests, "requests/a.yaml", generation, size, event_type=event_type)
    assert post(functions["object"].url, event).status_code == 200
    assert _runs(buckets) == [] and executions.creates() == []
    assert "event ignored" in functions["object"].logs()
    message_as_object = pubsub_event(TOPIC, REQUEST, "x")
    assert post(functions["object"].url, message_as_object).status_code == 200
    assert _runs(buckets) == []


def test_objects_outside_requests_prefix_are_ignored(
    buckets: Buckets, executions: Any, functions: dict[str, FunctionServer]
) -> None:
    generation, size = _upload(buckets, "config/watch.yaml", REQUEST)
    assert (
        post(
            functions["object"].url, gcs_event(buckets.requests, "config/watch.yaml", generation, size)
        ).status_code
        == 200
    )
    assert all_objects(buckets.store("state")) == {} and all_objects(buckets.store("artifacts")) == {}


def test_no_secret_in_ledger_error_records_or_logs(
    buckets: Buckets, executions: Any, functions: dict[str, FunctionServer]
) -> None:
    for name, data in (
        ("requests/ok.yaml", REQUEST),
        ("requests/leak.yaml", f"model: gemma4-26b\nhf_repo: a/b\nlabels: {{x: {PLANTED}}}\n".encode()),
    ):
        generation, size = _upload(buckets, name, data)
        post(functions["object"].url, gcs_event(buckets.requests, name, generation, size))
    stored = {**all_objects(buckets.store("state")), **all_objects(buckets.store("artifacts"))}
    assert any(n.endswith("/run.json") for n in stored), "the check reads where the ledgers are"
    for name, data in stored.items():
        assert PLANTED.encode() not in data, name
    for server in functions.values():  # the whole log: its start and first calls are earlier tests'
        assert PLANTED not in server.log_path.read_text(errors="replace")


# ---- crash recovery, in-process against the same real servers -------------------------------------


class Crash(Exception):
    pass


def _intake(buckets: Buckets, executions: Any, **kwargs: Any) -> Intake:
    return real_intake(buckets, executions, **kwargs)


def test_crash_after_claim_is_finished_by_redelivery(buckets: Buckets, executions: Any) -> None:
    clock = [1000.0]

    def crash(run_id: str) -> None:
        raise Crash(run_id)

    from rlpipe.control.adapters.events import ObjectEvent

    generation, size = _upload(buckets, "requests/c.yaml", REQUEST)
    event = ObjectEvent(buckets.requests, "requests/c.yaml", str(generation), size, "e1")
    with pytest.raises(Crash):
        _intake(buckets, executions, after_claim=crash, clock=lambda: clock[0]).from_object(event)
    [run_id] = _runs(buckets)
    assert executions.creates() == []
    # A redelivery while the crashed attempt's start lease is still live waits for it...
    early = _intake(buckets, executions, clock=lambda: clock[0] + 1).from_object(event)
    assert early.outcome == "start-in-progress" and executions.creates() == []
    # ...and once the lease has expired, the next redelivery finishes the start, exactly once.
    clock[0] += 120
    late = _intake(buckets, executions, clock=lambda: clock[0]).from_object(event)
    assert late.outcome == "started" and executions.creates() == [{"run_id": run_id}]
    again = _intake(buckets, executions, clock=lambda: clock[0]).from_object(event)
    assert again.outcome == "duplicate" and len(executions.creates()) == 1


def test_transient_failure_to_start_is_retried_by_redelivery(buckets: Buckets, executions: Any) -> None:
    import grpc

    from rlpipe.control.adapters.events import ObjectEvent
    from rlpipe.core.failures import TransientFailure

    generation, size = _upload(buckets, "requests/t.yaml", REQUEST)
    event = ObjectEvent(buckets.requests, "requests/t.yaml", str(generation), size, "e1")
    executions.fail_next.append(grpc.StatusCode.UNAVAILABLE)
    clock = [0.0]
    with pytest.raises(TransientFailure):
        _intake(buckets, executions, clock=lambda: clock[0], lease_seconds=30).from_object(event)
    clock[0] += 31
    assert _intake(buckets, executions, clock=lambda: clock[0]).from_object(event).outcome == "started"


def test_a_submitter_finds_the_rejection_of_a_request_that_names_its_run_by_request_id(
    buckets: Buckets, executions: Any, functions: dict[str, FunctionServer], tmp_path: Path
) -> None:
    """The run id a request_id names never exists when intake refuses the request; the record
    of why is under the delivery's own id, which `rlpipe submit` now returns (the demo said only
    "never accepted")."""
    from rlpipe.cli import submit as submit_cli
    from rlpipe.control.adapters.settings import Settings

    path = tmp_path / "elsewhere.yaml"
    path.write_text(
        yaml.safe_dump(minimal_request(request_id="rej-1", notify="projects/another-team/topics/status"))
    )
    settings = Settings(requests_bucket=buckets.requests, project="rlpipe-test")
    submitted = submit_cli.submit(settings, path, storage_client=buckets.client)
    name = submitted.where.split("/", 3)[3]
    blob = buckets.client.bucket(buckets.requests).get_blob(name)
    assert (
        post(
            functions["object"].url, gcs_event(buckets.requests, name, blob.generation, blob.size)
        ).status_code
        == 200
    )
    assert buckets.ledger().get(submitted.run_id) is None
    rejected = buckets.ledger().rejection(submitted.delivery_id)
    assert (
        rejected is not None
        and "notify" in rejected["message"]
        and "projects/another-team/topics/status" in rejected["message"]
    )
