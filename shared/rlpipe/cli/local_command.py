"""``rlpipe local up|down|status`` and ``rlpipe demo``: the local stack, for you to use or for one
demo run (docs/real-cluster.md, README "What `make demo` does")."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlpipe.cli.exit_codes import ExitCode

CLUSTER_ARGUMENT: dict[str, Any] = {
    "choices": ["double", "real"],
    "default": "double",
    "help": "double: the Kubernetes API double + cluster simulator (default); real: the real control "
    "plane built by `make components` (kube-apiserver, controllers, scheduler, JobSet, Kueue) with "
    "played nodes and programs",
}

PROGRAMS_ARGUMENT: dict[str, Any] = {
    "choices": ["played", "real"],
    "default": "played",
    "help": "played: the simulator plays MaxText's programs (default); real: convert and export run "
    "MaxText 0.2.4's real converters from the programs venv (`make programs`; Python >= 3.12) on the "
    "tiny Gemma 4 fixture, minutes each, train played (double cluster only)",
}


def cmd_local(args: argparse.Namespace, local_root: Callable[[], Path]) -> int:
    from rlpipe.local import stack, stack_state

    root = Path(args.root) if args.root else local_root()
    if args.action == "down":
        stopped = stack.down(root)
        print(f"stopped: {', '.join(stopped)}" if stopped else "nothing running")
        return 0
    if args.action == "status":
        path = stack_state.state_path(root.resolve())
        if not path.exists():
            print("local stack is not running")
            return 1
        state = stack_state.StackState.load(path)
        alive = stack.health(state)
        width = max(map(len, alive), default=0) + 2
        for name, ok in alive.items():
            print(f"{name:<{width}}{'up' if ok else 'DOWN'}")
        _print_endpoints(state)
        return 0 if all(alive.values()) else 1
    config = stack.StackConfig(
        root=root,
        events=args.events,
        timing=args.timing,
        poll_seconds=args.poll_seconds,
        scenario_file=args.scenario,
        faults=list(args.fault or []),
        detached=not args.foreground,
        cluster=args.cluster,
        programs=args.programs,
        teams_file=args.teams,
    )
    if stack_state.state_path(root.resolve()).exists():
        print("a local stack is already up here; run `rlpipe local down` first", file=sys.stderr)
        return 1
    local = stack.LocalStack(config)
    try:
        state = local.start()
    except (RuntimeError, ValueError) as exc:
        print(f"rlpipe local up: {exc}", file=sys.stderr)
        return 1
    _print_endpoints(state)
    print(f"logs: {local.logs}   stop with: rlpipe local down")
    if not args.foreground:
        # Children live in their own sessions; leave them running for `down`.
        local.children.clear()
        return 0
    import signal
    import threading

    done = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: done.set())
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    print("running in the foreground; Ctrl-C stops everything")
    done.wait()
    local.stop()
    return 0


def _print_endpoints(state: Any) -> None:
    print(f"events: {state.events_note}")
    width = max(len(k) for k in state.endpoints) + 2
    for name, url in state.endpoints.items():
        print(f"  {name:<{width}}{url}")


def cmd_demo(args: argparse.Namespace) -> int:
    from rlpipe.cli.demo import choose_scenario, run_demo

    if args.check:  # `make demo` asks first, before it builds anything the demo would need
        example, _, _ = choose_scenario(args.scenario, args.cluster, Path(args.example), args.programs)
        print(
            f"demo: {args.scenario or 'the happy path'} on the {args.cluster} cluster ({example}), "
            f"{args.programs} programs"
        )
        return ExitCode.OK

    return run_demo(
        scenario=args.scenario,
        events=args.events,
        example=Path(args.example),
        cluster=args.cluster,
        programs=args.programs,
    )


def register(subparsers: Any, *, local_root: Callable[[], Path]) -> None:
    """Add ``local`` and ``demo``; ``local_root`` finds the stack's folder (here or above)."""
    p = subparsers.add_parser(
        "local", help="run the whole pipeline on this machine (simulated or real cluster)"
    )
    p.add_argument("action", choices=["up", "down", "status"])
    p.add_argument("--root", default=None, help="state and logs directory (default .rlpipe/local)")
    p.add_argument("--events", choices=["auto", "pubsub", "watcher"], default="auto")
    p.add_argument("--timing", choices=["demo", "zero"], default="demo")
    p.add_argument("--poll-seconds", type=int, default=3, help="await_callback timeout between status polls")
    p.add_argument("--scenario", help="fault scenario file (YAML/JSON)")
    p.add_argument("--fault", action="append", help="fault as stage[:attempt]:fault, e.g. train:1:preempt@30")
    p.add_argument("--foreground", action="store_true", help="stay attached; Ctrl-C stops everything")
    p.add_argument("--cluster", **CLUSTER_ARGUMENT)
    p.add_argument("--programs", **PROGRAMS_ARGUMENT)
    p.add_argument(
        "--teams",
        metavar="FILE",
        help="the teams declaration (YAML, {teams: {NAME: {...}}}, as Terraform's var.teams): each team "
        "gets its requests folder and topic, its namespace and its allowlists' Secrets "
        "(docs/teams-local.md; examples/teams/teams.yaml)",
    )
    p.set_defaults(func=lambda args: cmd_local(args, local_root))

    p = subparsers.add_parser(
        "demo", help="start the local stack, run the example to the end, print a summary, stop"
    )
    from rlpipe.cli.demo import SCENARIOS

    p.add_argument(
        "--scenario",
        default="",
        help=f"'' (the happy path), one of {', '.join(n for n in SCENARIOS if n)}, or a scenario file",
    )
    p.add_argument("--events", choices=["auto", "pubsub", "watcher"], default="auto")
    p.add_argument("--example", default="examples/gemma4-26b-v6e-32.yaml")
    p.add_argument("--cluster", **CLUSTER_ARGUMENT)
    p.add_argument("--programs", **PROGRAMS_ARGUMENT)
    p.add_argument(
        "--check",
        action="store_true",
        help="only check the scenario, cluster and programs go together and can run here, start nothing",
    )
    p.set_defaults(func=cmd_demo)
