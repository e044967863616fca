"""Checks that span several fields.

They read plain values from the merged document and skip any check whose inputs did not parse,
so a request with a bad field *and* a topology mismatch is told about both in one answer. Each
check returns ``Problem``s instead of raising.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from rlpipe.core import identity, presets, steps, tpu
from rlpipe.core.maxtext import model_names
from rlpipe.core.problems import Problem
from rlpipe.core.request import export_checks, outcome_checks, provisioning, reading

_LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_LABEL_PREFIX = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
# Prefixes the system owns: the pipeline's own labels, its controllers', Kubernetes'. Never a
# request's, whatever a deployment lists (a key under one is refused as reserved).
_RESERVED_LABEL_PREFIXES = (
    "rlpipe.dev",
    "kueue.x-k8s.io",
    "jobset.sigs.k8s.io",
    "kubernetes.io",
    "k8s.io",
    "x-k8s.io",
)
# A key without a prefix, as a request may write one: no dots, so it cannot be one of the
# domain-named keys controllers also use without a "/" (the coscheduling plugin's
# pod-group.scheduling.sigs.k8s.io).
_PLAIN_LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_]*[A-Za-z0-9])?$")
MODEL_LABEL = "rlpipe.dev/model"
# Which label keys a request may set. Why an allowlist: a request's labels are copied onto every
# pod and workload (core/manifests/common.py), and other controllers select pods by label
# (scheduling.x-k8s.io/pod-group gang-schedules, sidecar.istio.io/inject adds or drops a proxy,
# app.kubernetes.io/name joins a Service or NetworkPolicy), so no list of reserved prefixes was
# ever complete. Every prefix belongs to someone whose controller may read it; only the
# deployment knows which are its own, so by default none is allowed and only plain names are.
DEFAULT_LABEL_PREFIXES: tuple[str, ...] = ()
LABEL_PREFIX_SETTING = "RLPIPE_ALLOWED_LABEL_PREFIXES"


class _Missing(Exception):
    """An input of a check did not parse; the field's own error is reported instead."""


def _get(doc: Any, path: str, kind: type | tuple[type, ...]) -> Any:
    node = doc
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            raise _Missing(path)
        node = node[part]
    if isinstance(node, bool) and kind in (int, float, (int, float)):
        raise _Missing(path)
    if not isinstance(node, kind):
        raise _Missing(path)
    return node


def _number(doc: Any, path: str) -> float:
    value = float(_get(doc, path, (int, float)))
    if not math.isfinite(value):
        raise _Missing(path)  # pydantic reports inf/nan on the field itself
    return value


def cross_field_problems(doc: dict[str, Any]) -> list[Problem]:
    problems: list[Problem] = []
    for check in _CHECKS:
        try:
            problems.extend(check(doc))
        except _Missing:
            continue
    return problems


def _topology(doc: dict[str, Any]) -> Iterator[Problem]:
    shape = tpu.SHAPES.get(_get(doc, "tpu.type", str))
    topology = _get(doc, "tpu.topology", str)
    if shape and topology != shape.topology:
        yield Problem(
            "tpu.topology",
            f"topology {topology} does not match TPU type {shape.type}",
            f"use topology {shape.topology} for {shape.type}, or change tpu.type",
        )


def _parallelism(doc: dict[str, Any]) -> Iterator[Problem]:
    """Trainer and sampler meshes must tile the chips MaxText gives each of them."""
    shape = tpu.SHAPES.get(_get(doc, "tpu.type", str))
    slices = _get(doc, "tpu.slices", int)
    if shape is None or slices < 1 or _get(doc, "tpu.topology", str) != shape.topology:
        return  # reported elsewhere; chip counts would be meaningless
    chips = shape.chips * slices
    f_train = _number(doc, "training.trainer_devices_fraction")
    f_sample = _number(doc, "training.sampler_devices_fraction")
    if not (0 < f_train <= 1 and 0 < f_sample <= 1):
        return  # pydantic reports a fraction outside (0, 1] on the field itself
    bad = False
    if f_train + f_sample > 1.0 + 1e-9:
        bad = True
        yield Problem(
            "training.sampler_devices_fraction",
            f"trainer ({f_train}) + sampler ({f_sample}) device fractions exceed 1",
            "make the two fractions add up to at most 1",
        )
    for field, fraction in (("trainer_devices_fraction", f_train), ("sampler_devices_fraction", f_sample)):
        devices = fraction * chips
        if abs(devices - round(devices)) > 1e-6 or round(devices) < 1:
            bad = True
            yield Problem(
                f"training.{field}",
                f"{field} × {chips} chips = {devices:g}, not a whole number of chips",
                f"choose a fraction f with f × {chips} a whole number ≥ 1",
            )
    if bad:
        return
    trainer_chips, sampler_chips = round(f_train * chips), round(f_sample * chips)
    ici = _get(doc, "training.ici_tensor_parallelism", int) * _get(
        doc, "training.ici_expert_parallelism", int
    )
    fsdp = _get(doc, "training", dict).get("ici_fsdp_parallelism")
    if isinstance(fsdp, int) and not isinstance(fsdp, bool) and fsdp not in (-1,) and fsdp > 0:
        if ici * fsdp != trainer_chips:
            yield Problem(
                "training.ici_fsdp_parallelism",
                f"ici_tensor × ici_expert × ici_fsdp = {ici * fsdp}, but the trainer has {trainer_chips} chips",
                f"make the product equal {trainer_chips}, or set ici_fsdp_parallelism to -1 (fill)",
            )
    else:
        # MaxText builds the sampler's mesh from the same ici_* settings, so both must tile.
        for role, count in (("trainer", trainer_chips), ("sampler", sampler_chips)):
            if ici > 0 and count % ici:
                yield Problem(
                    "training.ici_tensor_parallelism",
                    f"ici_tensor × ici_expert = {ici} does not divide the {role}'s {count} chips",
                    f"choose ici_tensor_parallelism × ici_expert_parallelism dividing {count}",
                )
    rollout = _get(doc, "training.rollout_tensor_parallelism", int) * _get(
        doc, "training.rollout_expert_parallelism", int
    )
    if rollout > 0 and sampler_chips % rollout:
        yield Problem(
            "training.rollout_tensor_parallelism",
            f"rollout_tensor × rollout_expert = {rollout} does not divide the sampler's {sampler_chips} chips",
            f"choose rollout_tensor_parallelism × rollout_expert_parallelism dividing {sampler_chips}",
        )


