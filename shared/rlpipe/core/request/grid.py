"""A sweep's grid: the child requests it becomes, and why one would be refused.

Why every child is validated as a whole request: a point may only set what one request could set,
so the checks a single request passes (ranges, cross-field rules, the deployment's allowlists) are
the checks each child passes; nothing is special-cased for sweeps except what the children must
share (the conversion, the data, the destination) and what they must not (being the same run).
The validator is passed in (``validation.validate_request``), so nothing here imports upwards.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rlpipe.core.problems import Problem, RequestInvalid
from rlpipe.core.request.model import TYPED_OVERRIDE_KEYS, Request, TrainingSpec
from rlpipe.core.request.policy import SETTINGS, Policy
from rlpipe.core.request.stop_schedule import stop_problems
from rlpipe.core.request.sweep import Scalar, SweepSpec

Validate = Callable[[dict[str, Any], Policy], Request]
TRAINING = "training."
OVERRIDES = "maxtext_overrides."
# Training fields that are not hyper-parameters: what runs in the container, what the data is,
# or what the shared conversion depends on. A sweep over one would make children that no longer
# share the conversion and the data the parent pinned once.
PROTECTED_TRAINING: dict[str, str] = {
    "command_env": "the variables train_rl runs with",
    "workarounds": "the in-container patches",
    "tokenizer_path": "which tokenizer reads the data",
    "data_template_path": "how every example is templated",
    "scan_layers": "how the checkpoint is converted, and every child shares one conversion",
    "vllm_maxtext_config": "a map, not one value",
}


@dataclass(frozen=True)
class Child:
    """One point of the grid, and the whole request it runs."""

    index: int
    point: dict[str, Scalar]
    request: Request

    @property
    def label(self) -> str:
        return describe(self.point)


def describe(point: Mapping[str, Any]) -> str:
    """``learning_rate=1e-06, rl.num_generations=4``: a point as a person reads it."""
    return ", ".join(
        f"{short_key(k)}={v!r}" if isinstance(v, str) else f"{short_key(k)}={v}" for k, v in point.items()
    )


def short_key(key: str) -> str:
    for prefix in (TRAINING, OVERRIDES):
        if key.startswith(prefix):
            return key[len(prefix) :]
    return key


def child_key(parent_key: str, index: int) -> str:
    """A child's idempotency key: derived from the parent's, so a redelivered sweep file finds
    the same children (``identity.run_id_for`` of it is the child's run id)."""
    return f"{parent_key}#sweep-point-{index}"


def size(spec: SweepSpec) -> int:
    if spec.grid is not None:
        return math.prod(len(values) for values in spec.grid.values())
    return len(spec.points or [])


def points(spec: SweepSpec) -> list[dict[str, Scalar]]:
    """The points in order: a grid's combinations with its last key varying fastest."""
    if spec.grid is not None:
        keys = list(spec.grid)
        return [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*spec.grid.values())]
    return [dict(p) for p in spec.points or []]


def parallelism(spec: SweepSpec, n: int) -> int:
    return min(spec.max_parallel or n, n)


# ---- validation -------------------------------------------------------------------------------


def problems(request: Request, policy: Policy, validate: Validate) -> list[Problem]:
    """Everything wrong with the request's sweep; [] when it has none or it is sound."""
    try:
        children(request, policy, validate)
    except RequestInvalid as exc:
        return exc.problems
    return []


def children(request: Request, policy: Policy, validate: Validate) -> list[Child]:
    """The child requests, each validated as if submitted alone by ``validate``
    (``validation.validate_request``, passed in so this module needs nothing above it).
    Raises ``RequestInvalid``."""
    spec = request.sweep
    if spec is None:
        return []
    found = list(_shape_problems(request, spec, policy))
    if found:
        raise RequestInvalid(found)
    base = request.model_dump(mode="json")
    base["sweep"] = None
    made: list[Child] = []
    for index, point in enumerate(points(spec)):
        doc = _apply(base, point)
        try:
            made.append(Child(index, point, validate(doc, policy)))
        except RequestInvalid as exc:
            where = f"sweep child {index} ({describe(point)})"
            found.extend(
                Problem(f"{where}: {p.path}" if p.path else where, p.message, p.fix) for p in exc.problems
            )
    found.extend(_collisions(made))
    if not found:
        found.extend(stop_problems(spec, made))
    if found:
        raise RequestInvalid(list(dict.fromkeys(found)))
    return made


