"""``rlpipe``: the command line. Each subcommand parses its arguments, calls the library, prints."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import yaml

from rlpipe import identity
from rlpipe.problems import RequestInvalid


def _read_request(path: str) -> Any:
    from rlpipe.request import load_request

    data = sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
    return load_request(data, source=path)


def cmd_schema(args: argparse.Namespace) -> int:
    from rlpipe.request import json_schema

    print(json.dumps(json_schema(), indent=2, sort_keys=True))
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    try:
        req = _read_request(args.request)
    except RequestInvalid as exc:
        print(exc.render(), file=sys.stderr)
        return 1
    print(f"{args.request}: valid (preset {req.preset}, {req.tpu.type} {req.tpu.topology} × {req.tpu.slices})")
    return 0


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (the container scripts) as YAML block literals, so reviewers can read them."""


def _str_presenter(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str_presenter)


def dump_yaml(objects: list[dict[str, Any]]) -> str:
    return yaml.dump_all(objects, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=1000)


def cmd_render(args: argparse.Namespace) -> int:
    from rlpipe.manifests import RenderContext, render

    try:
        req = _read_request(args.request)
    except RequestInvalid as exc:
        print(exc.render(), file=sys.stderr)
        return 1
    run_id = args.run_id or identity.run_id_for(
        identity.key_for_request_id(req.request_id) if req.request_id else f"render:{args.request}"
    )
    ctx = RenderContext(run_id=run_id, bucket=args.bucket, namespace=args.namespace, hf_revision=args.hf_revision)
    stages = [args.stage] if args.stage else list(identity.STAGES)
    objects = [render(req, stage, args.attempt, ctx) for stage in stages]
    sys.stdout.write(dump_yaml(objects))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rlpipe", description="RL post-training pipeline on TPU")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("schema", help="print the request JSON Schema")
    p.set_defaults(func=cmd_schema)

    p = sub.add_parser("validate", help="check a request file; exit 1 listing every problem")
    p.add_argument("request", help="request file (JSON or YAML), or - for stdin")
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("render", help="print the Kubernetes objects of a request (dry run)")
    p.add_argument("request", help="request file (JSON or YAML), or - for stdin")
    p.add_argument("--stage", choices=identity.STAGES, help="only this stage (default: all three)")
    p.add_argument("--attempt", type=int, default=1, help="attempt number (default 1)")
    p.add_argument("--bucket", default="ARTIFACTS_BUCKET", help="artifacts bucket name")
    p.add_argument("--namespace", default="rlpipe", help="Kubernetes namespace (default rlpipe)")
    p.add_argument("--run-id", help="run id (default: derived from request_id or the file name)")
    p.add_argument("--hf-revision", help="resolved commit sha to pin (default: the request's hf_revision)")
    p.set_defaults(func=cmd_render)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if getattr(args, "attempt", 1) < 1:
        print("--attempt must be 1 or more", file=sys.stderr)
        return 2
    return int(args.func(args))


if __name__ == "__main__":
    raise SystemExit(main())