def _batching(doc: dict[str, Any]) -> Iterator[Problem]:
    batch = _get(doc, "training.batch_size", int)
    micro = _get(doc, "training", dict).get("train_micro_batch_size")
    if isinstance(micro, int) and not isinstance(micro, bool) and micro > 0 and batch % micro:
        yield Problem(
            "training.batch_size",
            f"batch_size {batch} is not divisible by train_micro_batch_size {micro}",
            "make batch_size a multiple of train_micro_batch_size",
        )


def _prefill(doc: dict[str, Any]) -> Iterator[Problem]:
    prefill = _get(doc, "training.max_prefill_predict_length", int)
    target = _get(doc, "training.max_target_length", int)
    if prefill >= target:
        yield Problem(
            "training.max_prefill_predict_length",
            f"prefill length {prefill} leaves no room to generate within max_target_length {target}",
            "make max_prefill_predict_length smaller than max_target_length",
        )


def _overrides(doc: dict[str, Any]) -> Iterator[Problem]:
    """Override keys as MaxText reads them (``reading``); their values are read with the rest of
    the request's arguments once the schema has typed them (``reading.argument_problems``)."""
    yield from reading.override_key_problems(_get(doc, "maxtext_overrides", dict))


def _training_steps(doc: dict[str, Any]) -> Iterator[Problem]:
    """Overrides must leave the final step computable and checkpointed (the train done rule)."""
    _get(doc, "maxtext_overrides", dict)
    try:  # on the values as MaxText reads them ("3" is 3); a text written otherwise is refused too
        steps.document_steps(doc)
    except steps.ConfigProblem as exc:
        yield Problem(exc.path, exc.problem, exc.fix)


def _known_model(doc: dict[str, Any]) -> Iterator[Problem]:
    """A model MaxText knows, that its converters map, of the architecture the preset was made for
    (``core.maxtext.model_names``)."""
    model = _get(doc, "model", str)
    known = model_names.models().get(model)
    preset = doc.get("preset", presets.DEFAULT_PRESET)
    block = presets.PRESET_DECODER_BLOCK.get(preset) if isinstance(preset, str) else None
    fitting = model_names.of_block(block) if block else []
    if known is None:
        nearest = model_names.closest(model)
        yield Problem(
            "model",
            f"{model} is not a model MaxText knows (no configs/models/{model}.yml in {model_names.source()})",
            (f"did you mean {nearest}? " if nearest else "")
            + (f"the {preset} preset trains {', '.join(fitting)}" if fitting else "use a MaxText model name"),
        )
        return
    if not known.convertible:
        yield Problem(
            "model",
            f"MaxText's converters have no mapping for {model} (it is not in HF_IDS and PARAM_MAPPING), so "
            "neither convert nor export could run",
            "use a model to_maxtext converts" + (f": {', '.join(fitting)}" if fitting else ""),
        )
        return
    if block is not None and known.decoder_block != block:
        yield Problem(
            "model",
            f"{model} is a {known.decoder_block} model, but the {preset} preset is made for {block} models "
            "(its parallelism, vLLM settings and workarounds are theirs)",
            f"use one of {', '.join(fitting)} with this preset",
        )


def _model_label(doc: dict[str, Any]) -> Iterator[Problem]:
    model = _get(doc, "model", str)
    if len(model) > 63:
        yield Problem(
            "model",
            f"model name is {len(model)} characters; it becomes the label {MODEL_LABEL}, limited to 63",
            "use a MaxText model name of at most 63 characters",
        )


def _labels(doc: dict[str, Any]) -> Iterator[Problem]:
    labels = _get(doc, "labels", dict)
    for key, value in labels.items():
        if isinstance(key, str) and isinstance(value, str):
            yield from _label_problems(key, value)
    # Which keys are allowed at all is the deployment's (Policy.problems: label_key_problems with
    # its RLPIPE_ALLOWED_LABEL_PREFIXES); here only what Kubernetes itself refuses.


