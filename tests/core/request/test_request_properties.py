"""Property-based: arbitrary documents either parse or raise RequestInvalid, never anything else."""

from __future__ import annotations

import contextlib
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlpipe.core.manifests import RenderContext, render_all
from rlpipe.core.problems import RequestInvalid
from rlpipe.core.request import Request, load_request, validate_request
from rlpipe.local.kube_api.validation import validate_object

KEYS = [*list(Request.model_fields), "training", "tpu", "x"]
TRAINING_KEYS = [
    "batch_size",
    "train_micro_batch_size",
    "num_batches",
    "ici_tensor_parallelism",
    "ici_fsdp_parallelism",
    "rollout_tensor_parallelism",
    "trainer_devices_fraction",
    "workarounds",
    "learning_rate",
    "debug",
    "vllm_maxtext_config",
    "bogus",
]

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30),
    st.sampled_from(["v6e-32", "v6e-64", "4x8", "8x8", "main", "cpu", "tpu-slice", "1h", "latest"]),
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)
documents = st.fixed_dictionaries(
    {},
    optional={
        "model": st.one_of(st.just("gemma4-26b"), values),
        "hf_repo": st.one_of(st.just("google/gemma-4-26b-a4b-it"), values),
        "preset": st.one_of(st.sampled_from(["v6e-32", "v6e-64"]), values),
        "tpu": st.dictionaries(
            st.sampled_from(["type", "topology", "slices", "queue", "x"]), values, max_size=4
        ),
        "training": st.dictionaries(st.sampled_from(TRAINING_KEYS), values, max_size=5),
        "maxtext_overrides": values,
        "labels": values,
        "retry": values,
        "timeouts": values,
        "placement": values,
    },
).flatmap(
    lambda d: st.dictionaries(st.sampled_from(KEYS), values, max_size=2).map(lambda extra: {**extra, **d})
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents)
def test_documents_parse_or_raise_request_invalid(doc: dict[str, Any]) -> None:
    try:
        req = validate_request(doc)
    except RequestInvalid as exc:
        assert exc.problems and all(p.message and p.fix for p in exc.problems)
        return
    # Whatever parses must render to objects the cluster would accept.
    for obj in render_all(req, RenderContext(run_id="rproperty001", bucket="b")):
        assert validate_object(obj) == []


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300) | st.text(max_size=300).map(str.encode))
def test_arbitrary_bytes_parse_or_raise_request_invalid(data: bytes) -> None:
    with contextlib.suppress(RequestInvalid):
        load_request(data)


class _NoAliasDumper(yaml.SafeDumper):
    """Requests refuse YAML aliases, so the round trip must not introduce any."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


@settings(max_examples=200, deadline=None)
@given(documents)
def test_yaml_round_trip_of_any_document_behaves_like_the_mapping(doc: dict[str, Any]) -> None:
    try:
        text = yaml.dump(doc, Dumper=_NoAliasDumper)
    except yaml.YAMLError:
        return
    try:
        a: Any = validate_request(doc)
    except RequestInvalid:
        a = "invalid"
    try:
        b: Any = load_request(text.encode())
    except RequestInvalid:
        b = "invalid"
    assert (a == "invalid") == (b == "invalid")
