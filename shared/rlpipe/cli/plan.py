"""``rlpipe plan FILE [--json]``: what the pipeline will do for a request, with no cluster.

The stages and workload names, every GCS path, each stage's done rule (training's final step
included), the checkpoints expected, the conversion cache key, the pinned sha (or "resolved at
run time"), budgets and deadlines. ``--json`` prints the stable form documented in docs/plan.md.
With the deployment's params files (``--params``, else where docs/deploy.md writes them), a
request over its queue's TPU quota is warned about: Kueue would never admit it. A request with a
``sweep`` is planned child by child (``sweep_plan``): each child's overrides, final step,
chip-hours and cost, and the sweep's totals. With ``--team NAME`` (a team the deployment's
``RLPIPE_TEAMS`` declares), the run is planned as that team's: its namespace, its limits, the
chip-hours the run reserves at plan, and with ``--usage`` what its team has left this month and
what plan would decide now (docs/teams-limits.md).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlpipe.cli.argument_types import positive_seconds
from rlpipe.cli.exit_codes import ExitCode
from rlpipe.core import identity, presets
from rlpipe.core.problems import RequestInvalid

if TYPE_CHECKING:  # the plan's modules load when a plan is made, not when any command starts
    from rlpipe.core.plan import Quota


@dataclass(frozen=True)
class QuotaParam:
    """Where a deployment states a LocalQueue's TPU quota: a key of a kustomize params file,
    at the place docs/deploy.md §5 writes it. The number itself lives only there (terraform's
    kueue_tpu_chips writes TPU_CHIPS); plan reads it rather than keep a copy."""

    path: Path
    key: str
    queue: str
    fix: str


# The LocalQueue each ClusterQueue's quota key caps (infra/cluster/k8s/kueue.yaml: user-queue →
# rlpipe, both TPU flavors at TPU_CHIPS; flex-start/kueue-flex-start.yaml: flex-queue →
# rlpipe-flex at FLEX_TPU_CHIPS). tests/cli/test_plan_quota.py holds this table to those manifests.
DEPLOYMENT_QUOTAS = (
    QuotaParam(
        Path("infra/cluster/k8s/params.env"),
        "TPU_CHIPS",
        str(presets.preset_defaults(presets.DEFAULT_PRESET)["tpu"]["queue"]),
        "Raise terraform's kueue_tpu_chips to the chips of the cluster's slices, regenerate "
        "params.env and kubectl apply -k infra/cluster/k8s",
    ),
    QuotaParam(
        Path("infra/cluster/k8s/flex-start/params.env"),
        "FLEX_TPU_CHIPS",
        presets.FLEX_START_QUEUE,
        "Raise FLEX_TPU_CHIPS (and the flex-start pool's FLEX_POOL_MAX_NODES) and kubectl apply -k "
        "infra/cluster/k8s/flex-start",
    ),
)


class ParamsInvalid(ValueError):
    """A params file plan cannot read a quota from; the message names the file, key and fix."""


def read_quotas(paths: list[Path] | None) -> dict[str, Quota]:
    """The deployment's TPU quota by LocalQueue, from its params files: those given (``--params``),
    else those at their docs/deploy.md places that exist. None found: nothing is known, and plan
    checks nothing rather than guess a quota."""
    from rlpipe.core.plan import Quota

    explicit = paths is not None
    files = paths if paths is not None else [q.path for q in DEPLOYMENT_QUOTAS if q.path.is_file()]
    quotas: dict[str, Quota] = {}
    for path in files:
        values = _params(path)
        found = [q for q in DEPLOYMENT_QUOTAS if q.key in values]
        if explicit and not found:
            keys = " or ".join(q.key for q in DEPLOYMENT_QUOTAS)
            raise ParamsInvalid(
                f"--params {path}: no {keys} in it; give the params.env the cluster was set up from"
            )
        for q in found:
            raw = values[q.key]
            if not raw.isdigit():
                raise ParamsInvalid(
                    f"{path}: {q.key}={raw!r} is not a whole number of chips; write the TPU chips of the "
                    'cluster\'s slices (docs/deploy.md, "The TPU quota each request needs")'
                )
            quotas[q.queue] = Quota(q.queue, int(raw), f"{q.key} in {path}", q.fix)
    return quotas


def _params(path: Path) -> dict[str, str]:
    """``KEY=VALUE`` lines as kustomize's ``envs`` reads them: blank lines and ``#`` lines skipped."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise ParamsInvalid(f"{path}: cannot read it ({exc.strerror})") from None
    values = {}
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#") and "=" in line:
            key, value = line.split("=", 1)
            values[key.strip()] = value.strip()
    return values


