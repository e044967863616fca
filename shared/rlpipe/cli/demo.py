"""``make demo``: the whole pipeline on this machine, from a file drop to an exported model.

Starts the local stack, drops the example request into the requests bucket, follows the run
live, prints a summary, and stops everything, also on Ctrl-C or failure. Exits 0 only if the run
succeeded. ``cluster="real"`` (``make demo CLUSTER=real``) runs it on the real control plane
instead of the double; ``programs="real"`` (``make demo PROGRAMS=real``) has convert and export
run MaxText's real converters on the tiny Gemma 4 fixture (minutes each), train played. It says
which cluster and which programs, at the start and in the summary.
"""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlpipe.cli.exit_codes import CliError, ExitCode

if TYPE_CHECKING:
    from rlpipe.local.stack import LocalStack

# Named scenarios; anything else is taken as a scenario file path.
SCENARIOS: dict[str, tuple[str | None, list[str]]] = {
    "": (None, []),
    "happy": (None, []),
    # Preempted during training after the step-50 checkpoint; attempt 2 resumes from step 50.
    "preempt": ("examples/gemma4-26b-v6e-32x2.yaml", ["train:1:preempt@70"]),
    # A new upstream release on the Hub double becomes a run, with nobody submitting anything.
    "upstream": (None, []),
    # The quality gate holds the model back: the run ends `gated`, naming the threshold it missed.
    "gate": ("examples/gemma4-26b-v6e-32-gate.yaml", []),
    # Train, pass the gate, export, then publish to the local Hub double with a model card.
    "publish": ("examples/gemma4-26b-v6e-32-publish.yaml", []),
    # Spot capacity: the node is reclaimed at step 33 (graceful node shutdown); the run resumes from
    # the step-30 checkpoint that spot's checkpoint period committed.
    "spot": ("examples/gemma4-26b-v6e-32-spot.yaml", ["train:1:preempt@33:worker:kubelet"]),
    # Our own reward functions (examples/rewards/) instead of MaxText's built-in three, checked at
    # intake, pinned by sha256, named with their hash in the report and the published card.
    "custom-reward": ("examples/gemma4-26b-v6e-32-custom-reward.yaml", []),
    # A 2×2 grid from one file: four children, two at a time, one shared conversion; the best
    # (highest post mean_reward that passed the gate) publishes (cli/demo_sweep.py).
    "sweep": ("examples/sweep-lr.yaml", []),
    # A 3×3 grid with ASHA: children outside the top third at a rung are stopped there (their slices
    # freed for the next child), the best of those that trained to the end publishes, and the
    # summary gives the chip-hours used against an estimate of the sweep without stopping.
    "sweep-asha": ("examples/sweep-asha.yaml", []),
    # Two teams (examples/teams/teams.yaml) submit at once, each via its own folder or topic and
    # run in its own namespace; speech takes back the chips vision borrowed (played on the double);
    # a request of vision's naming speech's Secret is refused; a per-team summary (cli/teams_demo.py).
    "teams": ("examples/teams/teams.yaml", []),
}
# The outcome each scenario is meant to show (anything else is a failed demo).
EXPECTED_STATE = {"gate": "gated"}
WATCH_LIST = Path("examples/upstream/watch.yaml")
# The real controllers take their own time (Kueue's admission, the JobSet's in-order startup, the
# garbage collector): a run there takes a minute or two where the double takes 20 s.
DEMO_TIMEOUT_SECONDS = {"double": 150, "real": 600}
# The real converters take minutes each on two loaded cores (docs/programs.md), and their tens of
# thousands of objects go through the local GCS and its events.
REAL_PROGRAMS_TIMEOUT_SECONDS = 2400
SWEEP_TIMEOUT_FACTOR = 3  # four children, two at a time, then selection and one publish
TEAMS_TIMEOUT_FACTOR = 2  # two runs at once, one of them trains twice (taken back, then resumed)


