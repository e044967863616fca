"""``rlpipe plan FILE [--json]``: what the pipeline will do for a request, with no cluster.

The stages and workload names, every GCS path, each stage's done rule (training's final step
included), the checkpoints expected, the conversion cache key, the pinned sha (or "resolved at
run time"), budgets and deadlines. ``--json`` prints the stable form documented in docs/plan.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from rlpipe.core import identity
from rlpipe.core.problems import RequestInvalid


def cmd_plan(args: argparse.Namespace) -> int:
    from rlpipe.control.settings import Settings
    from rlpipe.core import cost
    from rlpipe.core.plan import build_plan, render_text
    from rlpipe.core.request import load_request

    try:  # the deployment's setting first: a bad one is named with its fix, not a traceback
        prices = cost.parse_override(Settings.from_env().prices_json)
    except cost.PricesInvalid as exc:
        print(f"rlpipe plan: {exc}", file=sys.stderr)
        return 2
    data = sys.stdin.buffer.read() if args.request == "-" else Path(args.request).read_bytes()
    try:
        req = load_request(data, source=args.request)
    except RequestInvalid as exc:
        print(exc.render(), file=sys.stderr)
        return 1
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
    )
    if args.json:
        print(json.dumps(plan, indent=2, sort_keys=True))
    else:
        sys.stdout.write(render_text(plan))
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
        "--step-seconds",
        type=float,
        help="seconds per training step, to estimate chip-hours and cost (e.g. from an earlier run)",
    )
    p.set_defaults(func=cmd_plan)