def cmd_plan(args: argparse.Namespace, settings: Callable[[], Any] | None = None) -> int:
    from rlpipe.cli.request_files import hub_pins_or_exit, policy, read_request
    from rlpipe.control.adapters.settings import Settings
    from rlpipe.core import cost
    from rlpipe.core import sweep as core_sweep
    from rlpipe.core.plan import build_plan, render_text

    try:  # the deployment's settings first: a bad one is named with its fix, not a traceback
        deployment = Settings.from_env()
        prices = cost.parse_override(deployment.prices_json)
        quotas = read_quotas([Path(p) for p in args.params] if args.params else None)
        team = _team(deployment, args.team) if args.team else None
    except (cost.PricesInvalid, ParamsInvalid, TeamUnknown) as exc:
        print(f"rlpipe plan: {exc}", file=sys.stderr)
        return ExitCode.USAGE
    except RequestInvalid as exc:  # RLPIPE_TEAMS that cannot be read
        print(exc.render(), file=sys.stderr)
        return ExitCode.USAGE
    if args.usage and team is None:
        print("rlpipe plan: --usage goes with --team (whose usage to read)", file=sys.stderr)
        return ExitCode.USAGE
    if args.namespace is None:  # a team's run lives in its team's namespace
        args.namespace = team.k8s_namespace if team is not None else "rlpipe"
    try:  # a sweep's every child is checked as a request of its own (load_request does it too)
        req = read_request(args.request)
        children = core_sweep.children(req, policy()) if req.sweep is not None else []
    except RequestInvalid as exc:
        print(exc.render(), file=sys.stderr)
        return ExitCode.INVALID_INPUT
    pinned: list[str] = []
    data = None
    if args.hub:
        sha, data, pinned = hub_pins_or_exit(req, "rlpipe plan")
        args.hf_revision = args.hf_revision or sha
    key = identity.key_for_request_id(req.request_id) if req.request_id else None
    run_id = args.run_id or identity.run_id_for(key or f"render:{args.request}")
    if key is not None and identity.run_id_for(key) != run_id:
        key = None  # --run-id names another delivery: its key (so its children's ids) is not known here

    def plan_of(request: Any, plan_run_id: str) -> dict[str, Any]:
        return build_plan(
            request,
            run_id=plan_run_id,
            bucket=args.bucket,
            state_bucket=args.state_bucket,
            hf_sha=args.hf_revision,
            namespace=args.namespace,
            step_seconds=args.step_seconds,
            prices=prices,
            quotas=quotas,
            data=data,
            cache_scope=deployment.teams().cache_scope(team.name) if team is not None else "",
        )

    plan = plan_of(req, run_id)
    if req.sweep is not None:
        plan["sweep"] = sweep_plan(
            req,
            children,
            plan_of,
            key=key,
            parent_run_id=run_id,
            step_seconds=args.step_seconds,
            prices=prices,
            poll_seconds=deployment.callback_timeout_seconds,  # how often the workflow reads a child
        )
    if pinned:
        plan["hub_check"] = pinned
    if team is not None:
        usage = _read_usage(settings, team.name) if args.usage else None
        if isinstance(usage, str):  # why it could not be read
            print(f"rlpipe plan: {usage}", file=sys.stderr)
            return ExitCode.TRANSIENT
        requests = [c.request for c in children] if children else [req]
        plan["team"] = team_plan(team, requests, run_id, usage)
    if args.json:
        print(json.dumps(plan, indent=2, sort_keys=True))
    else:
        sys.stdout.write(render_text(plan))
        if "sweep" in plan:
            sys.stdout.write(render_sweep(plan["sweep"], plan["conversion"]))
        if "team" in plan:
            sys.stdout.write(render_team(plan["team"]))
        for line in pinned:
            print(f"pinned now: {line}")
    return ExitCode.OK


