"""The run report's facts: evaluations and the reward curve, lineage and conversion, publishing
and the gate.

Split from the package's entry point (``rlpipe.report``) so each module has one job; pure: a run's
record (``core.runs.record.RunRecord``, its free-form parts read through ``core.runs.recorded``) and
the rows of ``.rows`` in, facts out.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from rlpipe.core.runs import recorded
from rlpipe.core.runs.record import RunRecord
from rlpipe.core.staging import BUILTIN_REWARDS, BUILTIN_REWARDS_SOURCE
from rlpipe.report.charts import (
    Curve,
    Point,
    Resume,
    Series,
    finite,
    fmt_accuracy,
    fmt_reward,
)
from rlpipe.report.rows import (
    _COMMIT,
    _EVAL_FIELDS,
    _PUBLISHED_OUTCOMES,
    AttemptRow,
    _plural,
    _show_time,
    _str,
    attempt_rows,
    converted_by,
    round_count,
)


def _label(attempt: int | None, train_rounds: dict[int, int], many_rounds: bool) -> str:
    if attempt is None:
        return "attempt not recorded"
    where = train_rounds.get(attempt)
    return f"attempt {attempt}" + (f" (round {where})" if many_rounds and where else "")


def _point(evaluation: recorded.Evaluation | None, step: int | None) -> Point | None:
    if step is None or evaluation is None:
        return None
    reward, accuracy = finite(evaluation.mean_reward), finite(evaluation.accuracy)
    if reward is None and accuracy is None:
        return None
    return Point(step, reward, accuracy, evaluation.attempt)


def reward_curve(record: RunRecord, now: datetime | None = None) -> Curve | None:
    """Intermediate evaluations (one series per attempt), pre at step 0 and post at the final
    step; None when there are none.

    A resumed attempt evaluates again at steps an earlier attempt reached: both points are kept,
    each in its attempt's series (entries from ledgers that did not record the attempt form their
    own series). The final step is ``results.final_step``, never left of the last intermediate
    evaluation (post runs after training); without either, the lineage's final step."""
    results = recorded.results(record.results)
    intermediate = sorted(
        (p for p in (_point(e, e.step) for e in results.intermediate or []) if p),
        key=lambda p: (p.step, -1 if p.attempt is None else p.attempt),
    )
    steps = [s for s in (results.final_step, intermediate[-1].step if intermediate else None) if s]
    final = max(steps) if steps else record.lineage.final_step
    pre = _point(results.pre, 0)
    post = _point(results.post, final if final is not None else 0)
    if not intermediate and pre is None and post is None:
        return None
    rows = attempt_rows(record, now or datetime.now(UTC))
    train = {r.attempt: r.round for r in rows if r.stage == "train"}
    many = round_count(record, rows) > 1
    attempts = sorted({p.attempt for p in intermediate}, key=lambda a: -1 if a is None else a)
    series = [
        Series(
            gid="unlabelled" if a is None else f"a{a}",
            label=_label(a, train, many),
            points=[p for p in intermediate if p.attempt == a],
        )
        for a in attempts
    ]
    resumes = [
        Resume(step=r.resume_step, attempt=r.attempt, label=f"{_label(r.attempt, train, many)} resumed")
        for r in rows
        if r.stage == "train" and r.resume_step
    ]
    return Curve(intermediate=intermediate, pre=pre, post=post, series=series, resumes=resumes)


def evaluations(record: RunRecord) -> list[dict[str, Any]]:
    """The pre and post evaluations as table rows (every field train_rl prints)."""
    results = recorded.results(record.results)
    rows = []
    for name, data in (("pre", results.pre), ("post", results.post)):
        if data is None:
            continue
        row: dict[str, Any] = {"name": name}
        for field in _EVAL_FIELDS:
            value = finite(getattr(data, field))
            if value is None:
                row[field] = "-"
            elif field == "mean_reward":
                row[field] = fmt_reward(value)
            elif field.endswith("accuracy"):
                row[field] = fmt_accuracy(value)
            else:
                row[field] = f"{value:g}"
        rows.append(row)
    pre, post = (finite(e.mean_reward) if e else None for e in (results.pre, results.post))
    if pre is not None and post is not None:
        rows.append(
            {"name": "change", **dict.fromkeys(_EVAL_FIELDS, ""), "mean_reward": f"{post - pre:+.4f}"}
        )
    return rows


