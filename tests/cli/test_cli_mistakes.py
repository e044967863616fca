"""Every command, given the mistakes people make, answers with one line and an exit code from the
table (docs/cli.md), and never with a Python traceback.

Each case is run as the real `rlpipe` process, as a user runs it. The mistakes are the ones a
fresh-clone tryout hit: no local stack (or a subfolder of the checkout), a missing file, output
cut off by `| head`, an unwritable report path, a typo in a demo scenario, a scenario the real
plane cannot play, a local stack whose processes are gone, and a mistyped run id.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rlpipe.cli.exit_codes import ExitCode
from tests.conftest import ROOT, Buckets
from tests.harness.cli import run_rlpipe
from tests.harness.patience import ceiling

DOCUMENTED = {int(code) for code in ExitCode} | {141}
RUN = "rabcdefghijk"  # well-formed, and in no ledger


def _clean_env(**extra: str) -> dict[str, str]:
    """The environment of a newcomer's shell: no deployment settings, no credentials."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("RLPIPE_", "STORAGE_EMULATOR", "PUBSUB_EMULATOR", "GOOGLE_"))
        and k != "HF_ENDPOINT"
    }
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["HOME"] = env.get("HOME", "/root")
    env["CLOUDSDK_CONFIG"] = "/nonexistent-gcloud-config"  # no gcloud credentials either
    env.update(extra)
    return env