def label_key_problems(
    labels: Mapping[Any, Any],
    allowed_prefixes: Iterable[str] = DEFAULT_LABEL_PREFIXES,
    setting: str = LABEL_PREFIX_SETTING,
) -> Iterator[Problem]:
    """Every label key outside the allowlist: a plain name (no prefix, no dots), or a key whose
    prefix is exactly one ``allowed_prefixes`` lists and the system does not own (a reserved
    prefix is refused even when listed). ``setting`` is where an operator lists prefixes (the
    deployment's, or a team's), as the fix names it. Keys Kubernetes' syntax refuses are
    ``_label_problems``' to report."""
    allowed = frozenset(allowed_prefixes)
    for key in labels:
        if not isinstance(key, str):
            continue
        prefix, slash, name = key.rpartition("/")
        if not slash:
            if _LABEL_NAME.match(key) and not _PLAIN_LABEL_NAME.match(key):
                yield Problem(
                    f"labels.{key}",
                    f"label key {key!r} has dots but no prefix: controllers name keys after their domain "
                    "this way too (pod-group.scheduling.sigs.k8s.io), so it is read as a prefixed key",
                    "use a name without a prefix or dots (letters, digits, '-', '_'), e.g. "
                    f"{key.replace('.', '-')[:63]!r}",
                )
            continue
        if len(prefix) > 253 or not _LABEL_PREFIX.match(prefix):
            continue  # not a DNS subdomain: _label_problems reports it
        if _reserved(prefix):
            yield Problem(
                f"labels.{key}",
                f"label prefix {prefix!r} is reserved for the system (the pipeline, Kueue, JobSet, Kubernetes)",
                f"use a key without a prefix ({name!r}); no deployment setting allows this one",
            )
        elif prefix not in allowed:
            yield Problem(
                f"labels.{key}",
                f"label prefix {prefix!r} is not one this deployment lets requests set: the labels go on "
                "every pod, where the controller that owns a prefix may act on them",
                f"use a key without a prefix ({name!r}), or ask the operator to list {prefix} in {setting}",
            )


def label_prefix_setting_problems(
    prefixes: Iterable[str], setting: str = LABEL_PREFIX_SETTING
) -> list[Problem]:
    """What is wrong with a deployment's list of label prefixes, checked when it loads: each must
    be a label prefix (a lower-case DNS subdomain, compared exactly) the system does not own."""
    found: list[Problem] = []
    for prefix in prefixes:
        if not prefix or len(prefix) > 253 or not _LABEL_PREFIX.match(prefix):
            found.append(
                Problem(
                    setting,
                    f"{prefix!r} is not a label prefix (a lower-case DNS subdomain, no '/')",
                    "list prefixes such as team.example.com",
                )
            )
        elif _reserved(prefix):
            found.append(
                Problem(
                    setting,
                    f"{prefix} is reserved for the system (the pipeline, Kueue, JobSet, Kubernetes)",
                    "remove it; no deployment setting allows it",
                )
            )
    return found


def _reserved(prefix: str) -> bool:
    return any(prefix == p or prefix.endswith("." + p) for p in _RESERVED_LABEL_PREFIXES)


def _attempt_names(doc: dict[str, Any]) -> Iterator[Problem]:
    """The highest attempt number a stage can reach must still give a valid workload name."""
    last_attempt = _get(doc, "retry.max_retries", int) + 1
    try:
        identity.workload_name("r" * identity.RUN_ID_LENGTH, "convert", max(last_attempt, 1))
    except ValueError as exc:
        yield Problem("retry.max_retries", str(exc), "lower retry.max_retries")


def _label_problems(key: str, value: str) -> Iterator[Problem]:
    path = f"labels.{key}"
    prefix, slash, name = key.rpartition("/")
    if slash and (len(prefix) > 253 or not _LABEL_PREFIX.match(prefix)):  # "/name" too
        yield Problem(
            path, f"label prefix {prefix!r} is not a DNS subdomain", "use e.g. team.example.com/name"
        )
    if not name or len(name) > 63 or not _LABEL_NAME.match(name):
        yield Problem(
            path,
            f"label name {name!r} is not a valid Kubernetes label name (1–63 characters)",
            "use at most 63 letters, digits, '-', '_' or '.', starting and ending alphanumeric",
        )
    if len(value) > 63 or (value and not _LABEL_NAME.match(value)):
        yield Problem(
            path,
            f"label value has {len(value)} characters or invalid ones; Kubernetes allows 63",
            "shorten the value to at most 63 letters, digits, '-', '_' or '.'",
        )


_CHECKS: tuple[Callable[[dict[str, Any]], Iterator[Problem]], ...] = (
    _topology,
    _parallelism,
    _batching,
    _prefill,
    _overrides,
    _training_steps,
    _known_model,
    _model_label,
    _labels,
    _attempt_names,
    outcome_checks.gate_problems,
    outcome_checks.publish_problems,
    export_checks.problems,
    provisioning.problems,
)
