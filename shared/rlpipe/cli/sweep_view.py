"""A sweep as the CLI shows it (docs/sweeps.md, "Operating a sweep").

Why a module of its own: a sweep's parent is an ordinary ledger record whose state follows from
its children's, so what a person needs of it (each child's point, state, reward, and which one
was selected and why) is read from the children's records, not from the parent's. ``status``
(``runs.describe``) and ``report`` (``report_command``) of a parent read the children through
here (``cancel`` decides which children's executions to cancel in ``control.operator_ops``);
``status`` of a child shows its parent and point.
"""

from __future__ import annotations

from typing import Any

from rlpipe.control.lifecycle.ledger import Ledger
from rlpipe.core import sweep as core_sweep
from rlpipe.core.runs.record import RunRecord


def children_of(ledger: Ledger, record: RunRecord) -> list[RunRecord | None] | None:
    """A parent's children in point order (None for one not claimed yet); None: not a parent."""
    if record.sweep is None:
        return None
    return [ledger.get(run_id) for run_id in record.sweep.children]


def waiting(child: RunRecord) -> str | None:
    """Why the child waits, while it does (``RunRecord.admission``: its sweep's slot or conversion,
    its team's place, its siblings at selection); None once it ended."""
    if child.lineage.sweep is None or child.terminal or child.admission is None:
        return None
    return child.admission.reason


def post_mean_reward(record: RunRecord) -> float | None:
    post = (record.results or {}).get("post")
    value = post.get("mean_reward") if isinstance(post, dict) else None
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def sweep_info(record: RunRecord, children: list[RunRecord | None] | None = None) -> dict[str, Any] | None:
    """The ``sweep`` of ``status --json`` (docs/cli.md): for a parent, its rule, its selection and
    a row per child (``children``: their records, else only what the parent knows of them); for a
    child, its parent and point; None for a run that is neither."""
    if record.sweep is not None:
        return _parent(record, children)
    member = record.lineage.sweep
    if member is None:
        return None
    # A child the sweep's rule stopped never reaches the selection, so its own record is never told
    # (it read "selection not made yet" after the selection): it is no candidate, by design.
    stopped = _stopped_child(record)
    return {
        "role": "child",
        "parent": member.parent,
        "index": member.index,
        "size": member.size,
        "point": dict(member.point),
        "overrides": core_sweep.describe(member.point),
        "waiting": waiting(record),
        "selected": False if stopped is not None and member.selected is None else member.selected,
        "stopped": stopped,
    }


def _stopped_child(record: RunRecord) -> dict[str, Any] | None:
    """Where a child the sweep's rule stopped had trained to (its last evaluation) and why."""
    if record.state != "stopped":
        return None
    from rlpipe.core.runs import recorded

    steps = [e.step for e in recorded.results(record.results).intermediate or [] if e.step is not None]
    return {
        "trained_to": max(steps) if steps else None,
        "reason": record.failure.message if record.failure is not None else None,
    }


def _parent(record: RunRecord, children: list[RunRecord | None] | None) -> dict[str, Any]:
    s = record.sweep
    assert s is not None
    rule = (record.request.get("sweep") or {}).get("select")
    chosen = s.selection.run_id if s.selection is not None else None
    read = children if children is not None else [None] * len(s.children)
    stops = {stop.run_id: stop for stop in s.stopped}
    rows = []
    for index, (run_id, child) in enumerate(zip(s.children, read, strict=True)):
        point = s.points[index] if index < len(s.points) else {}
        rows.append(
            {
                "index": index,
                "run_id": run_id,
                "point": dict(point),
                "overrides": core_sweep.describe(point),
                "state": child.state if child is not None else None,
                "waiting": waiting(child) if child is not None else None,
                "post_mean_reward": post_mean_reward(child) if child is not None else None,
                "selected": None if s.selection is None else run_id == chosen,
                # stopped early by the sweep's rule (core.early_stop): where, by which rule, why
                "stopped": (
                    {"step": stop.step, "rule": stop.rule, "reason": stop.reason}
                    if (stop := stops.get(run_id)) is not None
                    else None
                ),
            }
        )
    return {
        "role": "parent",
        "size": len(s.children),
        "max_parallel": s.max_parallel,
        "select": {"metric": rule["metric"], "direction": rule.get("direction", "max")} if rule else None,
        "selection": s.selection.model_dump(mode="json") if s.selection is not None else None,
        "early_stop": _early_stop(record),
        "cancelled": s.cancelled,
        "children_read": children is not None,
        "children": rows,
    }


def _early_stop(record: RunRecord) -> dict[str, Any] | None:
    """The request's ``sweep.early_stop`` as written, with its defaults; None for ``none``."""
    from rlpipe.core.request.sweep import EarlyStop

    raw = (record.request.get("sweep") or {}).get("early_stop")
    try:
        stop = EarlyStop.model_validate(raw) if raw is not None else None
    except ValueError:  # a ledger older than the field's rules: show it as recorded
        return {"rule": str(raw)}
    return None if stop is None or stop.rule == "none" else stop.model_dump(mode="json")


