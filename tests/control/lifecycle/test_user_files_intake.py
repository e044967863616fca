"""A request's own files at intake (issue 27): found beside the request, at an allowed gs:// URI or
inline; checked without being run; copied once under the run's prefix and pinned by sha256 in the
request the ledger keeps; refused, with the field and the fix, when the deployment runs no user
code or the file is missing, broken or not the bytes the request named.

Over fake-gcs-server with the library's Intake; one case through the deployed intake function
(functions-framework, a real CloudEvent), with the deployment's setting in its environment.
"""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path
from typing import Any

import pytest
import yaml

from rlpipe.control.adapters.events import MessageEvent, ObjectEvent
from rlpipe.control.adapters.settings import Settings
from rlpipe.core import identity, layout
from tests.conftest import Buckets, all_objects, minimal_request, real_intake
from tests.harness.functions import FunctionServer, gcs_event, post

REWARDS = b'''"""Exact match plus a length penalty."""


def exact_match(prompts, completions, answer, **kwargs):
    return [1.0 if c.strip() == a.strip() else 0.0 for c, a in zip(completions, answer)]


def length_penalty(prompts, completions, **kwargs):
    return [-0.001 * len(c) for c in completions]
'''
TEMPLATE = b'{"SYSTEM_PROMPT": "Answer between {solution_start_token} and {solution_end_token}.", "TEMPLATE": "{system_prompt}\\n\\n{question}"}'


def _doc(**extra: Any) -> dict[str, Any]:
    return {
        **minimal_request(),
        "rewards": {"file": {"path": "rewards.py"}, "functions": ["exact_match", "length_penalty"]},
        **extra,
    }


def _intake(buckets: Buckets, executions: Any, *, code: bool = True, **kwargs: Any) -> Any:
    policy = dataclasses.replace(Settings(artifacts_bucket=buckets.artifacts).policy(), allow_user_code=code)
    return real_intake(buckets, executions, policy=policy, **kwargs)


def _put(buckets: Buckets, bucket: str, name: str, data: bytes) -> int:
    blob = buckets.client.bucket(bucket).blob(name)
    blob.upload_from_string(data)
    return int(blob.generation)


def _submit(buckets: Buckets, intake: Any, name: str, doc: dict[str, Any]) -> Any:
    data = yaml.safe_dump(doc).encode()
    generation = _put(buckets, buckets.requests, name, data)
    return intake.from_object(ObjectEvent(buckets.requests, name, str(generation), len(data), "e1"))


def _problems(buckets: Buckets) -> list[dict[str, str]]:
    store = buckets.store("state")
    [error] = [store.read(n).json() for n in store.list("runs/") if n.endswith("/error.json")]
    return error["problems"]


def test_a_file_beside_the_request_is_copied_pinned_and_named_in_the_ledger(
    buckets: Buckets, executions: Any
) -> None:
    _put(buckets, buckets.requests, "requests/team-a/rewards.py", REWARDS)
    result = _submit(buckets, _intake(buckets, executions), "requests/team-a/run.yaml", _doc())
    assert result.outcome == "started", result
    record, _ = buckets.ledger().load(result.run_id)
    digest = hashlib.sha256(REWARDS).hexdigest()
    copy = f"runs/{result.run_id}/inputs/rewards.py"
    assert record.request["rewards"]["file"] == {
        "path": f"gs://{buckets.artifacts}/{copy}",
        "inline": None,
        "sha256": digest,
    }
    assert all_objects(buckets.store("artifacts"))[copy] == REWARDS
    inputs = record.lineage.inputs or {}
    assert inputs["rewards"]["sha256"] == digest
    assert inputs["rewards"]["functions"] == ["exact_match", "length_penalty"]
    assert inputs["rewards"]["source"] == "rewards.py"


def test_a_redelivery_copies_nothing_new_and_starts_nothing_new(buckets: Buckets, executions: Any) -> None:
    _put(buckets, buckets.requests, "requests/team-a/rewards.py", REWARDS)
    data = yaml.safe_dump(_doc()).encode()
    generation = _put(buckets, buckets.requests, "requests/team-a/run.yaml", data)
    event = ObjectEvent(buckets.requests, "requests/team-a/run.yaml", str(generation), len(data), "e1")
    intake = _intake(buckets, executions)
    first = intake.from_object(event)
    before = {n: g for n, g in _generations(buckets).items()}
    second = intake.from_object(event)
    assert (first.outcome, second.outcome) == ("started", "duplicate")
    assert second.run_id == first.run_id
    assert _generations(buckets) == before, "no object was written again"
    assert len(executions.creates()) == 1


def _generations(buckets: Buckets) -> dict[str, int]:
    return {b.name: int(b.generation) for b in buckets.client.list_blobs(buckets.artifacts)}


