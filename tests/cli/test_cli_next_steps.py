"""What the terminal shows at the end of a run and after a promote: the next step, plain sentences,
and lines that end where they should.

- the gate demo (and `rlpipe watch` of a gated run) names `rlpipe promote RUN --reason …`, and the
  demo says how to take that step on this machine, since it stops its own stack;
- `rlpipe promote` prints the stage function's own sentence when it refuses, not the payload;
- `rlpipe watch`'s live view ends its last line when its output is not a terminal.
"""

from __future__ import annotations

import io
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from rich.console import Console

from rlpipe.core.request import validate_request
from rlpipe.core.runs.record import Failure, GateRecord, RunRecord, Source
from tests.conftest import ROOT, Buckets, minimal_request
from tests.harness.functions import FunctionServer

GATE_EXAMPLE = "examples/gemma4-26b-v6e-32-gate.yaml"


def _record(run_id: str, state: str) -> RunRecord:
    r = RunRecord(
        run_id=run_id,
        key=f"request:{run_id}",
        source=Source(kind="cli"),
        request=validate_request(minimal_request()).model_dump(mode="json"),
        state=state,  # type: ignore[arg-type]
    )
    if state == "gated":
        r.gate = GateRecord(passed=False, reasons=["post mean_reward 0.5627 below min_post_mean_reward 0.6"])
        r.failure = Failure(tag="gated", message="gate failed", stage="gate")
    return r


# ------------------------------------------------------------------------- the gate demo's ending


class _Stack:
    """The local stack as run_demo uses it, without its servers: the run itself is played below."""

    logs = Path("/nonexistent/logs")

    def __init__(self, config: Any, say: Any) -> None:
        self.stopped = False

    def start(self) -> Any:
        return SimpleNamespace(env={}, events="pubsub")

    def stop(self) -> None:
        self.stopped = True