def conversion(record: RunRecord, rows: Sequence[AttemptRow]) -> str:
    """Where the converted checkpoint came from, across rounds.

    ``lineage.conversion_cache_hit`` is what the latest round's plan found, so on its own it misleads:
    a run that converted in round 1 finds its own conversion in the cache in round 2, and a report
    read between the two says "no" for a round that converted nothing. This says which attempt of
    which run converted it, and what each later round did."""
    run_id, hit = record.run_id, record.lineage.conversion_cache_hit
    many = round_count(record, rows) > 1
    maker = converted_by(record.lineage.converted_uri)
    convert = [r for r in rows if r.stage == "convert"]
    done = [r for r in convert if r.outcome == "succeeded"]
    if done:
        mine = next((r for r in done if maker == (run_id, r.attempt)), done[-1])
        text = f"converted by this run: convert #{mine.attempt}" + (f" in round {mine.round}" if many else "")
        if maker is not None and maker[0] != run_id:
            text += (
                f"; run {maker[0]}'s conversion (attempt {maker[1]}) reached the cache first, "
                "and it is the one training loads"
            )
        later = list(range(mine.round + 1, round_count(record, rows) + 1))
        if later:
            names = ", ".join(str(n) for n in later)
            text += f"; {'round' if len(later) == 1 else 'rounds'} {names} reused it (no conversion)"
        return text
    if hit is True:
        if maker is not None and maker[0] != run_id:
            return f"cache hit: loaded run {maker[0]}'s conversion (its convert #{maker[1]}); this run converted nothing"
        return "cache hit: loaded an earlier conversion of the same repo, sha, flags and image; this run converted nothing"
    if convert:
        if any(r.outcome == "running" for r in convert):
            return f"converting: {_plural(len(convert), 'attempt')} so far"
        return f"not converted: {_plural(len(convert), 'convert attempt')}, none succeeded"
    if hit is False:
        return "cache miss: not converted yet"
    return "-"


def lineage(record: RunRecord, rows: Sequence[AttemptRow]) -> list[tuple[str, str]]:
    lin, request = record.lineage, recorded.request(record.request)
    items: list[tuple[str, object]] = [
        ("Hugging Face repo", lin.hf_repo or request.hf_repo),
        ("revision", lin.hf_revision or request.hf_revision),
        ("pinned sha", lin.hf_sha),
        ("image", lin.image or request.image),
        ("conversion key", lin.conversion_key),
        ("conversion", conversion(record, rows)),
        ("converted checkpoint", lin.converted_uri),
        ("checkpoint uri", lin.checkpoint_uri),
        ("export uri", lin.export_uri),
        ("published to", lin.published_to),
        ("final step", lin.final_step),
        (
            "exported step",
            f"{lin.exported_step}: {lin.export_reason}" if lin.exported_step is not None else None,
        ),
    ]
    return [(label, "-" if value is None or value == "" else str(value)) for label, value in items]


def _where(record: RunRecord) -> tuple[str, str] | None:
    """The Hub repository and branch the run publishes to (the lineage's, else the request's)."""
    published_to = record.lineage.published_to
    if published_to and "@" in published_to:
        repo, _, branch = published_to.rpartition("@")
        return repo, branch
    spec = recorded.request(record.request).publish
    if spec is not None and spec.repo:
        return spec.repo, spec.branch or "main"
    return None