def choose_scenario(
    scenario: str, cluster: str, example: Path, programs: str = "played"
) -> tuple[Path, list[str], str | None]:
    """The example, faults and scenario file a demo runs, or ``CliError`` before anything starts:
    a name that is neither a scenario nor a file lists the scenarios (a typo must not start half a
    stack), a scenario the chosen cluster cannot play is refused before any component is built
    (``make demo`` runs this first, as ``rlpipe demo --check``), and so are real programs where
    they cannot run (no Python >= 3.12, or the real control plane)."""
    from rlpipe.local.clusters import NoFaults, NoRealPrograms, refuse_faults, refuse_real_programs

    if scenario in SCENARIOS:
        override, faults = SCENARIOS[scenario]
        scenario_file = None
        example = Path(override) if override else example
    elif Path(scenario).is_file():
        faults, scenario_file = [], scenario
    else:
        named = ", ".join(name for name in SCENARIOS if name)
        raise CliError(
            ExitCode.USAGE,
            f"no scenario {scenario!r}: use one of {named} (or empty for the happy path), or a scenario file's path",
        )
    if cluster not in DEMO_TIMEOUT_SECONDS:
        raise CliError(ExitCode.USAGE, f"no cluster {cluster!r}: use double or real")
    try:
        refuse_faults(cluster, faults, scenario_file)
    except NoFaults as refused:
        raise CliError(ExitCode.USAGE, f"scenario {scenario!r} needs faults: {refused}") from None
    try:
        refuse_real_programs(cluster, programs)
    except NoRealPrograms as refused:
        raise CliError(ExitCode.USAGE, f"--programs {programs}: {refused}") from None
    return example, faults, scenario_file


def programs_line(programs: str) -> str:
    """The summary's line saying which MaxText programs ran for real, and with which interpreter."""
    if programs == "real":
        from rlpipe.local.clusters import programs_cache

        python = programs_cache() / "venv" / "bin" / "python"
        return (
            f"  programs    convert, export: REAL, run by {python} (the programs venv: MaxText 0.2.4's "
            "to_maxtext and to_huggingface) on the tiny Gemma 4 fixture; train: played"
        )
    return "  programs    convert, train, export: played by the simulator"