class TeamUnknown(ValueError):
    """``--team`` names no team of the deployment's declaration."""


def _team(deployment: Any, name: str) -> Any:
    from rlpipe.core.teams import DEFAULT_TEAM, Team

    teams = deployment.teams()
    if not teams.declared and name == DEFAULT_TEAM:
        return Team(name=DEFAULT_TEAM, namespace=deployment.namespace)  # no limits: the one team
    team = teams.named(name)
    if team is None:
        declared = ", ".join(teams.names()) or f"none: RLPIPE_TEAMS is empty, the one team is {DEFAULT_TEAM}"
        raise TeamUnknown(f"--team {name}: this deployment declares no such team (teams: {declared})")
    return team


def _read_usage(settings: Callable[[], Any] | None, team: str) -> Any:
    """The team's usage document from the deployment's state bucket; None before its first plan;
    a sentence when it cannot be read."""
    from rlpipe.control.adapters.blobstore import BlobStore, make_client
    from rlpipe.control.lifecycle.ledger import Ledger
    from rlpipe.control.lifecycle.team_usage import TeamUsageStore

    chosen = settings() if settings is not None else None
    if chosen is None or not chosen.state_bucket:
        return (
            "--usage needs the deployment's state bucket (RLPIPE_STATE_BUCKET, or a local stack that is up)"
        )
    try:
        store = BlobStore(make_client(chosen.project), chosen.state_bucket)
        return TeamUsageStore(store, Ledger(store), poll_seconds=chosen.callback_timeout_seconds).read(team)
    except Exception as exc:  # credentials, network: say which, never a traceback
        return f"the usage of team {team} could not be read from gs://{chosen.state_bucket}: {exc}"


def team_plan(team: Any, requests: list[Any], run_id: str, usage: Any) -> dict[str, Any]:
    """The plan's ``team`` object (docs/plan.md): the team, its limits, what the run (or each of a
    sweep's children) reserves at plan, and with ``usage`` the month so far and what plan would
    decide now for this run (the first child, for a sweep)."""
    from datetime import UTC, datetime

    from rlpipe.core import team_limits

    reserved = [team_limits.reservation(r.model_dump(mode="json")) for r in requests]
    limits = team.limits
    budget = limits.monthly_chip_hours
    notes = []
    biggest = max(r.chip_hours for r in reserved)
    if budget is not None and biggest > budget:
        notes.append(
            f"a run here reserves {biggest:g} chip-hours, more than the team's whole monthly budget "
            f"({budget:g}): plan refuses it every month; ask for fewer chips or shorter deadlines"
        )
    entry: dict[str, Any] = {
        "name": team.name,
        "namespace": team.k8s_namespace,
        "limits": limits.model_dump(),
        "reserves_chip_hours": reserved[0].chip_hours,
        "reservation": reserved[0].explained,
        "children_reserve_chip_hours": round(sum(r.chip_hours for r in reserved), 3)
        if len(requests) > 1
        else None,
        "usage": None,
        "at_plan": None,
        "notes": notes,
    }
    if usage is not None:
        now = datetime.now(UTC)
        preview = usage.model_copy(deep=True)
        team_limits.roll_month(preview, now)
        held = team_limits.budget_of(preview, budget or 0.0, team_limits.Observed(), 0.0)
        entry["usage"] = {
            "month": preview.month,
            "used": round(held.used, 3),
            "running": len(preview.holders),
            "running_sweep_children": sum(h.sweep_child for h in preview.holders),
            "running_reserved": round(held.running_reserved, 3),
            "waiting": len(preview.waiting),
            "left": round(held.left, 3) if budget is not None else None,
        }
        ask = team_limits.Ask(run_id, len(requests) > 1, reserved[0])
        decided = team_limits.preview(usage, ask, limits, now=now)
        entry["at_plan"] = {"outcome": decided.outcome, "reason": decided.reason}
    return entry