def test_inline_files_and_a_chat_template_are_copied_too(buckets: Buckets, executions: Any) -> None:
    doc = _doc(
        rewards={"file": {"inline": REWARDS.decode()}, "functions": ["length_penalty"]},
        chat_template={"inline": TEMPLATE.decode()},
    )
    result = _submit(buckets, _intake(buckets, executions), "requests/run.yaml", doc)
    assert result.outcome == "started", result
    stored = all_objects(buckets.store("artifacts"))
    assert stored[f"runs/{result.run_id}/inputs/rewards.py"] == REWARDS
    assert stored[f"runs/{result.run_id}/inputs/chat_template.json"] == TEMPLATE
    record, _ = buckets.ledger().load(result.run_id)
    assert record.request["chat_template"]["sha256"] == hashlib.sha256(TEMPLATE).hexdigest()
    assert (record.lineage.inputs or {})["rewards"]["source"] == "inline in the request"


def test_a_deployment_that_runs_no_user_code_refuses_rewards_and_says_which_setting(
    buckets: Buckets, executions: Any
) -> None:
    _put(buckets, buckets.requests, "requests/rewards.py", REWARDS)
    result = _submit(buckets, _intake(buckets, executions, code=False), "requests/run.yaml", _doc())
    assert result.outcome == "rejected"
    [problem] = _problems(buckets)
    assert problem["path"] == "rewards" and "RLPIPE_ALLOW_USER_CODE=true" in problem["fix"]
    assert not list(buckets.store("artifacts").list("runs/")), "nothing was copied"
    assert executions.creates() == []


def test_the_chat_template_is_data_and_allowed_without_user_code(buckets: Buckets, executions: Any) -> None:
    doc = {**minimal_request(), "chat_template": {"inline": TEMPLATE.decode()}}
    result = _submit(buckets, _intake(buckets, executions, code=False), "requests/run.yaml", doc)
    assert result.outcome == "started", result


@pytest.mark.parametrize(
    ("files", "doc_extra", "path", "words"),
    [
        ({}, {}, "rewards.file.path", "does not exist"),
        (
            {"requests/rewards.py": REWARDS},
            {"rewards": {"file": {"path": "rewards.py"}, "functions": ["exact_match", "missing_one"]}},
            "rewards.functions[1]",
            "missing_one",
        ),
        ({"requests/rewards.py": b"def broken(:\n"}, {}, "rewards.file", "line 1"),
        (
            {"requests/rewards.py": REWARDS},
            {"rewards": {"file": {"path": "rewards.py", "sha256": "0" * 64}, "functions": ["exact_match"]}},
            "rewards.file.sha256",
            hashlib.sha256(REWARDS).hexdigest(),
        ),
        ({"requests/rewards.py": b"\xff\xfe not utf-8"}, {}, "rewards.file.path", "UTF-8"),
        (
            {"requests/rewards.py": REWARDS},
            {"chat_template": {"inline": '{"SYSTEM_PROMPT": "x", "TEMPLATE": "{answer}"}'}},
            "chat_template",
            "answer",
        ),
    ],
    ids=["missing", "no-such-function", "syntax", "other-bytes", "not-utf8", "template-placeholder"],
)
def test_a_bad_file_is_refused_naming_the_field(
    buckets: Buckets,
    executions: Any,
    files: dict[str, bytes],
    doc_extra: dict[str, Any],
    path: str,
    words: str,
) -> None:
    for name, data in files.items():
        _put(buckets, buckets.requests, name, data)
    result = _submit(buckets, _intake(buckets, executions), "requests/run.yaml", _doc(**doc_extra))
    assert result.outcome == "rejected", result
    problems = _problems(buckets)
    assert any(p["path"] == path and words in p["message"] for p in problems), problems
    assert not list(buckets.store("artifacts").list("runs/"))


def test_a_gs_file_outside_the_allowed_prefixes_is_refused_and_an_allowed_one_read(
    buckets: Buckets, executions: Any
) -> None:
    shared = f"gs://{buckets.requests}/shared/rewards.py"
    _put(buckets, buckets.requests, "shared/rewards.py", REWARDS)
    doc = _doc(rewards={"file": {"path": shared}, "functions": ["exact_match"]})
    refused = _submit(buckets, _intake(buckets, executions), "requests/a.yaml", doc)
    assert refused.outcome == "rejected"
    assert any(p["path"] == "rewards.file.path" for p in _problems(buckets))

    policy = dataclasses.replace(
        Settings(artifacts_bucket=buckets.artifacts).policy(),
        allow_user_code=True,
        read_only_gcs=(f"gs://{buckets.requests}/shared/",),
    )
    allowed = _submit(buckets, real_intake(buckets, executions, policy=policy), "requests/b.yaml", doc)
    assert allowed.outcome == "started", allowed
    record, _ = buckets.ledger().load(allowed.run_id)
    assert (record.lineage.inputs or {})["rewards"]["source"] == shared


