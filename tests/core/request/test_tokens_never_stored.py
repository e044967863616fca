"""A token planted anywhere in a request never reaches a stored object (ledger, events, error record).

Every field of the request's JSON Schema gets the token as its value, and every map field gets it
as a key, in three spellings the request checks once missed. Intake runs for real (fake-gcs-server
behind the strict proxy, the recording Executions servicer); then every object in the artifacts
bucket is read back and searched.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import yaml

from rlpipe.control.adapters.blobstore import dumps
from rlpipe.control.lifecycle.intake import Intake
from rlpipe.core.request import json_schema
from rlpipe.core.runs.record import RunRecord, Source
from tests.conftest import Buckets, all_objects, minimal_request, real_intake

SECRET = "PLANTEDsecretTOKENvalue0123456789abcdef"
SPELLINGS = {
    "plain": f"hf_{SECRET}",
    "suffixed": f"hf_{SECRET}_prod",  # `_` is a word character: a \b-anchored check missed it
    "mixed-case": f"Hf_{SECRET}",
}


def _resolve(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        node = defs[node["$ref"].rsplit("/", 1)[-1]]
    for key in ("anyOf", "allOf", "oneOf"):
        for option in node.get(key, []):
            option = _resolve(option, defs)
            if option.get("type") == "object" or "properties" in option:
                return option
    return node


def _plantings(schema: dict[str, Any]) -> Iterator[tuple[str, list[str], str]]:
    """(what, path, kind): every property as a value, every open map as a key."""
    defs = schema.get("$defs", {})

    def walk(node: dict[str, Any], path: list[str]) -> Iterator[tuple[str, list[str], str]]:
        node = _resolve(node, defs)
        props = node.get("properties", {})
        for name, sub in props.items():
            yield ".".join([*path, name]), [*path, name], "value"
            yield from walk(sub, [*path, name])
        open_map = node.get("additionalProperties") not in (None, False) or "patternProperties" in node
        if open_map and not props:
            yield ".".join([*path, "<key>"]), path, "key"

    yield from walk(schema, [])


PLANTINGS = list(_plantings(json_schema()))


def _plant(doc: dict[str, Any], path: list[str], kind: str, token: str) -> dict[str, Any]:
    node = doc
    for part in path[:-1] if kind == "value" else path:
        node = node.setdefault(part, {}) if isinstance(node.get(part), (dict, type(None))) else {}
    if kind == "value":
        node[path[-1]] = token
    else:
        node[token] = "x"
    return doc


def test_every_field_of_the_schema_is_planted() -> None:
    paths = {p for p, _, _ in PLANTINGS}
    assert {"model", "labels.<key>", "maxtext_overrides.<key>", "training.command_env.<key>"} <= paths
    assert len(PLANTINGS) > 40


@pytest.fixture
def intake(buckets: Buckets, executions: Any) -> Intake:
    return real_intake(buckets, executions)


@pytest.mark.parametrize("spelling", list(SPELLINGS))
def test_a_planted_token_never_reaches_a_stored_object(
    intake: Intake, buckets: Buckets, spelling: str
) -> None:
    token = SPELLINGS[spelling]

    def submit(i: int) -> None:
        _, path, kind = PLANTINGS[i]
        data = yaml.safe_dump(_plant(minimal_request(), path, kind, token)).encode()
        intake.submit(data, Source(kind="cli"), f"cli:{spelling}:{i}")

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(submit, range(len(PLANTINGS))))
    stored = {**all_objects(buckets.store("state")), **all_objects(buckets.store("artifacts"))}
    assert stored, "intake wrote nothing to search"
    leaked = {name for name, body in stored.items() if SECRET.encode() in body}
    assert not leaked


def test_a_token_as_a_yaml_binary_label_value_is_refused(intake: Intake, buckets: Buckets) -> None:
    import base64

    encoded = base64.b64encode(SPELLINGS["plain"].encode()).decode()
    data = yaml.safe_dump(minimal_request()).encode() + f"labels: {{team: !!binary {encoded}}}\n".encode()
    result = intake.submit(data, Source(kind="cli"), "cli:binary")
    assert result.outcome == "rejected"
    for which in ("state", "artifacts"):
        assert not [n for n, body in all_objects(buckets.store(which)).items() if SECRET.encode() in body]


def test_stored_json_masks_tokens_in_keys_values_and_bytes() -> None:
    record = RunRecord(run_id="rmask0000001", key="k", source=Source(kind="cli"), request={})
    body = {
        "record": record.model_dump(mode="json"),
        SPELLINGS["suffixed"]: [SPELLINGS["mixed-case"], SPELLINGS["plain"].encode()],
        "nested": {"deeper": {f"x-{SPELLINGS['plain']}": 1}},
    }
    assert SECRET.encode() not in dumps(body)
    assert b"[REDACTED]" in dumps(body)