def render_team(team: dict[str, Any]) -> str:
    """The team's part of the plan for a person."""
    limits = team["limits"]
    shown = [
        f"{limits['active_runs']} active runs" if limits["active_runs"] else None,
        f"{limits['sweep_children']} sweep children" if limits["sweep_children"] else None,
        f"{limits['monthly_chip_hours']:g} chip-hours a month (UTC)"
        if limits["monthly_chip_hours"]
        else None,
    ]
    lines = [
        f"team: {team['name']} (namespace {team['namespace']})",
        f"  limits: {', '.join(s for s in shown if s) or 'none'}",
        f"  reserves at plan: up to {team['reserves_chip_hours']:g} chip-hours ({team['reservation']})",
    ]
    if team["children_reserve_chip_hours"] is not None:
        lines.append(
            f"  the sweep's children reserve {team['children_reserve_chip_hours']:g} chip-hours together"
        )
    usage = team["usage"]
    if usage is not None:
        left = f"; {usage['left']:g} left" if usage["left"] is not None else ""
        lines.append(
            f"  {usage['month']}: {usage['used']:g} chip-hours used by ended runs, {usage['running']} running "
            f"reserving {usage['running_reserved']:g}, {usage['waiting']} queued{left}"
        )
        at_plan = team["at_plan"]
        lines.append(
            f"  at plan now: {at_plan['outcome']}" + (f": {at_plan['reason']}" if at_plan["reason"] else "")
        )
    lines += [f"  note: {n}" for n in team["notes"]]
    return "\n".join(lines) + "\n"


def sweep_plan(
    req: Any,
    children: list[Any],
    plan_of: Callable[[Any, str], dict[str, Any]],
    *,
    key: str | None,
    parent_run_id: str,
    step_seconds: float | None,
    prices: dict[str, Any] | None,
    poll_seconds: float | None = None,
) -> dict[str, Any]:
    """Each child of the sweep planned as the run it becomes (``plan_of(child request, run id)``,
    the single plan): its point, final step, and its chip-hours and cost at the request's
    provisioning mode; and the totals. A child's run id is derived from the parent's ``key`` (as
    intake derives it, ``core.sweep.child_key``); without the key it is left out. The totals come
    from the unrounded chip-hours, as a single plan's cost does; null when any child's is unknown."""
    from rlpipe.core import cost
    from rlpipe.core import sweep as core_sweep

    spec = req.sweep
    rows: list[dict[str, Any]] = []
    total_hours: float | None = 0.0
    total_cost: float | None = 0.0
    for child in children:
        child_id = identity.run_id_for(core_sweep.child_key(key or f"plan:{parent_run_id}", child.index))
        planned = plan_of(child.request, child_id)
        final = int(planned["training"]["final_step"])
        capacity = planned["capacity"]
        mode = child.request.tpu.provisioning
        row: dict[str, Any] = {
            "index": child.index,
            "point": dict(child.point),
            "overrides": core_sweep.describe(child.point),
            "final_step": final,
            "chip_hours": capacity["expected_chip_hours"],
            "cost": capacity["per_mode"][mode]["expected_cost"],
        }
        if key is not None:
            row["run_id"] = child_id
        rows.append(row)
        held = final * step_seconds / 3600 * capacity["chips"] if step_seconds else None
        per_chip = cost.price(child.request.tpu.type, mode, prices).per_chip_hour
        total_hours = total_hours + held if total_hours is not None and held is not None else None
        total_cost = (
            total_cost + held * per_chip
            if total_cost is not None and held is not None and per_chip is not None
            else None
        )
    from rlpipe.core.stop_plan import plan_entry

    parallel = core_sweep.parallelism(spec, len(children))
    return {
        "size": len(children),
        "max_parallel": parallel,
        "select": spec.select.model_dump(mode="json") if spec.select is not None else None,
        "provisioning": req.tpu.provisioning,
        "children": rows,
        "total": {
            "chip_hours": round(total_hours, 2) if total_hours is not None else None,
            "cost": round(total_cost, 2) if total_cost is not None else None,
        },
        "early_stop": plan_entry(
            spec.stopping,
            [(c.index, c.request) for c in children],
            parallel,
            total_hours,
            poll_seconds=poll_seconds,
            step_seconds=step_seconds,
        ),
    }


