"""``rlpipe plan FILE [--json]``: what the pipeline will do for a request, with no cluster.

The stages and workload names, every GCS path, each stage's done rule (training's final step
included), the checkpoints expected, the conversion cache key, the pinned sha (or "resolved at
run time"), budgets and deadlines. ``--json`` prints the stable form documented in docs/plan.md.
With the deployment's params files (``--params``, else where docs/deploy.md writes them), a
request over its queue's TPU quota is warned about: Kueue would never admit it.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

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
# rlpipe-flex at FLEX_TPU_CHIPS). tests/test_plan_quota.py holds this table to those manifests.
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


def cmd_plan(args: argparse.Namespace) -> int:
    from rlpipe.cli.request_files import hub_pins_or_exit, read_request
    from rlpipe.control.settings import Settings
    from rlpipe.core import cost
    from rlpipe.core.plan import build_plan, render_text

    try:  # the deployment's settings first: a bad one is named with its fix, not a traceback
        prices = cost.parse_override(Settings.from_env().prices_json)
        quotas = read_quotas([Path(p) for p in args.params] if args.params else None)
    except (cost.PricesInvalid, ParamsInvalid) as exc:
        print(f"rlpipe plan: {exc}", file=sys.stderr)
        return 2
    try:
        req = read_request(args.request)
    except RequestInvalid as exc:
        print(exc.render(), file=sys.stderr)
        return 1
    pinned: list[str] = []
    data = None
    if args.hub:
        sha, data, pinned = hub_pins_or_exit(req, "rlpipe plan")
        args.hf_revision = args.hf_revision or sha
    run_id = args.run_id or identity.run_id_for(
        identity.key_for_request_id(req.request_id) if req.request_id else f"render:{args.request}"
    )
    plan = build_plan(
        req,
        run_id=run_id,
        bucket=args.bucket,
        state_bucket=args.state_bucket,
        hf_sha=args.hf_revision,
        namespace=args.namespace,
        step_seconds=args.step_seconds,
        prices=prices,
        quotas=quotas,
        data=data,
    )
    if pinned:
        plan["hub_check"] = pinned
    if args.json:
        print(json.dumps(plan, indent=2, sort_keys=True))
    else:
        sys.stdout.write(render_text(plan))
        for line in pinned:
            print(f"pinned now: {line}")
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser("plan", help="what the pipeline will do for a request (dry run, no cluster)")
    p.add_argument("request", help="request file (JSON or YAML), or - for stdin")
    p.add_argument("--json", action="store_true", help="the stable JSON form (docs/plan.md)")
    p.add_argument("--bucket", default="ARTIFACTS_BUCKET", help="artifacts bucket name")
    p.add_argument(
        "--state-bucket", default="STATE_BUCKET", help="state bucket name (ledger, events, READY.json)"
    )
    p.add_argument("--namespace", default="rlpipe", help="Kubernetes namespace (default rlpipe)")
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
        type=float,
        help="seconds per training step, to estimate chip-hours and cost (e.g. from an earlier run)",
    )
    p.add_argument(
        "--params",
        action="append",
        metavar="FILE",
        help="a deployment's params.env, to check the request against its TPU quota (repeatable; "
        "default: infra/cluster/k8s/params.env and flex-start/params.env, where they exist)",
    )
    p.set_defaults(func=cmd_plan)