def run_demo(
    *,
    scenario: str = "",
    events: str = "auto",
    example: Path = Path("examples/gemma4-26b-v6e-32.yaml"),
    root: Path = Path(".rlpipe/demo"),
    cluster: str = "double",
    programs: str = "played",
) -> int:
    from rlpipe.cli import submit as submit_cli
    from rlpipe.cli.watch import PipedConsole, summary, watch
    from rlpipe.control.adapters.blobstore import make_client
    from rlpipe.control.adapters.settings import Settings
    from rlpipe.control.services import Wiring
    from rlpipe.local.stack import LocalStack, StackConfig

    console = PipedConsole()
    # CliError: nothing started
    example, faults, scenario_file = choose_scenario(scenario, cluster, example, programs)
    started = time.monotonic()
    timeout = DEMO_TIMEOUT_SECONDS.get(cluster, DEMO_TIMEOUT_SECONDS["double"])
    if programs == "real":
        timeout = REAL_PROGRAMS_TIMEOUT_SECONDS
    console.print(
        f"[bold]rlpipe demo[/bold]: {example}"
        + (f", scenario {scenario}" if scenario else "")
        + f", on the {'REAL control plane' if cluster == 'real' else 'simulated cluster (the double)'}"
        + (
            ", with the REAL MaxText converters for convert and export (train played): "
            "expect 4 to 8 minutes, most of it in to_huggingface"
            if programs == "real"
            else ""
        )
    )
    stack = LocalStack(
        StackConfig(
            root=root,
            events=events,
            faults=faults,
            scenario_file=scenario_file,
            poll_seconds=2,
            cluster=cluster,
            programs=programs,
            teams_file=str(example) if scenario == "teams" else None,
        ),
        say=lambda text: print(text, flush=True),
    )
    try:
        try:
            state = stack.start()
        except (RuntimeError, ValueError) as exc:
            console.print(f"[red]the local stack did not start: {exc}[/red]")
            return 1
        print(f"[local] stack up in {time.monotonic() - started:.1f}s; logs in {stack.logs}", flush=True)
        os.environ.update(state.env)
        settings = Settings.from_env()
        ledger = Wiring(settings, make_client(settings.project)).ledger()
        if scenario == "teams":
            from rlpipe.cli import teams_demo

            return teams_demo.run(
                stack,
                settings,
                ledger,
                cluster=cluster,
                timeout=timeout * TEAMS_TIMEOUT_FACTOR,
                started=started,
            )
        if scenario == "upstream":
            run_id = _upstream_release(stack, settings, ledger)
        else:
            name = demo_request_id(example, time.gmtime())  # this demo's own run, and its own page
            submitted = submit_cli.submit(settings, example, via="gcs", name=name)
            print(f"dropped {example} at {submitted.where}", flush=True)
            answer = submit_cli.await_intake(ledger, submitted, timeout=timeout)
            if answer.kind == "rejected":  # intake refused it: say why, as its error record does
                assert answer.rejection is not None
                console.print(f"[red]intake rejected {example}:[/red]\n{answer.rejection.get('message', '')}")
                return 1
            if answer.record is None:
                console.print(f"[red]intake did not answer within {timeout}s; see {stack.logs}[/red]")
                return 1
            run_id = answer.record.run_id
            print(f"intake accepted it: run id {run_id}", flush=True)
        if scenario in ("sweep", "sweep-asha"):
            return _sweep(
                ledger, run_id, settings, root, timeout * SWEEP_TIMEOUT_FACTOR, started, cluster, state.events
            )
        record = watch(ledger, run_id, timeout=timeout, simulated=True, cluster=cluster, console=console)
        console.print()
        if record is None:
            console.print(f"[red]run {run_id} was never accepted; see {stack.logs}[/red]")
            return 1
        print(summary(record, simulated=True, cluster=cluster, hub_stops=True, events=state.events))
        print(programs_line(programs))
        print(f"  wall time   {time.monotonic() - started:.1f}s", flush=True)
        note = try_it_yourself(record, example)
        if note:
            print(note, flush=True)
        if not record.terminal:
            console.print(f"[red]run did not finish within {timeout}s; see {stack.logs}[/red]")
            return 1
        if record.request.get("publish") and record.state == "succeeded":
            _show_published(settings, record)
        if record.lineage.inputs or record.lineage.data:
            _show_inputs(record, root, cluster)
        return 0 if record.state == EXPECTED_STATE.get(scenario, "succeeded") else 1
    except KeyboardInterrupt:
        console.print("[yellow]interrupted; stopping the local stack[/yellow]")
        return 130
    finally:
        stack.stop()


def _sweep(
    ledger: Any,
    parent_id: str,
    settings: Any,
    root: Path,
    timeout: float,
    started: float,
    cluster: str,
    events: str = "pubsub",
) -> int:
    from rlpipe.cli import demo_sweep

    print(f"sweep {parent_id}: following its children", flush=True)
    parent = demo_sweep.follow(ledger, parent_id, timeout=timeout)
    if parent is None or parent.sweep is None:
        print(f"sweep {parent_id} was never accepted", flush=True)
        return 1
    print()
    print(
        demo_sweep.summary(
            ledger, parent, root, prices_json=settings.prices_json or "", cluster=cluster, events=events
        )
    )
    print(f"  wall time   {time.monotonic() - started:.1f}s", flush=True)
    return 0 if parent.state == "succeeded" else 1


def try_it_yourself(record: Any, example: Path) -> str | None:
    """How to take the summary's next step (``rlpipe promote`` after the gate scenario) on this
    machine: the demo stops its stack, and its run with it, so the command cannot be run on that
    run; a stack the user keeps up can."""
    from rlpipe.cli.watch import next_command

    command = next_command(record, "RUN") if record.terminal else None
    if command is None:
        return None
    indent = " " * 14  # under the summary's values
    steps = ["rlpipe local up", f"rlpipe submit {example}", "rlpipe watch RUN", command, "rlpipe local down"]
    return "\n".join(
        ["  try it      this demo's stack stops now, and its run with it; to take the next step yourself:"]
        + [indent + step for step in steps]
    )