def _receipt_commit(
    receipt: dict[str, Any] | None, record: RunRecord, where: tuple[str, str]
) -> tuple[str, str] | None:
    """The commit and outcome of a receipt that is this run's, for this repo and branch. The publish
    Job writes the receipt, so only a hex commit and a known outcome are taken from it."""
    data = receipt if isinstance(receipt, dict) else {}
    commit = data.get("commit")
    if (data.get("repo"), data.get("branch"), data.get("run_id")) != (*where, record.run_id):
        return None
    if data.get("outcome") not in _PUBLISHED_OUTCOMES or not isinstance(commit, str):
        return None
    return (commit, str(data["outcome"])) if _COMMIT.fullmatch(commit) else None


def published(
    record: RunRecord, rows: Sequence[AttemptRow], receipt: dict[str, Any] | None = None
) -> dict[str, Any] | None:
    """Where the model was published and at which commit, or None for a run that does not publish.

    The commit is the ledger's (``lineage.published_commit``) when it has one, else, once a publish
    attempt succeeded, the publish receipt's (``runs/<id>/publish/receipt.json`` in the artifacts
    bucket, which the done rule checked), when the caller read it."""
    where = _where(record)
    if where is None:
        return None
    attempts = [r for r in rows if r.stage == "publish"]
    if any(r.outcome == "succeeded" for r in attempts):
        status = "published"
    elif any(r.outcome == "running" for r in attempts):
        status = "publishing"
    elif attempts:
        status = "not published: every publish attempt failed or was cancelled"
    else:
        status = "not published yet"
    commit, source, outcome = record.lineage.published_commit or None, "the ledger", None
    if commit is not None and not _COMMIT.fullmatch(commit):
        commit = None
    # A receipt before the publish attempt's success was read is not yet the stage's word.
    if commit is None and status == "published" and (found := _receipt_commit(receipt, record, where)):
        commit, outcome = found
        source = "the publish receipt"
    return {
        "repo": where[0],
        "branch": where[1],
        "status": status,
        "done": status == "published",
        "commit": commit,
        "source": source if commit else None,
        "outcome": outcome,
    }


def gate(record: RunRecord) -> dict[str, Any] | None:
    """The gate's result, reasons and override, or None when no gate was evaluated."""
    if record.gate is None:
        return None
    passed, override = record.gate.passed, record.gate.override
    return {
        "status": "passed" if passed is True else "failed" if passed is False else "pending",
        "reasons": list(record.gate.reasons),
        "evaluated_at": _show_time(record.gate.evaluated_at),
        "override": {
            "by": override.by or "-",
            "at": _show_time(override.at),
            "reason": override.reason or "-",
            # the identity Google verified on the promote call, beside the name the person gave
            "caller": _str(override.caller),
        }
        if override is not None
        else None,
    }


# ---- data and rewards -----------------------------------------------------------------------------

# train_rl.py: prepare_train_and_eval_dataset(test_size=0.05) (maxtext 0.2.4 train_rl.py:306-330).
HELD_OUT = "5% held out of the training split by train_rl"


def _files_text(entry: recorded.PinnedSplit) -> str:
    if entry.files is None:
        return "not recorded"
    size = sum(f.size or 0 for f in entry.files)
    return f"{_plural(len(entry.files), 'file')}, {size:,} bytes"


def _dataset_row(
    role: str, name: str, entry: recorded.PinnedSplit | None, spec: recorded.DatasetNamed
) -> dict[str, Any]:
    """One split the run read: plan's pin (``lineage.data``) when it has one, else the request's names."""
    pin = entry or recorded.PinnedSplit()
    evaluation = role == "eval"
    repo = pin.repo or (spec.eval_repo if evaluation else spec.repo) or spec.repo
    revision = pin.revision or (spec.eval_revision if evaluation else None) or spec.revision
    split = spec.eval_split if evaluation else spec.train_split
    return {
        "role": role,
        "name": name,
        "repo": repo or "-",
        "sha": pin.sha or None,
        "revision": revision or "-",
        "subset": pin.subset or spec.subset or "the default config",
        "split": pin.split or split or "-",
        "files": _files_text(pin) if entry is not None else "not pinned yet",
        "examples": f"{pin.num_examples:,}" if pin.num_examples is not None else "not stated by its card",
        "held_out": None,
    }