def test_a_pubsub_request_cannot_name_a_file_beside_itself(buckets: Buckets, executions: Any) -> None:
    data = yaml.safe_dump(_doc()).encode()
    result = _intake(buckets, executions).from_message(
        MessageEvent("projects/rlpipe-test/topics/requests", "m1", data, {}, "e1")
    )
    assert result.outcome == "rejected"
    [problem] = [p for p in _all_problems(buckets) if p["path"] == "rewards.file.path"]
    assert "gs:// URI or inline" in problem["fix"]


def _all_problems(buckets: Buckets) -> list[dict[str, str]]:
    store = buckets.store("state")
    return [
        p for n in store.list("runs/") if n.endswith("/error.json") for p in store.read(n).json()["problems"]
    ]


def test_the_deployed_intake_function_copies_the_file_when_the_setting_allows_code(
    buckets: Buckets, executions: Any, tmp_path: Path
) -> None:
    env = buckets.env(RLPIPE_WORKFLOWS_ENDPOINT=executions.target, RLPIPE_ALLOW_USER_CODE="true")
    server = FunctionServer("intake_object", "cloudevent", env, tmp_path)
    server.spawn()
    server.wait()
    try:
        _put(buckets, buckets.requests, "requests/team-b/rewards.py", REWARDS)
        data = yaml.safe_dump(_doc()).encode()
        generation = _put(buckets, buckets.requests, "requests/team-b/run.yaml", data)
        response = post(
            server.url, gcs_event(buckets.requests, "requests/team-b/run.yaml", generation, len(data))
        )
        assert response.status_code == 200, server.logs()
    finally:
        server.stop()
    key = identity.key_for_object(buckets.requests, "requests/team-b/run.yaml", str(generation))
    run_id = identity.run_id_for(key)
    copy = layout.RunLayout(buckets.artifacts, run_id).user_file("rewards", ".py")
    assert all_objects(buckets.store("artifacts"))[copy] == REWARDS


def test_the_files_beside_a_request_start_nothing_and_leave_no_error_record(
    buckets: Buckets, executions: Any
) -> None:
    intake = _intake(buckets, executions)
    for name, data in (
        ("requests/team-a/rewards.py", REWARDS),
        ("requests/team-a/chat.template.json", TEMPLATE),
    ):
        generation = _put(buckets, buckets.requests, name, data)
        result = intake.from_object(ObjectEvent(buckets.requests, name, str(generation), len(data), "e"))
        assert result.outcome == "ignored", (name, result)
    assert not list(buckets.store("state").list("runs/")), "no run and no error record"
    assert executions.creates() == []


def test_a_file_beside_the_request_must_be_spelled_as_intake_reads_it(
    buckets: Buckets, executions: Any
) -> None:
    _put(buckets, buckets.requests, "requests/template.json", TEMPLATE)
    doc = {**minimal_request(), "chat_template": {"path": "template.json"}}
    result = _submit(buckets, _intake(buckets, executions), "requests/run.yaml", doc)
    assert result.outcome == "rejected"
    [problem] = [p for p in _problems(buckets) if p["path"] == "chat_template.path"]
    assert ".template.json" in problem["fix"]


def test_a_template_nested_too_deep_to_read_is_a_problem_not_a_crash(
    buckets: Buckets, executions: Any
) -> None:
    """A poison message otherwise: an exception out of intake is a 500, redelivered forever."""
    doc = {**minimal_request(), "chat_template": {"inline": "[" * 1500 + "]" * 1500}}
    result = _submit(buckets, _intake(buckets, executions, code=False), "requests/run.yaml", doc)
    assert result.outcome == "rejected"
    assert any(p["path"] == "chat_template" for p in _problems(buckets))


def test_the_same_delivery_again_after_the_file_changed_is_the_same_run(
    buckets: Buckets, executions: Any
) -> None:
    """The run keeps the files it started with; a redelivery of its event is a duplicate, whatever
    happened to the file beside the request since (no conflict, no error record in its prefix)."""
    _put(buckets, buckets.requests, "requests/team-a/rewards.py", REWARDS)
    data = yaml.safe_dump(_doc()).encode()
    generation = _put(buckets, buckets.requests, "requests/team-a/run.yaml", data)
    event = ObjectEvent(buckets.requests, "requests/team-a/run.yaml", str(generation), len(data), "e1")
    intake = _intake(buckets, executions)
    first = intake.from_object(event)
    buckets.client.bucket(buckets.requests).blob("requests/team-a/rewards.py").delete()
    second = intake.from_object(event)
    assert (first.outcome, second.outcome) == ("started", "duplicate") and second.run_id == first.run_id
    state = buckets.store("state")
    assert not state.exists(f"runs/{first.run_id}/error.json")
    record, _ = buckets.ledger().load(first.run_id)
    assert record.request["rewards"]["file"]["sha256"] == hashlib.sha256(REWARDS).hexdigest()