def _show_published(settings: Any, record: Any) -> None:
    """What the real client sees on the local Hub: the files, and the card's first lines."""
    from huggingface_hub import HfApi

    req = record.request["publish"]
    api = HfApi(endpoint=os.environ["HF_ENDPOINT"], token="local-read-token")
    files = api.list_repo_files(req["repo"], revision=req["branch"])
    print(
        f"  hub         {req['repo']}@{req['branch']}: {len(files)} files ({', '.join(sorted(files)[:4])}, ...)"
    )
    card = Path(api.hf_hub_download(req["repo"], "README.md", revision=req["branch"])).read_text()
    names_sha = record.lineage.hf_sha and record.lineage.hf_sha in card
    print(f"  card        README.md names the base sha {record.lineage.hf_sha[:12]}: {bool(names_sha)}")
    rewards = (record.lineage.inputs or {}).get("rewards")
    if rewards:
        named = rewards["sha256"] in card and all(f in card for f in rewards.get("functions", []))
        print(f"  card        names the reward functions and their file's sha256: {named}")


REQUEST_ID_MAX = 40  # core.request.model: request_id is [a-z0-9-]{1,40}


def demo_request_id(example: Path, when: time.struct_time) -> str:
    """The request_id a demo submits its example under: the example's own, with the time of the
    demo (UTC, to the second). The example's request_id alone made every demo's run the same id,
    so each demo wrote its pages over the last one's (``.rlpipe/demo/<run>-report.html``)."""
    import yaml

    doc = yaml.safe_load(example.read_text()) or {}
    base = str(doc.get("request_id") or re.sub(r"[^a-z0-9-]+", "-", example.stem.lower()))
    stamp = time.strftime("%Y%m%d-%H%M%S", when)
    return f"{base[: REQUEST_ID_MAX - len(stamp) - 1].rstrip('-')}-{stamp}"


def _show_inputs(record: Any, root: Path, cluster: str) -> None:
    """The report that says what the run trained on and with (written before the stack stops,
    since it reads the run's ledger); the summary above named them."""
    from rlpipe.cli import charts
    from rlpipe.report import write_report

    path = write_report(record, root / f"{record.run_id}-report.html", cluster=cluster, painter=charts)
    text = path.read_text(encoding="utf-8")
    named = all(e["sha256"] in text for e in (record.lineage.inputs or {}).values())
    print(
        f"  report      {path}" + (" (names every file's sha256)" if record.lineage.inputs and named else "")
    )


def _upstream_release(stack: LocalStack, settings: Any, ledger: Any) -> str:
    """Upload the watch list, take the baseline, push a release to the Hub double, poll again."""
    import yaml

    from rlpipe.control.adapters.blobstore import make_client

    watch_list = yaml.safe_load(WATCH_LIST.read_text())
    for entry in watch_list["watch"]:
        entry["debounce_minutes"] = 0  # the demo's release is final at once
    bucket = make_client(settings.project).bucket(settings.requests_bucket)
    bucket.blob("config/watch.yaml").upload_from_string(yaml.safe_dump(watch_list))
    print(
        f"uploaded {WATCH_LIST} to gs://{settings.requests_bucket}/config/watch.yaml (debounce 0 for the demo)"
    )
    stack.upstream_tick()
    print("poll 1: the current head of google/gemma-4-26b-a4b-it is recorded as the baseline")
    before = set(ledger.list_run_ids())
    release = stack.hub_release("google/gemma-4-26b-a4b-it")
    print(
        f"upstream: pushed {release['sha'][:12]} to google/gemma-4-26b-a4b-it ({len(release['changed'])} files)"
    )
    stack.upstream_tick()
    new = [r for r in ledger.list_run_ids() if r not in before]
    if not new:
        raise RuntimeError(f"the poll after the release started no run; see {stack.logs}/upstream_poll.log")
    print(f"poll 2: new release → run {new[0]} (hf_revision pinned to {release['sha'][:12]})", flush=True)
    return str(new[0])


if __name__ == "__main__":
    sys.exit(run_demo(scenario=sys.argv[1] if len(sys.argv) > 1 else ""))