def _user_file(named: recorded.FileNamed | None, copied: recorded.CopiedFile | None) -> dict[str, Any] | None:
    """The request's own file: the run's copy and sha256 intake recorded (``lineage.inputs``),
    else what the ledger's request names (intake rewrote it to that copy)."""
    if named is None and copied is None:
        return None
    path = named.path if named is not None else None
    return {
        "sha256": (copied.sha256 if copied else None) or (named.sha256 if named else None) or "not recorded",
        "uri": (copied.uri if copied else None)
        or (path if path and path.startswith("gs://") else None)
        or "not recorded",
    }


def _expected_final_step(request: dict[str, Any]) -> int | None:
    """The step the request's config ends at with plentiful data (``core.steps.final_step``); None
    for a record whose request no longer validates (an older ledger)."""
    from rlpipe.core import steps
    from rlpipe.core.request import Request

    try:
        return steps.final_step(Request.model_validate(request))
    except ValueError:  # pydantic's ValidationError and steps.ConfigProblem both are
        return None


def training_end(record: RunRecord) -> str | None:
    """The step training ended at (``lineage.final_step``) against the config's, in words; None
    before training ended."""
    actual = record.lineage.final_step
    if actual is None:
        return None
    expected = _expected_final_step(record.request)
    if expected is None:
        return f"trained to step {actual}"
    if actual < expected:
        return f"trained to step {actual} of {expected}: the data ran out"
    if actual > expected:
        return f"trained to step {actual}, beyond the step the config expects ({expected})"
    return f"trained to step {actual}, the config's final step"


def data_and_rewards(record: RunRecord) -> dict[str, Any]:
    """What the run trained and evaluated on (each split at its pinned commit, with its files,
    bytes and examples), what scored the rollouts (MaxText's built-in rewards, or the request's
    functions with the file's sha256 and the run's copy), the request's dataset processor and chat
    template, and where training ended against the config's final step."""
    from rlpipe.core import staging

    request = recorded.request(record.request)
    data, copied = recorded.data(record.lineage.data), recorded.inputs(record.lineage.inputs)
    spec = request.dataset
    datasets: list[dict[str, Any]] = []
    repo = spec.repo if spec is not None else None
    for role, name, entry in (("train", "training", data.train), ("eval", "evaluation", data.eval)):
        if (
            role == "eval"
            and entry is None
            and spec is not None
            and repo
            and staging.splits_itself(repo, spec.eval_repo or repo)
        ):
            train = datasets[0] if datasets else None
            if train is not None:
                datasets.append({**train, "role": role, "name": name, "held_out": HELD_OUT})
            continue
        if entry is not None or spec is not None:
            datasets.append(_dataset_row(role, name, entry, spec or recorded.DatasetNamed()))
    named = request.rewards or recorded.RewardsNamed()
    rewards = _user_file(named.file, copied.rewards)
    functions = named.functions or []
    if rewards is not None and not functions:
        functions = (copied.rewards.functions if copied.rewards else None) or []
    return {
        "datasets": datasets,
        "rewards": {
            "builtin": rewards is None,
            "functions": functions if rewards is not None else list(BUILTIN_REWARDS),
            "source": BUILTIN_REWARDS_SOURCE,
            "file": rewards,
        },
        "processor": _user_file(spec.processor if spec else None, copied.processor),
        "chat_template": _user_file(request.chat_template, copied.chat_template),
        "template_path": (request.training.data_template_path if request.training else None) or None,
        "training_end": training_end(record),
    }
