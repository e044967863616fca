"""What a run's evaluations and live progress become in its record (``RunRecord.results`` and
``progress``), folded from the head's log lines a status read just took.

Pure and in the core because a status read's change to the record (``phase_record``) is applied
under the ledger's compare-and-swap and may run again on a newer record: folding the same lines
twice must give the same record, and nothing recorded is ever dropped.
"""

from __future__ import annotations

from typing import Any


def merge_results(
    recorded: dict[str, Any],
    seen: dict[str, Any] | None,
    final_step: int | None,
    *,
    resumed: bool = False,
    attempt: int | None = None,
) -> dict[str, Any]:
    """Recorded evaluations plus those in the log lines just read; nothing recorded is dropped.

    Every intermediate evaluation is kept with the ``attempt`` that printed it: a resumed attempt
    evaluates again at steps an earlier one reached, and both are facts of the run (the curve is
    drawn per attempt). ``pre`` is the base model's: train_rl prints a ``Pre RL Training`` line
    on every start, but an attempt that ``resumed`` from a checkpoint evaluates the partly trained
    model, which is not the baseline, so only an attempt from step 0 records it."""
    out = dict(recorded)
    seen = seen or {}
    if seen.get("pre") is not None and not resumed:
        out["pre"] = seen["pre"]
    if seen.get("post") is not None:
        out["post"] = seen["post"]
    out.setdefault("pre", None)
    out.setdefault("post", None)
    fresh = [{**e, "attempt": attempt} if attempt is not None else e for e in seen.get("intermediate") or []]
    keyed = {(e.get("attempt"), e["step"]): e for e in [*(recorded.get("intermediate") or []), *fresh]}
    out["intermediate"] = [keyed[k] for k in sorted(keyed, key=lambda k: (k[1], k[0] or 0))]
    if final_step is not None:
        out["final_step"] = final_step
    return out


def newer_progress(
    recorded: dict[str, Any], read: dict[str, Any] | None, attempt: int | None = None
) -> dict[str, Any] | None:
    """The run's progress after a read of new log lines: each value from the newest line that
    printed it. A read with no ``Train step`` line keeps the step already known, so progress
    never goes back to an older line's. ``attempt``: the training attempt whose log was read,
    kept with the progress; another attempt's values are not carried into it (a resumed attempt
    starts below the step its predecessor reached: 68, then 67, read as going back)."""
    if read is None:
        return None
    if attempt is not None and recorded.get("attempt") != attempt:
        recorded = {}
    out = {**recorded, **{k: v for k, v in read.items() if v is not None}}
    if attempt is not None:
        out["attempt"] = attempt
    return out


def with_baseline(progress: dict[str, Any] | None, results: dict[str, Any]) -> dict[str, Any] | None:
    """The live progress with ``pre`` taken from the run's baseline (``results``), not from a
    resumed attempt's own ``Pre RL Training`` line."""
    if not progress:
        return progress
    pre = results.get("pre") or {}
    out = {k: v for k, v in progress.items() if k not in ("pre_mean_reward", "pre_accuracy")}
    if pre:
        out["pre_mean_reward"], out["pre_accuracy"] = pre.get("mean_reward"), pre.get("accuracy")
    return out


def reward_summary(results: dict[str, Any]) -> tuple[float | None, float | None]:
    """(post mean_reward, post − pre), each None when a number is missing."""
    post = (results.get("post") or {}).get("mean_reward")
    pre = (results.get("pre") or {}).get("mean_reward")
    gain = post - pre if isinstance(post, int | float) and isinstance(pre, int | float) else None
    return (post if isinstance(post, int | float) else None), gain


def as_exported(results: dict[str, Any], exported: int | None, final: int | None) -> dict[str, Any]:
    """The results the exported model is judged by (the gate, a sweep's selection, the model card).

    When export loads another step than the last (``export.step``), ``post`` is that step's
    ``Intermediate Eval`` line (the newest attempt's: a resumed attempt evaluates a step again), and
    is absent when train_rl printed none at that step: never the last step's numbers for other
    weights. Otherwise the results as recorded."""
    if exported is None or final is None or exported == final:
        return results
    at_step = [
        e for e in results.get("intermediate") or [] if isinstance(e, dict) and e.get("step") == exported
    ]
    out = {k: v for k, v in results.items() if k != "post"}
    if at_step:
        newest: dict[str, Any] = max(at_step, key=lambda e: int(e.get("attempt") or 0))
        out["post"] = {k: v for k, v in newest.items() if k not in ("step", "attempt")}
    return out
