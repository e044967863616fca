"""The record's free-form parts read as types: the request as it was recorded, the evaluations, and
the data and files the run was pinned to.

Why lenient views and not the models that wrote them: ``RunRecord`` keeps these as JSON
(``request``, ``results``, ``lineage.data``, ``lineage.inputs``) because their own models change
between versions and every ledger ever written must still load and be shown. A reader (the run
report, the comparison page) reads them through these views: a field that is absent, null or of
another shape than today's reads as unset, never as an error, and an entry of a list that cannot
be read is left out. Strict types, so nothing is coerced either: a ``"5"`` is not a step, a
``true`` not a count.
"""

from __future__ import annotations

from typing import Annotated, Any, TypeVar

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    ValidationError,
    ValidatorFunctionWrapHandler,
    WrapValidator,
)


def _unset_if_unreadable(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    try:
        return handler(value)
    except ValidationError:
        return None


def _mappings_only(value: Any) -> Any:
    """A list's entries that can be read as a view (every mapping can: each field is lenient)."""
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else value


_Lenient = WrapValidator(_unset_if_unreadable)
_Entries = BeforeValidator(_mappings_only)
Text = Annotated[str | None, _Lenient]
Count = Annotated[int | None, _Lenient]
Number = Annotated[float | None, _Lenient]
Texts = Annotated[list[str] | None, _Lenient]


class _View(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True, frozen=True)


_V = TypeVar("_V", bound=_View)


def _read(view: type[_V], raw: object) -> _V:
    """``raw`` as ``view``; anything that is not a mapping reads as a view with nothing set."""
    return view.model_validate(raw if isinstance(raw, dict) else {})


# ---- the evaluations (``RunRecord.results``, ``core.runs.results.merge_results``) ----------------


class Evaluation(_View):
    """One evaluation train_rl printed: ``pre``, ``post``, or an intermediate one at ``step``."""

    corr: Number = None
    total: Number = None
    accuracy: Number = None
    partial_accuracy: Number = None
    format_accuracy: Number = None
    mean_reward: Number = None
    step: Count = None  # intermediate evaluations only
    attempt: Count = None  # the attempt that printed it (ledgers before per-attempt evaluations: None)


class Results(_View):
    pre: Annotated[Evaluation | None, _Lenient] = None
    post: Annotated[Evaluation | None, _Lenient] = None
    intermediate: Annotated[list[Evaluation] | None, _Entries, _Lenient] = None
    final_step: Count = None


def results(raw: object) -> Results:
    return _read(Results, raw)


# ---- the request as the ledger recorded it (``RunRecord.request``; ``core.request.Request``) ------


class FileNamed(_View):
    """A file the request names (reward functions, processor, chat template)."""

    path: Text = None
    sha256: Text = None


class DatasetNamed(_View):
    repo: Text = None
    eval_repo: Text = None
    revision: Text = None
    eval_revision: Text = None
    subset: Text = None
    train_split: Text = None
    eval_split: Text = None
    processor: Annotated[FileNamed | None, _Lenient] = None


class RewardsNamed(_View):
    file: Annotated[FileNamed | None, _Lenient] = None
    functions: Texts = None


class TpuNamed(_View):
    type: Text = None
    provisioning: Text = None


class PublishNamed(_View):
    repo: Text = None
    branch: Text = None


class TrainingNamed(_View):
    data_template_path: Text = None


class SelectNamed(_View):
    metric: Text = None
    direction: Text = None


class SweepNamed(_View):
    select: Annotated[SelectNamed | None, _Lenient] = None


class RecordedRequest(_View):
    """The request fields a reader shows, as the run's record keeps them."""

    model: Text = None
    hf_repo: Text = None
    hf_revision: Text = None
    image: Text = None
    placement: Text = None
    labels: Annotated[dict[str, Any] | None, _Lenient] = None
    gate: Annotated[dict[str, Any] | None, _Lenient] = None  # thresholds by name (``GateSpec``)
    tpu: Annotated[TpuNamed | None, _Lenient] = None
    publish: Annotated[PublishNamed | None, _Lenient] = None
    dataset: Annotated[DatasetNamed | None, _Lenient] = None
    rewards: Annotated[RewardsNamed | None, _Lenient] = None
    chat_template: Annotated[FileNamed | None, _Lenient] = None
    training: Annotated[TrainingNamed | None, _Lenient] = None
    sweep: Annotated[SweepNamed | None, _Lenient] = None


def request(raw: object) -> RecordedRequest:
    return _read(RecordedRequest, raw)


# ---- what plan pinned and intake copied (``lineage.data``, ``lineage.inputs``) -----------------


class PinnedFile(_View):
    size: Count = None


class PinnedSplit(_View):
    """One dataset split at its commit (``control.adapters.hub_datasets``' record)."""

    repo: Text = None
    revision: Text = None
    sha: Text = None
    subset: Text = None
    split: Text = None
    files: Annotated[list[PinnedFile] | None, _Entries, _Lenient] = None  # None: not listed
    num_examples: Count = None


def _split(raw: object) -> PinnedSplit | None:
    """A pinned split; None when there is none (absent, or recorded as nothing)."""
    return _read(PinnedSplit, raw) if isinstance(raw, dict) and raw else None


class PinnedData(_View):
    train: PinnedSplit | None = None
    eval: PinnedSplit | None = None


def data(raw: object) -> PinnedData:
    pins = raw if isinstance(raw, dict) else {}
    return PinnedData(train=_split(pins.get("train")), eval=_split(pins.get("eval")))


class CopiedFile(_View):
    """A request's own file as intake copied it under the run's prefix (``control.lifecycle.user_files``)."""

    uri: Text = None
    sha256: Text = None
    functions: Texts = None


class CopiedFiles(_View):
    rewards: Annotated[CopiedFile | None, _Lenient] = None
    processor: Annotated[CopiedFile | None, _Lenient] = None
    chat_template: Annotated[CopiedFile | None, _Lenient] = None


def inputs(raw: object) -> CopiedFiles:
    return _read(CopiedFiles, raw)


# ---- a failure a round kept (``Round.previous_failure``: the ``Failure`` that ended the round) ----


class FailureRecorded(_View):
    tag: Text = None
    message: Text = None
    stage: Text = None
    attempt: Count = None
    caller: Text = None


def failure(raw: object) -> FailureRecorded | None:
    """The failure a round kept; None when it kept none."""
    return _read(FailureRecorded, raw) if isinstance(raw, dict) and raw else None