def render_sweep(sweep: dict[str, Any], conversion: dict[str, Any]) -> str:
    """The sweep's part of the plan for a person: what the children share, then one row each."""
    rule = sweep["select"]
    select = (
        f"once every child has ended, the one with the {'highest' if rule['direction'] == 'max' else 'lowest'} "
        f"{rule['metric']} is selected; only it publishes"
        if rule
        else "no select rule: the children are not compared"
    )
    key = conversion["cache_key"] or conversion["cache_key_note"]
    lines = [
        f"sweep: {sweep['size']} children, at most {sweep['max_parallel']} holding a TPU slice at once; {select}",
        "  the plan above is the request without its sweep; each child is it with the child's overrides",
        f"  shared: one conversion (cache key: {key}), one pinned model commit, one data snapshot",
    ]
    rows = sweep["children"]
    ids = any("run_id" in r for r in rows)
    wide = max(len("overrides"), *(len(r["overrides"]) for r in rows)) + 2
    head = f"  {'child':<7}" + (f"{'run':<14}" if ids else "") + f"{'overrides':<{wide}}"
    lines.append(f"{head}{'final step':>11}{'chip-hours':>12}  cost ({sweep['provisioning']})")
    for r in rows:
        left = (
            f"  {r['index']:<7}"
            + (f"{r.get('run_id', '-'):<14}" if ids else "")
            + f"{r['overrides']:<{wide}}"
        )
        lines.append(f"{left}{r['final_step']:>11}{_hours(r['chip_hours']):>12}  {_money(r['cost'])}")
    total = sweep["total"]
    pad = " " * (len(head) - 2 + 11)
    lines.append(f"  total{pad[5:]}{_hours(total['chip_hours']):>12}  {_money(total['cost'])}")
    if total["chip_hours"] is None:
        lines.append("  chip-hours and cost: pass --step-seconds to estimate them")
    elif total["cost"] is None:
        lines.append(f"  cost: no {sweep['provisioning']} price is known; set one with RLPIPE_PRICES")
    if not ids:
        lines.append(
            "  run ids: derived from the request_id (and no other --run-id); else from the delivery, at intake"
        )
    if sweep.get("early_stop"):
        lines += render_early_stop(sweep["early_stop"], rule)
    return "\n".join(lines) + "\n"