def _shape_problems(request: Request, spec: SweepSpec, policy: Policy) -> list[Problem]:
    found: list[Problem] = []
    if (spec.grid is None) == (spec.points is None):
        found.append(
            Problem(
                "sweep",
                "a sweep needs exactly one of grid and points",
                "keep grid (every combination) or points (a list)",
            )
        )
        return found
    n = size(spec)
    if n > policy.max_sweep_children:
        found.append(
            Problem(
                "sweep",
                f"this sweep makes {n} children; this deployment allows at most {policy.max_sweep_children}",
                f"take fewer values or points, or ask the operator to raise {SETTINGS['sweep']}",
            )
        )
    where = "sweep.grid" if spec.grid is not None else "sweep.points"
    keys = (
        list(spec.grid)
        if spec.grid is not None
        else list(dict.fromkeys(k for p in spec.points or [] for k in p))
    )
    found.extend(p for key in keys if (p := key_problem(key, where)) is not None)
    if request.publish is not None and spec.select is None:
        found.append(
            Problem(
                "sweep.select",
                f"every child would publish to {request.publish.repo}@{request.publish.branch}",
                "add sweep.select (a metric and its direction) so only the chosen child publishes, "
                "or remove publish",
            )
        )
    return found


def key_problem(key: str, where: str = "sweep.grid") -> Problem | None:
    """Why a sweep may not vary ``key`` (None: it may). A sweep varies training only."""
    path = f"{where}.{key}"
    if key.startswith(OVERRIDES):
        name = key[len(OVERRIDES) :]
        typed = TYPED_OVERRIDE_KEYS.get(name)
        if typed is not None:
            return Problem(
                path,
                f"{name} is the request's {typed}, not a free MaxText key",
                f"sweep over {typed}"
                if typed.startswith(TRAINING)
                else f"{typed} is shared by every child; run a separate request for each value",
            )
        return None  # the children's own validation checks the key like any override
    if key.startswith(TRAINING):
        name = key[len(TRAINING) :]
        if name not in TrainingSpec.model_fields:
            return Problem(
                path,
                f"training has no field {name!r}",
                "use a training field, or maxtext_overrides.<key> for a MaxText key the request has no field for",
            )
        if name in PROTECTED_TRAINING:
            return Problem(
                path,
                f"training.{name} is {PROTECTED_TRAINING[name]}, which every child shares",
                "set it once for the whole request, outside sweep",
            )
        return None
    top = key.split(".", 1)[0]
    return Problem(
        path,
        f"{top} is shared by every child (the model, its data, image, slice and destination are the "
        "parent's, pinned once)",
        f"sweep over training.<field> or maxtext_overrides.<key>; submit a separate request for each {top}",
    )


def _apply(base: Mapping[str, Any], point: Mapping[str, Scalar]) -> dict[str, Any]:
    doc = {k: (dict(v) if isinstance(v, dict) else v) for k, v in base.items()}
    for key, value in point.items():
        section = TRAINING[:-1] if key.startswith(TRAINING) else OVERRIDES[:-1]
        doc[section] = {**doc[section], key[len(section) + 1 :]: value}
    return doc


def _collisions(made: Sequence[Child]) -> list[Problem]:
    found: list[Problem] = []
    seen: dict[str, Child] = {}
    for child in made:
        body = child.request.model_dump_json()
        first = seen.setdefault(body, child)
        if first is not child:
            found.append(
                Problem(
                    "sweep",
                    f"children {first.index} ({first.label}) and {child.index} ({child.label}) would be "
                    "the same run",
                    "remove the repeated value or point",
                )
            )
    return found
