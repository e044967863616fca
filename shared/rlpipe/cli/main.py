"""``rlpipe``: the command line. Each subcommand parses its arguments, calls the library, prints."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import yaml

from rlpipe.cli import lookup
from rlpipe.cli.argument_types import positive_seconds, seconds
from rlpipe.cli.exit_codes import CliError, ExitCode
from rlpipe.cli.request_files import hub_pins_or_exit, policy, read_request
from rlpipe.core import identity
from rlpipe.core.problems import RequestInvalid


def cmd_schema(args: argparse.Namespace) -> int:
    from rlpipe.core.request import json_schema

    print(json.dumps(json_schema(), indent=2, sort_keys=True))
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    checked = f"checked against {policy().source}"
    try:
        req = read_request(args.request)
    except RequestInvalid as exc:
        print(exc.render(), file=sys.stderr)
        print(checked, file=sys.stderr)
        return 1
    print(
        f"{args.request}: valid (preset {req.preset}, {req.tpu.type} {req.tpu.topology} × {req.tpu.slices}); "
        + checked
    )
    if args.hub:
        for line in hub_pins_or_exit(req, args.request)[2]:
            print(f"pinned {line}")
    from rlpipe.core.request import provisioning

    for warning in provisioning.warnings(req.model_dump(mode="python")):
        print(f"warning: {warning}", file=sys.stderr)
    return 0


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (the container scripts) as YAML block literals, so reviewers can read them;
    no anchors/aliases, so every object reads on its own."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _str_presenter(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str_presenter)


def dump_yaml(objects: list[dict[str, Any]]) -> str:
    return yaml.dump_all(objects, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=1000)


def cmd_render(args: argparse.Namespace) -> int:
    from rlpipe.core.manifests import RenderContext, render

    try:
        req = read_request(args.request)
    except RequestInvalid as exc:
        print(exc.render(), file=sys.stderr)
        return 1
    run_id = args.run_id or identity.run_id_for(
        identity.key_for_request_id(req.request_id) if req.request_id else f"render:{args.request}"
    )
    from rlpipe.control.lifecycle.publishing import UNRENDERED_CARD, publisher_program
    from rlpipe.core.manifests import request_stages

    ctx = RenderContext(
        run_id=run_id,
        bucket=args.bucket,
        namespace=args.namespace,
        hf_revision=args.hf_revision,
        model_card=UNRENDERED_CARD,
        publisher_program=publisher_program(),
    )
    if args.stage == "publish" and req.publish is None:
        print("the request has no publish section, so it has no publish stage", file=sys.stderr)
        return 1
    stages = [args.stage] if args.stage else list(request_stages(req))
    objects = [render(req, stage, args.attempt, ctx) for stage in stages]
    sys.stdout.write(dump_yaml(objects))
    return 0


# ---- commands that talk to a deployment (GCP, or the local stack when it is up) -------------------

LOCAL_ROOT = Path(".rlpipe/local")


def local_root() -> Path:
    """The local stack's folder: ``.rlpipe/local`` here or in the nearest folder above that has a
    stack up, as git finds its repository, so the CLI works from any subfolder of the checkout."""
    from rlpipe.local.stack_state import state_path

    here = Path.cwd()
    for folder in (here, *here.parents):
        if state_path(folder / LOCAL_ROOT).exists():
            return folder / LOCAL_ROOT
    return here / LOCAL_ROOT


def _settings() -> Any:
    """Settings from the environment; with a local stack up (and RLPIPE_TARGET≠gcp), its endpoints."""
    import os

    from rlpipe.control.adapters.settings import Settings
    from rlpipe.local.stack_state import StackState, state_path

    path = state_path(local_root())
    if os.environ.get("RLPIPE_TARGET", "") != "gcp" and path.exists():
        state = StackState.load(path)
        _answers_or_fail(state.env.get("STORAGE_EMULATOR_HOST", ""), path)
        os.environ.update(state.env)
    return Settings.from_env()


def _answers_or_fail(url: str, path: Path) -> None:
    """A stack whose state file outlived it (a reboot, a killed session) is said to be down at
    once: the storage client would otherwise retry a dead port for two minutes."""
    import socket
    from urllib.parse import urlsplit

    where = urlsplit(url)
    if not where.hostname or not where.port:
        return
    try:
        socket.create_connection((where.hostname, where.port), timeout=2).close()
    except OSError:
        raise CliError(
            ExitCode.TRANSIENT,
            f"the local stack recorded in {path} does not answer (its storage at {url} is down): "
            "`rlpipe local status` says which part; `rlpipe local down` then `rlpipe local up` starts it again",
        ) from None


def _local_cluster(settings: Any) -> str:
    """Which cluster a local stack runs on (``control.lifecycle.run_report.local_cluster``: the pages say
    the same)."""
    from rlpipe.control.lifecycle.run_report import local_cluster

    return local_cluster(settings) or "double"


def _ledger(settings: Any) -> Any:
    from rlpipe.control.adapters.blobstore import make_client
    from rlpipe.control.services import Wiring

    return Wiring(settings, make_client(settings.project)).ledger()


def cmd_status(args: argparse.Namespace) -> int:
    from rlpipe.cli import runs, sweep_view
    from rlpipe.reconcile.rules import STUCK_WAITING_EVENT, same_wait

    settings = _settings()
    ledger = _ledger(settings)
    found = lookup.find(ledger, args.run)
    if found.rejection is not None:
        return _print_rejection(args, found.rejection)
    record = found.record
    if record is None:
        raise lookup.not_found(args.run)
    if found.went_to is not None and not args.json:
        print(
            f"delivery {args.run} went to run {record.run_id} "
            f"({'it started it' if found.went_to.get('outcome') == 'started' else 'which already existed'})"
        )
    info = runs.describe(record, sweep_view.children_of(ledger, record))  # a sweep: with its children
    # A waiting run the reconciler's liveness check found can never move (core.liveness): why, if
    # the report is about the wait it is in now (one it has left is no longer true).
    stuck = ledger.last_event(record.run_id, STUCK_WAITING_EVENT) if info["admission"] is not None else None
    info["stuck"] = stuck.get("message") if stuck and same_wait(stuck, record) else None
    links: dict[str, str] = {}
    if not settings.local:  # Cloud Console pages exist only for a deployment on Google Cloud
        from rlpipe.cli.console_links import run_links

        links = run_links(
            project=settings.project,
            run_id=record.run_id,
            artifacts_bucket=settings.artifacts_bucket,
            namespace=settings.teams().namespace_of(record.team, settings.namespace),
            execution_name=record.execution.name,
            scope=settings.teams().cache_scope(record.team),
        )
        info["links"] = links
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    from rlpipe.cli.watch import summary
    from rlpipe.core.runs.admission import admission_text

    if record.sweep is not None:  # a parent runs nothing itself: its children are what it is
        print(sweep_view.parent_summary(record, info["sweep"]))
    else:
        print(summary(record, simulated=settings.local, cluster=_local_cluster(settings)))
    print(f"  team        {record.team}")
    if record.admission is not None and record.lineage.sweep is None:  # a child's: below
        print(f"  waiting     {admission_text(record.admission)}")
    if info["stuck"]:
        print(f"  stuck       {info['stuck']}")
    for line in sweep_view.member_lines(info["sweep"]):  # a sweep's child: its parent and point
        print(line)
    for what, url in links.items():
        print(f"  {what:<19} {url}")
    if not record.terminal and record.sweep is None:
        print(
            f"  now         {record.stage or '-'} attempt {record.attempt}: "
            f"{next((r['phase'] for r in info['stages'] if r['stage'] == record.stage), 'accepted')}"
        )
    return 0


def _print_rejection(args: argparse.Namespace, rejection: dict[str, Any]) -> int:
    """``status`` of a delivery intake refused: its error record, which no run backs."""
    if args.json:
        print(json.dumps({"delivery_id": args.run, "rejected": True, "rejection": rejection}, indent=2))
    else:
        print(f"delivery {args.run}: rejected at {rejection.get('rejected_at')}; no run was started")
        print(str(rejection.get("message") or ""))
    return ExitCode.INVALID_INPUT


def cmd_cancel(args: argparse.Namespace) -> int:
    from rlpipe.cli import runs

    settings = _settings()
    try:
        result = runs.cancel(settings, _ledger(settings), args.run)
    except KeyError:
        raise lookup.not_found(args.run) from None
    except runs.StageRefused as exc:  # e.g. the run ended already: the stage function's own sentence
        print(f"rlpipe cancel: {exc.message}", file=sys.stderr)
        return ExitCode.REFUSED_BY_STATE if exc.status == 409 else ExitCode.INVALID_INPUT
    except runs.StageUnreachable as exc:
        print(f"rlpipe cancel: {exc}; try again", file=sys.stderr)
        return ExitCode.TRANSIENT
    except RuntimeError as exc:  # no stage function URL
        print(f"rlpipe cancel: {exc}", file=sys.stderr)
        return ExitCode.USAGE
    if result["state"] != "cancelled":  # it had ended before: the stage function left its state as it was
        # One line, on stderr alone: a line on stdout naming its state beside it read as two answers
        # (a cleanup that failed on the way is still said, as a warning after it).
        print(
            f"rlpipe cancel: run {args.run} had already ended {result['state']}; not cancelled",
            file=sys.stderr,
        )
        for key, what in (
            ("execution_error", "the execution was not cancelled"),
            ("cleanup_error", "cleanup failed"),
        ):
            if result.get(key):
                print(f"warning: {what}: {result[key]}", file=sys.stderr)
        return ExitCode.REFUSED_BY_STATE
    print(
        f"run {args.run}: {result['state']}; execution cancelled: {result['execution_cancelled']}; "
        f"deleted: {', '.join(result['deleted']) or 'nothing'}"
    )
    children = result.get("children") or []  # a sweep: each child that had not ended
    for c in children:
        print(f"  child {c['index']} {c['run_id']}: {c['was']} → {c['state']}; execution cancelled: ", end="")
        print(c["execution_cancelled"])
    # Reported, not fatal: the run is finished as cancelled either way (runs.cancel).
    for where, key, what in (
        (result, "execution_error", "the execution was not cancelled"),
        (result, "cleanup_error", "cleanup failed"),
        *((c, "execution_error", f"child {c['run_id']}'s execution was not cancelled") for c in children),
    ):
        if where.get(key):
            print(f"warning: {what}: {where[key]}", file=sys.stderr)
    return ExitCode.OK


def cmd_watch(args: argparse.Namespace) -> int:
    from rlpipe.cli import sweep_view
    from rlpipe.cli.exit_codes import for_ended
    from rlpipe.cli.watch import summary, watch, watch_json

    settings = _settings()
    ledger = _ledger(settings)
    found = lookup.await_found(ledger, args.run, timeout=args.accept_timeout)
    if found.rejection is not None:
        return _print_rejection(args, found.rejection)
    if found.record is None:
        error = lookup.not_found(args.run)
        if identity.could_be_produced(args.run):
            error = CliError(
                ExitCode.NOT_FOUND,
                f"no run {args.run} appeared in {args.accept_timeout:g}s (intake accepts a request within "
                "seconds of its delivery); `rlpipe list` shows the runs, `rlpipe status ID` a delivery's fate",
            )
        raise error
    run_id = found.record.run_id
    if args.json:
        record = watch_json(
            ledger,
            run_id,
            timeout=args.timeout,
            interval=args.interval,
            emit=lambda line: print(json.dumps(line), flush=True),
        )
    else:
        if found.went_to is not None:
            print(f"delivery {args.run} went to run {run_id}; following it", flush=True)
        record = watch(
            ledger,
            run_id,
            timeout=args.timeout,
            interval=args.interval,
            simulated=settings.local,
            cluster=_local_cluster(settings),
        )
    assert record is not None  # it was found above, and a ledger is never deleted
    if not args.json:
        single = lambda: summary(record, simulated=settings.local, cluster=_local_cluster(settings))  # noqa: E731
        print(sweep_view.final_summary(ledger, record, single))
    if not record.terminal:
        print(f"rlpipe watch: {run_id} is still {record.state} after {args.timeout:g}s", file=sys.stderr)
    return for_ended(record.state)


def _version() -> str:
    """The installed distribution's version (pyproject.toml)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("rlpipe")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


