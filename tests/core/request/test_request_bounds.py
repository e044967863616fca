"""Bounded values (issue: allowlists and bounds): each reproduction of a crash is now a refusal
with the field's path, and every record intake writes about it is small and readable."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from rlpipe.control.adapters.events import MessageEvent
from rlpipe.core.problems import RequestInvalid
from rlpipe.core.request import bounds, load_request
from rlpipe.core.runs.record import Source
from tests.conftest import Buckets, minimal_request, real_intake


def message(message_id: str, data: bytes) -> MessageEvent:
    return MessageEvent(
        topic="projects/p/topics/t", message_id=message_id, data=data, attributes={}, event_id=message_id
    )


BASE = {"model": "gemma4-26b", "hf_repo": "google/gemma-4-26b-a4b-it"}


def refused(text: str, source: str) -> list[str]:
    with pytest.raises(RequestInvalid) as caught:
        load_request(text, source=source)
    return [p.path for p in caught.value.problems]


@pytest.mark.parametrize(
    ("name", "text", "source", "path"),
    [
        # 400 digits: OverflowError in the cross-field checks and the step arithmetic before
        ("slices", json.dumps({**BASE, "tpu": {"slices": int("9" * 400)}}), "r.json", "tpu.slices"),
        (
            "num_epoch",
            json.dumps({**BASE, "maxtext_overrides": {"num_epoch": int("9" * 400)}}),
            "r.json",
            "maxtext_overrides.num_epoch",
        ),
        # parses (a power-of-two base has no digit limit), then could not be written to the ledger
        (
            "hex",
            yaml.safe_dump(BASE) + "maxtext_overrides:\n  num_epoch: 0x" + "f" * 4000 + "\n",
            "r.yaml",
            "maxtext_overrides.num_epoch",
        ),
        (
            "base-60",
            yaml.safe_dump(BASE) + "maxtext_overrides:\n  num_epoch: " + ":".join(["59"] * 300) + "\n",
            "r.yaml",
            "maxtext_overrides.num_epoch",
        ),
        # accepted, then no ledger holding it could be read back
        (
            "surrogate",
            json.dumps(BASE)[:-1] + ', "maxtext_overrides": {"x": "\\ud800"}}',
            "r.json",
            "maxtext_overrides.x",
        ),
        ("inf", yaml.safe_dump(BASE) + "maxtext_overrides:\n  lr: .inf\n", "r.yaml", "maxtext_overrides.lr"),
        ("long", json.dumps({**BASE, "labels": {"team": "x" * 9000}}), "r.json", "labels.team"),
    ],
    ids=lambda v: v if isinstance(v, str) and len(v) < 12 else "",
)
def test_an_unbounded_value_is_refused_at_its_path(name: str, text: str, source: str, path: str) -> None:
    assert refused(text, source) == [path]


def test_integers_are_measured_without_converting_them_to_text() -> None:
    """``bit_length``, not ``str()``: the text form of a 16,000-bit integer is what raises."""
    (problem,) = bounds.bound_problems({"n": int("f" * 4000, 16)})
    assert problem.path == "n" and "16000 bits" in problem.message
    assert bounds.bound_problems({"n": 2**63 - 1, "m": -(2**63 - 1), "t": True}) == []


def test_deep_and_wide_documents_are_refused_once_not_walked_forever() -> None:
    deep: dict[str, Any] = {}
    node = deep
    for _ in range(100):
        node["a"] = {}
        node = node["a"]
    (problem,) = bounds.bound_problems(deep)
    assert "nested more than" in problem.message
    wide = {"labels": {f"k{i}": "v" for i in range(bounds.MAX_ITEMS + 1)}}
    assert [p.path for p in bounds.bound_problems(wide)] == ["labels"]
    many = {f"k{i}": "\ud800" for i in range(500)}
    assert len(bounds.bound_problems(many)) == bounds.MAX_PROBLEMS


def test_a_key_is_quoted_cut_and_escaped() -> None:
    (problem,) = bounds.bound_problems({"maxtext_overrides": {"😀" * 5000: 1}})
    assert len(problem.path) < 120 and "(+4936 chars)" in problem.path
    (problem,) = bounds.bound_problems({"\ud800key": 1})
    assert problem.path == "\\ud800key"
    problem.path.encode("utf-8")  # valid Unicode: it can be stored


def test_emoji_keys_give_a_small_error_record_and_intake_answers(buckets: Buckets, executions: Any) -> None:
    """Twelve override keys of 5,000 emoji each once made a 6.25 MB error.json that could not be
    written, and intake answered 500 (endless redelivery)."""
    doc = minimal_request(maxtext_overrides={f"{i}" + "😀" * 5000: 1 for i in range(12)})
    intake = real_intake(buckets, executions)
    data = json.dumps(doc, ensure_ascii=False).encode()  # 240 kB: under the document limit
    # a .json request file (YAML's parser refuses flow keys over 1,024 characters by itself)
    result = intake.submit(
        data, Source(kind="gcs", bucket="b", name="r.json", generation="1"), "k1", source_name="r.json"
    )
    assert result.outcome == "rejected"
    store = buckets.store("state")
    (name,) = [n for n in store.list("runs/") if n.endswith("/error.json")]
    blob = store.read(name)
    assert len(blob.data) < 64 * 1024
    assert blob.json()["problem_count"] == 12


def test_a_lone_surrogate_never_reaches_a_ledger(buckets: Buckets, executions: Any) -> None:
    """Once accepted, such a run's ledger could not be parsed: `rlpipe list` crashed for everyone
    and the reconciler failed on it every pass."""
    data = json.dumps(minimal_request(maxtext_overrides={"x": "\ud800"})).encode()
    result = real_intake(buckets, executions).from_message(message("m2", data))
    assert result.outcome == "rejected" and "maxtext_overrides.x" in result.detail
    assert buckets.ledger().list_run_ids() == []
    assert executions.creates() == []