def render_early_stop(stop: dict[str, Any], select: dict[str, Any] | None) -> list[str]:
    """The sweep's stopping rule for a person: where it judges, and the best and worst it allows
    against none (``core.stop_plan``), with the assumption the best rests on."""
    name = f"asha (eta {stop['eta']})" if stop["rule"] == "asha" else "median"
    metric = f", reading {select['metric']}" if select else ""
    where = (
        f"judged at steps {', '.join(map(str, stop['judged_at']))} of {stop['final_step']}"
        if stop["judged_at"] is not None
        else "judged at each child's own steps (they differ)"
    )
    kind = "rungs" if stop["rule"] == "asha" else "evaluations"
    steps, share = stop["steps"], stop["fraction_of_none"]
    bound = "" if stop["exact"] else "at least "
    lines = [
        f"  early stop: {name}{metric}; {kind} {where}",
        f"  training steps: none {steps['none']}; with {stop['rule']} at best {bound}{steps['best']} "
        f"({share['best']:.1%} of none), at worst {steps['worst']} (no child stopped: the same as none)",
    ]
    hours = stop["chip_hours"]
    if hours is not None:
        lines.append(
            f"  chip-hours: none {hours['none']:g}; at best {bound}{hours['best']:g}, at worst {hours['worst']:g}"
        )
    else:
        lines.append(
            "  chip-hours of the rule: pass --step-seconds to estimate them (the steps above are exact)"
        )
    lines.append(f"  best case: {stop['best_case']}")
    delay = stop.get("stop_delay")
    if delay:
        poll = f"the workflow reads a child's status every {delay['poll_seconds']:g} s at most"
        if delay["best_steps"] is not None:
            lines.append(
                f"  stop delay: a stopped child trains on until its stop lands ({poll}): up to "
                f"{delay['steps_per_stopped_child']} more steps each at the given step time; at best "
                f"{bound}{delay['best_steps']} steps with it ({delay['best_fraction']:.1%} of none)"
            )
        else:
            lines.append(
                f"  stop delay: a stopped child trains on until its stop lands ({poll}); "
                "pass --step-seconds to count those steps"
            )
    lines.append(f"  assumes: {stop['assumption']}")
    return lines


def _hours(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def _money(value: float | None) -> str:
    return "-" if value is None else f"${value:,.2f}"


def register(sub: Any, *, settings: Callable[[], Any] | None = None) -> None:
    p = sub.add_parser("plan", help="what the pipeline will do for a request (dry run, no cluster)")
    p.add_argument("request", help="request file (JSON or YAML), or - for stdin")
    p.add_argument("--json", action="store_true", help="the stable JSON form (docs/plan.md)")
    p.add_argument("--bucket", default="ARTIFACTS_BUCKET", help="artifacts bucket name")
    p.add_argument(
        "--state-bucket", default="STATE_BUCKET", help="state bucket name (ledger, events, READY.json)"
    )
    p.add_argument("--namespace", help="Kubernetes namespace (default: the team's with --team, else rlpipe)")
    p.add_argument("--run-id", help="run id (default: derived from request_id or the file name)")
    p.add_argument("--hf-revision", help="resolved commit sha (default: the request's, if it is a sha)")
    p.add_argument(
        "--hub",
        action="store_true",
        help="pin the model and datasets on the Hub now, as the pipeline's plan will (revisions, "
        "subsets, splits, access with this machine's token); exit 1 naming the field if one is wrong",
    )
    p.add_argument(
        "--step-seconds",
        type=positive_seconds,
        help="seconds per training step, to estimate chip-hours and cost (e.g. from an earlier run)",
    )
    p.add_argument(
        "--params",
        action="append",
        metavar="FILE",
        help="a deployment's params.env, to check the request against its TPU quota (repeatable; "
        "default: infra/cluster/k8s/params.env and flex-start/params.env, where they exist)",
    )
    p.add_argument(
        "--team",
        metavar="NAME",
        help="plan as a run of this team (RLPIPE_TEAMS): its namespace, its limits, the chip-hours the run "
        "reserves at plan",
    )
    p.add_argument(
        "--usage",
        action="store_true",
        help="with --team: read the team's usage this month from the deployment's state bucket, and say "
        "what plan would decide now (goes on, queued, or refused with how much is left)",
    )
    p.set_defaults(func=lambda args: cmd_plan(args, settings))