class _Parser(argparse.ArgumentParser):
    """argparse's parser with ``allow_abbrev`` off for every subcommand too."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)


def build_parser() -> argparse.ArgumentParser:
    # No abbreviations: `--step-second` was taken as `--step-seconds`, and a later option sharing
    # the prefix would silently change what an old script means. Subcommands' parsers are of the
    # same class (argparse makes them with the parser's own), so none abbreviates either.
    parser = _Parser(prog="rlpipe", description="RL post-training pipeline on TPU")
    parser.add_argument("--version", action="version", version=f"rlpipe {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("schema", help="print the request JSON Schema")
    p.set_defaults(func=cmd_schema)

    p = sub.add_parser("validate", help="check a request file; exit 1 listing every problem")
    p.add_argument("request", help="request file (JSON or YAML), or - for stdin")
    p.add_argument(
        "--hub",
        action="store_true",
        help="also pin the model and datasets on the Hub now (revisions, subsets, splits, access)",
    )
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("render", help="print the Kubernetes objects of a request (dry run)")
    p.add_argument("request", help="request file (JSON or YAML), or - for stdin")
    p.add_argument(
        "--stage", choices=identity.STAGES, help="only this stage (default: every stage the request has)"
    )
    p.add_argument("--attempt", type=int, default=1, help="attempt number (default 1)")
    p.add_argument("--bucket", default="ARTIFACTS_BUCKET", help="artifacts bucket name")
    p.add_argument("--namespace", default="rlpipe", help="Kubernetes namespace (default rlpipe)")
    p.add_argument("--run-id", help="run id (default: derived from request_id or the file name)")
    p.add_argument("--hf-revision", help="resolved commit sha to pin (default: the request's hf_revision)")
    p.set_defaults(func=cmd_render)

    from rlpipe.cli import plan as plan_cli

    plan_cli.register(sub, settings=_settings)

    from rlpipe.cli import submit as submit_cli

    submit_cli.register(sub, settings=_settings, ledger=_ledger)

    p = sub.add_parser("status", help="a run's state, stages, attempts, failure, lineage; a sweep's children")
    p.add_argument("run")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_status)

    from rlpipe.cli import list_command

    list_command.register(sub, settings=_settings, ledger=_ledger)

    p = sub.add_parser(
        "cancel", help="cancel the execution (a sweep: each child's), delete workloads, end it"
    )
    p.add_argument("run")
    p.set_defaults(func=cmd_cancel)

    p = sub.add_parser("watch", help="follow a run live until it ends")
    p.add_argument("run")
    p.add_argument(
        "--timeout",
        type=positive_seconds,
        default=24 * 3600,
        help="give up after this many seconds (exit 75)",
    )
    p.add_argument(
        "--accept-timeout",
        type=seconds,
        default=60.0,
        metavar="SECONDS",
        help="how long to wait for a run id nothing has recorded yet to be accepted (exit 3 after)",
    )
    p.add_argument("--interval", type=positive_seconds, default=0.5, help=argparse.SUPPRESS)
    p.add_argument(
        "--json", action="store_true", help="one JSON line per change, then the final record (docs/cli.md)"
    )
    p.set_defaults(func=cmd_watch)

    from rlpipe.cli import local_command

    local_command.register(sub, local_root=local_root)

    from rlpipe.cli import upstream as cli_upstream

    cli_upstream.register(sub, settings=_settings)

    from rlpipe.cli import reconcile as reconcile_cli

    reconcile_cli.register(sub, settings=_settings)
    from rlpipe.cli import report_command as report_cli

    report_cli.register(sub, settings=_settings, ledger=_ledger)
    from rlpipe.cli import compare_command, logs

    compare_command.register(sub, settings=_settings, ledger=_ledger)
    logs.register(sub, settings=_settings, ledger=_ledger)
    from rlpipe.cli import completion

    completion.register(sub, parser=build_parser)
    from rlpipe.cli import promote as promote_cli

    promote_cli.register(sub, settings=_settings, ledger=_ledger)
    from rlpipe.cli import retry_command as retry_cli

    retry_cli.register(sub, settings=_settings, ledger=_ledger)
    from rlpipe.cli import teams_command

    teams_command.register(sub)
    return parser


def _refused_before_asking(args: argparse.Namespace) -> int | None:
    """``retry``, ``promote`` and ``report`` of a run the ledger does not have (3), and ``retry`` and
    ``promote`` of a run whose state refuses them (4), answered from the ledger with the table's
    codes (cli/exit_codes.py) before the command asks the stage function; None: go on."""
    if args.command not in ("retry", "promote", "report"):
        return None
    settings = _settings()
    record = _ledger(settings).get(args.run)
    if record is None:
        raise lookup.not_found(args.run)
    why: str | None = None
    if args.command == "retry":
        from rlpipe.cli.runs import policies
        from rlpipe.control.lifecycle import retry_rounds

        why = retry_rounds.refusal(record, args.from_stage, policies(settings, _ledger(settings)))
    elif args.command == "promote" and record.state != "gated":
        why = f"run {args.run} is {record.state}: only a gated run can be promoted"
    if why is not None:
        print(f"rlpipe {args.command}: {why}", file=sys.stderr)
        return ExitCode.REFUSED_BY_STATE
    return None


def main(argv: list[str] | None = None) -> int:
    """Parse, run the command, and answer every mistake with one line and an exit code from the
    table (cli/errors.py), never a traceback."""
    from rlpipe.cli import errors
    from rlpipe.cli.interrupts import INTERRUPTED, interrupted

    try:  # building the parser imports every command's module: an interrupt may land there too
        args = build_parser().parse_args(argv)
    except KeyboardInterrupt:
        interrupted()
        return INTERRUPTED
    try:
        if getattr(args, "attempt", 1) < 1:
            raise CliError(ExitCode.USAGE, "--attempt must be 1 or more")
        refused = _refused_before_asking(args)
        if refused is not None:
            return int(refused)
        code = int(args.func(args))
        sys.stdout.flush()  # here, where a closed pipe is answered, not in the interpreter's exit
        return code
    except BrokenPipeError:
        return errors.quiet_broken_pipe()
    except KeyboardInterrupt:
        interrupted(args.command)
        return INTERRUPTED
    except Exception as exc:
        try:
            return errors.answer(exc, args.command, as_json=bool(getattr(args, "json", False)))
        except BrokenPipeError:
            return errors.quiet_broken_pipe()


if __name__ == "__main__":
    raise SystemExit(main())