def test_the_gate_demo_ends_naming_promote_and_how_to_run_it_here(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from rlpipe.cli import demo
    from rlpipe.cli import submit as submit_cli
    from rlpipe.cli import watch as watch_module
    from rlpipe.control.adapters import blobstore
    from rlpipe.control.lifecycle import ledger

    gated = _record("rgatedemo001", "gated")
    from rlpipe.local import stack

    monkeypatch.setattr(stack, "LocalStack", _Stack)
    monkeypatch.setattr(blobstore, "make_client", lambda project: None)
    monkeypatch.setattr(blobstore, "BlobStore", lambda client, bucket: None)
    monkeypatch.setattr(ledger, "Ledger", lambda store: None)
    names: list[str] = []

    def submitted(settings: Any, path: Path, via: str, name: str) -> SimpleNamespace:
        names.append(name)  # the demo's own request_id (tests/cli/test_demo_request_ids.py)
        return SimpleNamespace(run_id=gated.run_id, where="gs://r/x")

    monkeypatch.setattr(submit_cli, "submit", submitted)
    monkeypatch.setattr(
        submit_cli, "await_intake", lambda *args, **kwargs: submit_cli.IntakeAnswer("started", gated)
    )
    monkeypatch.setattr(watch_module, "watch", lambda *args, **kwargs: gated)

    assert demo.run_demo(scenario="gate") == 0, "the gate scenario is meant to end gated"
    assert len(names) == 1 and names[0].startswith("gemma4-26b-v6e-32-gate-"), names
    out = capsys.readouterr().out
    assert f"rlpipe promote {gated.run_id} --reason" in out
    # The demo's stack is gone when the user reads this: it says how to take the step here.
    assert "rlpipe local up" in out and f"rlpipe submit {GATE_EXAMPLE}" in out


def test_a_finished_run_names_no_next_step_and_a_failed_one_names_retry() -> None:
    from rlpipe.cli.watch import summary

    assert "rlpipe promote" not in summary(_record("rdone0000001", "succeeded"))
    assert "rlpipe retry" not in summary(_record("rdone0000001", "succeeded"))
    assert "rlpipe retry rfail0000001 --reason" in summary(_record("rfail0000001", "failed"))


def test_a_finished_runs_summary_says_which_step_its_export_loaded_when_not_the_last() -> None:
    from rlpipe.cli.watch import summary

    record = _record("rdone0000002", "succeeded")
    record.lineage.export_uri, record.lineage.final_step = "gs://a/runs/rdone0000002/hf/", 40
    assert "exported" not in summary(record)
    record.lineage.exported_step, record.lineage.export_reason = (
        10,
        "step 10 of 40: the best post_mean_reward",
    )
    assert "  exported    step 10: step 10 of 40: the best post_mean_reward" in summary(record)


# ------------------------------------------------------------------------- rlpipe promote


@pytest.fixture
def stage(
    buckets: Buckets, executions: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Any]:
    """The real stage function; the CLI reaches it as on GCP (RLPIPE_TARGET=gcp: no local stack
    state is read), without an ID token because the buckets are emulated."""
    env = buckets.env(RLPIPE_WORKFLOWS_ENDPOINT=executions.target)
    server = FunctionServer("stage", "http", env, tmp_path).start()
    for key, value in {**env, "RLPIPE_STAGE_URL": server.url, "RLPIPE_TARGET": "gcp"}.items():
        monkeypatch.setenv(key, value)
    yield server
    server.stop()


def _promote(run_id: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rlpipe.cli.main", "promote", run_id, "--reason", "reviewed the samples"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
        timeout=120,
    )


def test_promote_prints_sentences_not_payloads(buckets: Buckets, stage: Any) -> None:
    ledger = buckets.ledger()
    assert ledger.claim(_record("rpromoted001", "gated"))
    assert ledger.claim(_record("rsucceeded01", "succeeded"))

    done = _promote("rpromoted001")
    assert done.returncode == 0, done.stderr + stage.logs()[-2000:]
    assert "rpromoted001" in done.stdout and "rlpipe watch rpromoted001" in done.stdout
    assert "{" not in done.stdout + done.stderr
    # It says what happens next, not the ledger's re-entry state (which read as training again).
    assert "state training" not in done.stdout and "training" not in done.stdout, done.stdout
    assert "skips train and export, which are done, and publishes it" in done.stdout, done.stdout

    for run_id, why in (("rsucceeded01", "only a gated run"), ("rnosuchrunaa", "no run rnosuchrunaa")):
        refused = _promote(run_id)
        assert refused.returncode == (3 if run_id == "rnosuchrunaa" else 4) and refused.stdout == ""
        (line,) = refused.stderr.strip().splitlines()
        assert why in line and run_id in line
        assert "{" not in line and "'error'" not in line, "the stage function's sentence, not its payload"


# ------------------------------------------------------------------------- rlpipe watch's live view


def test_piped_watch_prints_one_plain_line_per_change_and_says_simulated() -> None:
    """Piped (a CI log), a redrawn live view shows only its last frame: the run's story is told in
    plain lines instead, one per change of state, stage, attempt or phase, none for a poll that
    changed nothing, after one line saying the cluster is simulated."""
    from rlpipe.cli.watch import summary, watch
    from rlpipe.core.runs.record import Attempt

    training = _record("rwatched0001", "training")
    training.stage, training.attempt = "train", 1
    training.attempts = [
        Attempt(
            stage="train", attempt=1, workload="w", launched_at="2026-12-05T10:00:00.000000Z", phase="running"
        )
    ]
    seen_twice = training.model_copy(deep=True)
    seen_twice.progress = {"step": 20}  # a new step is not a change of phase
    gated = _record("rwatched0001", "gated")
    frames = iter([None, training, seen_twice, gated])
    out = io.StringIO()
    console = Console(file=out, force_terminal=False, width=100)
    ledger = SimpleNamespace(get=lambda run_id: next(frames, gated))
    seen = watch(ledger, "rwatched0001", simulated=True, console=console, interval=0)
    assert seen is gated
    out.write(summary(gated, simulated=True) + "\n")  # as `rlpipe watch` prints it
    lines = out.getvalue().splitlines()
    assert lines[0] == "cluster and TPU are SIMULATED (local stack)"
    progress = [line for line in lines if " run rwatched0001: " in line]
    assert len(progress) == 2, progress
    assert "training; train attempt 1 running" in progress[0] and "run rwatched0001: gated" in progress[1]
    assert any(line.startswith("run rwatched0001: gated") for line in lines), "the summary on its own line"


# ------------------------------------------------------------------------- hints follow the failure


def _failed(run_id: str, failure: Failure, *attempts: Any, step: int | None = None) -> RunRecord:
    r = _record(run_id, "failed")
    r.failure = failure
    r.attempts = list(attempts)
    if step is not None:
        r.progress = {"step": step}
    return r


def test_a_permanent_failure_suggests_fixing_the_request_not_a_retry() -> None:
    """ "repository does not exist" fails the same way on every round: the summary said `retry`
    and "training resumes from its last checkpoint" for a run that never trained."""
    from rlpipe.cli.watch import summary

    gone = _failed(
        "rnorepo00001",
        Failure(tag="permanent", message="repository google/gemma-9 does not exist", stage="plan"),
    )
    text = summary(gone)
    assert "rlpipe retry" not in text and "resumes" not in text
    assert "a retry would fail the same way" in text and "--name NEW_ID" in text


def test_a_spent_preemption_budget_suggests_retry_resuming_from_the_step_reached() -> None:
    from rlpipe.cli.watch import summary
    from rlpipe.core.runs.record import Attempt

    spent = Attempt(
        stage="train",
        attempt=6,
        workload="w",
        launched_at="2026-12-05T10:00:00.000000Z",
        phase="failed",
        failure_class="permanent",
        budget_exhausted="preempted",
    )
    text = summary(
        _failed(
            "rspent000001",
            Failure(
                tag="permanent", message="preempted budget of 5 exhausted for train", stage="train", attempt=6
            ),
            spent,
            step=70,
        )
    )
    assert 'rlpipe retry rspent000001 --reason "…"' in text
    assert "newest committed checkpoint (it had reached step 70)" in text


def test_a_cancelled_run_before_training_says_it_starts_from_the_beginning() -> None:
    from rlpipe.cli.watch import summary

    cancelled = _record("rcancel00001", "cancelled")
    cancelled.failure = Failure(tag="cancelled", message="cancelled by rlpipe cancel", stage="convert")
    text = summary(cancelled)
    assert "rlpipe retry rcancel00001" in text and "no training had started" in text


@pytest.mark.parametrize(
    ("committed", "says"),
    [
        (30, "resumes from its newest committed checkpoint, step 30 (the head had reached step 43)"),
        (
            0,
            "no checkpoint was committed, so training starts from the beginning (the head had reached step 43)",
        ),
    ],
)
def test_a_cancelled_run_read_to_its_heads_end_names_the_checkpoint_the_retry_uses(
    committed: int, says: str
) -> None:
    """The hint said "from its newest committed checkpoint (it had reached step 36)" and the retry
    resumed from step 50: once a cancel read the head to its end, the hint names the step the
    retry resumes from, or that nothing was committed."""
    from rlpipe.cli.watch import summary
    from rlpipe.core.runs.record import Attempt

    cancelled = _record("rcancel00002", "cancelled")
    cancelled.failure = Failure(tag="cancelled", message="cancelled by rlpipe cancel", stage="train")
    cancelled.progress = {"step": 43}
    cancelled.attempts = [
        Attempt(
            stage="train",
            attempt=1,
            workload="rcancel00002-train-a1",
            launched_at="2026-12-05T10:00:00.000000Z",
            phase="cancelled",
            committed_step=committed,
        )
    ]
    text = summary(cancelled)
    assert "rlpipe retry rcancel00002" in text and says in text, text


def test_the_demo_names_no_link_to_a_hub_that_stops_with_it() -> None:
    from rlpipe.cli.watch import summary
    from rlpipe.core.runs.record import Attempt

    published = _record("rpublish0001", "succeeded")
    published.request["publish"] = {"repo": "me/model", "branch": "main"}
    published.attempts = [
        Attempt(
            stage="publish",
            attempt=1,
            workload="w",
            launched_at="2026-12-05T10:00:00.000000Z",
            phase="succeeded",
        )
    ]
    assert (
        "http" not in summary(published, simulated=True, hub_stops=True).split("published")[1].splitlines()[0]
    )
    assert "stops with this demo" in summary(published, simulated=True, hub_stops=True)


# ------------------------------------------------------------------------- a retry is not a failure


def test_a_preempted_attempt_in_backoff_reads_as_retrying_with_class_budget_and_delay() -> None:
    """Workflows waits out its backoff (min(initial × multiplier^k, max): 30 s, then 60 s with the
    preset's 30 s × 2) before launching attempt 2; the view said `train failed` meanwhile."""
    from datetime import UTC, datetime

    from rlpipe.cli.watch import progress_line, render_view
    from rlpipe.core.runs.record import Attempt

    r = _record("rbackoff0001", "training")
    r.stage, r.attempt = "train", 2
    failed_at = "2026-12-05T10:00:00.000000Z"

    def attempt(n: int, cls: str) -> Attempt:
        return Attempt(
            stage="train",
            attempt=n,
            workload="w",
            launched_at="2026-12-05T09:00:00.000000Z",
            finished_at=failed_at,
            phase="failed",
            failure_class=cls,
        )

    r.attempts = [attempt(1, "preempted")]
    key, line = progress_line(r, now=datetime(2026, 12, 5, 10, 0, 10, tzinfo=UTC))
    assert key[-1] == "retrying"
    assert "retrying train (preempted, 1 of 5 allowed): attempt 2 starts in about 20 s" in line
    console = Console(file=io.StringIO(), force_terminal=False, width=200)
    console.print(render_view(r))
    view = console.file.getvalue()  # type: ignore[attr-defined]
    assert "retrying train (preempted" in view and " failed " not in view

    r.attempts = [attempt(1, "preempted"), attempt(2, "preempted")]  # the second retry waits 60 s
    assert (
        "attempt 3 starts in about 50 s"
        in progress_line(r, now=datetime(2026, 12, 5, 10, 0, 10, tzinfo=UTC))[1]
    )

    r.attempts = [attempt(1, "permanent")]  # no retry follows a permanent failure
    assert "retrying" not in progress_line(r)[1] and progress_line(r)[0][-1] == "failed"