QUEUED = "queued: "


def state_text(row: dict[str, Any]) -> str:
    """A child's state as the table shows it: ``queued: <why>`` while it waits for a slot."""
    if row.get("stopped"):
        stop = row["stopped"]
        return f"stopped at step {stop['step']} ({stop['rule']})"
    if row["waiting"]:
        return QUEUED + _why(row["waiting"]) if row["waiting"].startswith(QUEUED) else row["waiting"]
    return row["state"] or "not claimed yet"


def _why(waiting: str) -> str:
    """The reason alone (coordination writes it as ``queued: <why>``)."""
    return waiting[len(QUEUED) :] if waiting.startswith(QUEUED) else waiting


def parent_summary(record: RunRecord, info: dict[str, Any]) -> str:
    """``rlpipe status PARENT``: the rule, a row per child, and the selection with its reason."""
    rule = info["select"]
    lines = [
        f"sweep {record.run_id}: {record.state}; {info['size']} children, at most "
        f"{info['max_parallel']} holding a TPU slice at once",
        "  select      "
        + (
            f"the {'highest' if rule['direction'] == 'max' else 'lowest'} {rule['metric']} once every "
            "child has ended; only that child publishes"
            if rule
            else "no select rule: the children are not compared"
        ),
    ]
    stop = info.get("early_stop")
    if stop:
        stopped = sum(1 for r in info["children"] if r.get("stopped"))
        ended = record.terminal or info["selection"] is not None
        lines.append(
            f"  early stop  {stop['rule']}"
            + (f" (eta {stop['eta']})" if stop["rule"] == "asha" else "")
            + f", reading {rule['metric'] if rule else 'the select metric'}; {stopped} stopped"
            + ("" if ended else " so far")
        )
    rows = info["children"]
    states = [state_text(r) for r in rows]
    points = [r["overrides"] for r in rows]
    wide_point = max(len("overrides"), *map(len, points)) + 2
    wide_state = max(len("state"), *map(len, states)) + 2
    lines.append(
        f"    {'child':<7}{'run':<14}{'overrides':<{wide_point}}{'state':<{wide_state}}{'post reward':>11}  selected"
    )
    for row, state, point in zip(rows, states, points, strict=True):
        reward = "-" if row["post_mean_reward"] is None else f"{row['post_mean_reward']:.4f}"
        chosen = {True: "yes", False: "no", None: "-"}[row["selected"]]
        mark = "* " if row["selected"] else "  "
        lines.append(
            f"  {mark}{row['index']:<7}{row['run_id']:<14}{point:<{wide_point}}{state:<{wide_state}}"
            f"{reward:>11}  {chosen}"
        )
    for row in rows:  # each stopped child's reason, once: the table has room for its state only
        if row.get("stopped"):
            stop_row = row["stopped"]
            lines.append(f"  stopped     child {row['index']} ({row['run_id']}): {stop_row['reason']}")
    selection = info["selection"]
    if selection is not None and selection["run_id"]:
        lines.append(
            f"  selected    {selection['run_id']} (child {selection['index']}): {selection['reason']}"
        )
    elif selection is not None:
        lines.append(f"  selected    none: {selection['reason']}")
    elif rule:
        lines.append("  selected    not yet: the rule is applied once every child has ended")
    if info["cancelled"]:
        lines.append("  cancelled   with rlpipe cancel")
    if record.failure is not None:
        lines.append(f"  failure     [{record.failure.tag}] {record.failure.message}")
    return "\n".join(lines)


def member_lines(info: dict[str, Any] | None) -> list[str]:
    """``rlpipe status CHILD``: which sweep it belongs to, its point, and whether it is queued or
    was selected; [] for a run that is no sweep's child."""
    if info is None or info["role"] != "child":
        return []
    chosen = {True: "selected: it publishes", False: "not selected", None: "selection not made yet"}
    stopped = info.get("stopped")
    lines = [
        f"  sweep       child {info['index']} of {info['size']} of {info['parent']} "
        f"({info['overrides']}); "
        + ("stopped by design: not a candidate for selection" if stopped else chosen[info["selected"]])
    ]
    if stopped:
        where = (
            f"at step {stopped['trained_to']}"
            if stopped["trained_to"] is not None
            else "before any evaluation"
        )
        lines.append(
            f"  stopped     {where} by the sweep's rule: {stopped['reason'] or 'no reason recorded'}"
        )
    if info["waiting"]:
        lines.append(f"  queued      {_why(info['waiting'])}")
    return lines


def final_summary(ledger: Ledger, record: RunRecord, single: Any) -> str:
    """What ``watch`` prints when it stops: a sweep's children and its selection for a parent
    (it runs nothing itself), else ``single`` (the run's own summary) and, for a child, its place."""
    info = sweep_info(record, children_of(ledger, record))
    if record.sweep is not None and info is not None:
        return parent_summary(record, info)
    return "\n".join([single(), *member_lines(info)])