def run(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The real ``rlpipe`` process (for what only a process shows: its exit status as the shell
    sees it, a closed pipe, nothing printed by the interpreter itself)."""
    return run_rlpipe(args, env, cwd, expected_seconds=1)


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Any:
    """``rlpipe``'s ``main`` in this process, with ``env`` as its whole environment and ``cwd`` as
    its folder: what a user would see, without starting an interpreter per case. An exception
    ``main`` lets through fails the test, as a traceback would fail a user."""
    from rlpipe.cli.main import main

    def run_in_process(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        saved = dict(os.environ)
        os.environ.clear()
        os.environ.update(env)
        monkeypatch.chdir(cwd)
        try:
            try:
                code = main(args)
            except SystemExit as exc:  # argparse's own usage errors
                code = exc.code if isinstance(exc.code, int) else 2
        finally:
            os.environ.clear()
            os.environ.update(saved)
        out = capsys.readouterr()
        return subprocess.CompletedProcess(args, code, out.out, out.err)

    return run_in_process


def assert_answered(
    done: subprocess.CompletedProcess[str], args: list[str], *, json_error: bool = False
) -> None:
    """No traceback, a documented code, and a message that says something."""
    text = done.stdout + done.stderr
    assert "Traceback" not in text and 'File "' not in text, (args, text)
    assert done.returncode in DOCUMENTED, (args, done.returncode, text)
    assert done.returncode != ExitCode.INTERNAL_ERROR, (args, text)
    if json_error:
        error = json.loads(done.stdout)["error"]
        assert error["code"] == done.returncode and error["message"], (args, done.stdout)
    elif done.returncode != 0:
        assert done.stderr.strip(), (args, "a failure says why")


COMMANDS_THAT_READ_A_DEPLOYMENT = [
    ["list"],
    ["list", "--json"],
    ["status", RUN],
    ["status", RUN, "--json"],
    ["watch", RUN, "--accept-timeout", "0"],
    ["cancel", RUN],
    ["report", RUN],
    ["logs", RUN],
    ["retry", RUN, "--reason", "again"],
    ["promote", RUN, "--reason", "ship"],
    ["compare", RUN, "rbcdefghijkl"],
    ["submit", "examples/gemma4-26b-v6e-32.yaml", "--wait", "1"],
]


@pytest.mark.parametrize("args", COMMANDS_THAT_READ_A_DEPLOYMENT, ids=" ".join)
def test_without_a_local_stack_or_credentials_every_command_says_how_to_get_one(
    args: list[str], tmp_path: Path, cli: Any
) -> None:
    """From a folder with no stack (a subfolder of a checkout whose stack is down is the same)."""
    repository = tmp_path / "checkout"
    (repository / "examples").mkdir(parents=True)
    (repository / "examples" / "gemma4-26b-v6e-32.yaml").write_bytes(
        (ROOT / "examples" / "gemma4-26b-v6e-32.yaml").read_bytes()
    )
    done = cli(args, repository, _clean_env())
    assert_answered(done, args, json_error="--json" in args)
    assert done.returncode == ExitCode.USAGE, (args, done.stderr)
    message = done.stdout if "--json" in args else done.stderr
    assert "rlpipe local up" in message and "RLPIPE_TARGET=gcp" in message, message


def test_the_real_process_without_a_stack_prints_one_line_and_exits_2(tmp_path: Path) -> None:
    done = run(["status", RUN], tmp_path, _clean_env())
    assert_answered(done, ["status"])
    assert done.returncode == ExitCode.USAGE and len(done.stderr.strip().splitlines()) == 1


def test_a_subfolder_of_the_checkout_finds_the_stack_above_it(tmp_path: Path, cli: Any) -> None:
    """The stack's state is found in the nearest folder above, as git finds its repository: here a
    state whose processes are gone, so the answer names that stack (not "no stack here") and says
    how to start it again, at once and with the code worth retrying."""
    from rlpipe.local.ports import free_port
    from rlpipe.local.stack_state import StackState, state_path

    root = tmp_path / ".rlpipe" / "local"
    root.mkdir(parents=True)
    dead = f"http://127.0.0.1:{free_port()}"
    StackState(
        root=str(root),
        pids={},
        endpoints={"gcs": dead},
        env={"STORAGE_EMULATOR_HOST": dead, "RLPIPE_LOCAL": "1"},
        events="watcher",
        events_note="",
    ).save(state_path(root))
    below = tmp_path / "docs" / "deeper"
    below.mkdir(parents=True)
    for args in (["list"], ["status", RUN, "--json"]):
        done = cli(args, below, _clean_env())
        assert_answered(done, args, json_error="--json" in args)
        assert done.returncode == ExitCode.TRANSIENT
        assert str(state_path(root)) in (done.stdout + done.stderr) and "rlpipe local up" in (
            done.stdout + done.stderr
        )


MISSING_FILES = [
    ["validate", "no-such-request.yaml"],
    ["plan", "no-such-request.yaml"],
    ["plan", "no-such-request.yaml", "--json"],
    ["render", "no-such-request.yaml"],
    ["validate", "examples"],  # a folder, not a file
    ["submit", "no-such-request.yaml"],
]


@pytest.mark.parametrize("args", MISSING_FILES, ids=" ".join)
def test_a_file_that_cannot_be_read_is_named(args: list[str], cli: Any) -> None:
    done = cli(args, ROOT, _clean_env())
    assert_answered(done, args, json_error="--json" in args)
    assert done.returncode == ExitCode.INVALID_INPUT
    assert args[1] in (done.stdout + done.stderr)


@pytest.fixture
def deployment(buckets: Buckets) -> dict[str, str]:
    """A deployment with one finished run in its ledger (reached as on GCP, without credentials,
    since its storage is emulated)."""
    from tests.cli.test_cli_contract import _record

    assert buckets.ledger().claim(_record("rdonedonedon", "succeeded"))
    return _clean_env(**buckets.env(RLPIPE_TARGET="gcp", RLPIPE_STAGE_URL="http://127.0.0.1:9/"))


def test_output_cut_off_by_head_ends_quietly(deployment: dict[str, str]) -> None:
    for args in (
        ["status", "rdonedonedon"],
        ["list"],
        ["status", "rdonedonedon", "--json"],
        ["watch", "rdonedonedon"],
    ):
        done = subprocess.run(
            # `true` reads nothing and exits at once: every write rlpipe makes meets a closed pipe.
            f"{sys.executable} -m rlpipe.cli.main {' '.join(args)} | true; exit ${{PIPESTATUS[0]}}",
            shell=True,
            executable="/bin/bash",
            capture_output=True,
            text=True,
            cwd=ROOT,
            env=deployment,
            timeout=ceiling(10),
            check=False,
        )
        assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr, (args, done.stderr)
        assert done.returncode == 141, (args, done.returncode, done.stderr)


def test_an_unwritable_report_path_is_named(deployment: dict[str, str], tmp_path: Path, cli: Any) -> None:
    target = "/dev/null/report.html"  # under a file: no user, root included, can write it
    done = cli(["report", "rdonedonedon", "-o", target], ROOT, deployment)
    assert_answered(done, ["report"])
    assert done.returncode == ExitCode.INVALID_INPUT and "/dev/null" in done.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["status", RUN],
        ["status", RUN, "--json"],
        ["status", "RUN-WITH-CAPS"],
        ["watch", "rnotanid01", "--json"],
        ["cancel", RUN],
        ["report", RUN],
        ["logs", RUN],
        ["retry", "rdonedonedon", "--reason", "again"],
        ["promote", "rdonedonedon", "--reason", "ship"],
        ["compare", "rdonedonedon"],
        ["compare", "rdonedonedon", RUN, "--json"],
        ["list", "--page-token", "not a token", "--limit", "2"],
        ["list", "--since", "yesterday"],
        ["submit", "examples/gemma4-26b-v6e-32.yaml", "--set", "no-equals-sign", "--wait", "0"],
        ["submit", "examples/gemma4-26b-v6e-32.yaml", "--set", "training..x=1", "--wait", "0"],
        ["render", "examples/gemma4-26b-v6e-32.yaml", "--attempt", "0"],
        ["frobnicate"],
    ],
    ids=" ".join,
)
def test_mistakes_against_a_deployment_are_answered_without_a_traceback(
    args: list[str], deployment: dict[str, str], cli: Any
) -> None:
    done = cli(args, ROOT, deployment)
    json_error = "--json" in args and done.returncode not in (0, 2)  # argparse's own usage error is text
    assert_answered(done, args, json_error=json_error)
    assert done.returncode != ExitCode.OK, args


def test_a_demo_scenario_typo_is_refused_before_anything_starts(cli: Any) -> None:
    done = cli(["demo", "--scenario", "preemt"], ROOT, _clean_env())
    assert_answered(done, ["demo"])
    assert done.returncode == ExitCode.USAGE
    assert "no scenario 'preemt'" in done.stdout + done.stderr and "preempt" in done.stdout + done.stderr
    assert not (ROOT / ".rlpipe" / "demo" / "state.json").exists()


def test_make_demo_refuses_a_fault_scenario_on_the_real_plane_before_building_anything(
    tmp_path: Path,
) -> None:
    """`make demo CLUSTER=real SCENARIO=spot` was refused only after building the components (16-28
    minutes cold). The check runs first: with no Go on PATH at all, the refusal still comes, and no
    build step is reached (no "components" line)."""
    env = _clean_env()
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if not (Path(p) / "go").exists())
    done = subprocess.run(
        ["make", "--no-print-directory", "demo", "CLUSTER=real", "SCENARIO=spot"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=ceiling(30),
        check=False,
    )
    assert done.returncode != 0
    assert "needs faults" in done.stdout + done.stderr
    assert "components" not in done.stdout and "Traceback" not in done.stdout + done.stderr


@pytest.fixture
def two_runs(deployment: dict[str, str], buckets: Buckets) -> dict[str, str]:
    """The deployment with a second finished run, for `compare`."""
    from tests.cli.test_cli_contract import _record

    assert buckets.ledger().claim(_record("rdonetwotwoa", "succeeded"))
    return deployment


PAGES = [["report", "rdonedonedon"], ["compare", "rdonedonedon", "rdonetwotwoa"]]


@pytest.mark.parametrize("command", PAGES, ids=" ".join)
def test_a_page_in_a_folder_that_does_not_exist_is_refused_and_no_folder_is_made(
    command: list[str], two_runs: dict[str, str], tmp_path: Path, cli: Any
) -> None:
    """`-o /no/such/dir/x.html` made folders at the filesystem root: the folder is the user's to make."""
    target = tmp_path / "no" / "such" / "dir" / "x.html"
    done = cli([*command, "-o", str(target)], ROOT, two_runs)
    assert_answered(done, command)
    assert done.returncode == ExitCode.INVALID_INPUT
    assert f"the folder {target.parent} does not exist" in done.stderr and "-o" in done.stderr
    assert not (tmp_path / "no").exists(), "nothing is created"


@pytest.mark.parametrize("command", PAGES, ids=" ".join)
def test_without_o_a_page_goes_to_the_stacks_pages_folder_not_the_current_one(
    command: list[str], two_runs: dict[str, str], tmp_path: Path, cli: Any
) -> None:
    """In the demo, `report` and `compare` wrote into the current folder, the repository's root: with
    a local stack up, RLPIPE_PAGES_DIR (its ``pages`` folder) takes the page; without it, the current
    folder does, as docs/cli.md says."""
    here, pages = tmp_path / "checkout", tmp_path / "stack" / "pages"
    here.mkdir()
    done = cli(command, here, {**two_runs, "RLPIPE_PAGES_DIR": str(pages)})
    assert done.returncode == 0, done.stderr
    written = sorted(p.name for p in pages.iterdir())
    assert len(written) == 1 and written[0].endswith(".html") and command[1] in written[0]
    assert done.stdout.startswith(f"wrote {pages / written[0]}")
    assert list(here.iterdir()) == [], "nothing in the current folder"
    done = cli(command, here, two_runs)
    assert done.returncode == 0, done.stderr
    assert [p.name for p in here.iterdir()] == written


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs Linux's /dev/full")
@pytest.mark.parametrize("command", PAGES, ids=" ".join)
def test_a_page_the_system_will_not_write_is_named_not_called_a_bug(
    command: list[str], two_runs: dict[str, str], cli: Any
) -> None:
    """`-o /dev/full` said "this is a bug in rlpipe" (exit 70): the write fails with ENOSPC."""
    done = cli([*command, "-o", "/dev/full"], ROOT, two_runs)
    assert_answered(done, command)
    assert done.returncode == ExitCode.INVALID_INPUT
    assert "/dev/full" in done.stderr and "No space left on device" in done.stderr, done.stderr


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["plan", "examples/gemma4-26b-v6e-32.yaml", "--step-seconds", "-5"], "--step-seconds"),
        (["plan", "examples/gemma4-26b-v6e-32.yaml", "--step-seconds", "0"], "--step-seconds"),
        (["plan", "examples/gemma4-26b-v6e-32.yaml", "--step-seconds", "nan"], "--step-seconds"),
        (["plan", "examples/gemma4-26b-v6e-32.yaml", "--step-seconds=inf"], "--step-seconds"),
        (["watch", "rdonedonedon", "--timeout", "-1"], "--timeout"),
        (["logs", "rdonedonedon", "--timeout", "0"], "--timeout"),
        (["submit", "examples/gemma4-26b-v6e-32.yaml", "--wait", "-1"], "--wait"),
        (["reconcile", "--budget", "-3"], "--budget"),
    ],
    ids=lambda v: " ".join(v) if isinstance(v, list) else v,
)
def test_a_number_of_seconds_that_cannot_be_is_a_usage_error_naming_the_option(
    args: list[str], option: str, cli: Any
) -> None:
    """`plan --step-seconds -5` exited 0 with negative chip-hours: argparse's float takes it."""
    done = cli(args, ROOT, _clean_env())
    assert done.returncode == ExitCode.USAGE, (done.returncode, done.stderr)
    assert f"argument {option}" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["plan", "examples/gemma4-26b-v6e-32.yaml", "--step-second", "5"],
        ["plan", "examples/gemma4-26b-v6e-32.yaml", "--js"],
        ["list", "--lim", "2"],
    ],
    ids=" ".join,
)
def test_an_option_is_never_taken_from_its_abbreviation(args: list[str], cli: Any) -> None:
    """`--step-second` was taken as `--step-seconds`: a prefix is refused as the unknown option it is."""
    done = cli(args, ROOT, _clean_env())
    assert done.returncode == ExitCode.USAGE, (done.returncode, done.stdout, done.stderr)
    assert "unrecognized arguments" in done.stderr, done.stderr
