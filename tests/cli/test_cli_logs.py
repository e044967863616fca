"""`rlpipe logs` on the local stack, as a user runs it: a real subprocess with the stack's env.

One run whose training is held at a step (the simulator's ``hold`` fault) so its head is there to be
read: the log while it trains, then ``--follow``, released only once the follower polls, to the
head's end (its exit printed): the order of events is the test's, whatever the machine's speed; after the run ended
and its workloads were cleaned up, the same log from the stack's Cloud Logging. A missing run and a
missing attempt exit 3, naming what exists. And a preempted run, as ``make demo SCENARIO=preempt``
plays it: every evaluation attempt 1 printed is recorded, and its log is read after the fact.
docs/logs.md.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rlpipe.cli import runs
from rlpipe.control.adapters import workload_logs
from rlpipe.core import identity
from tests.conftest import ROOT
from tests.e2e.test_e2e import Local, faults, local  # noqa: F401
from tests.harness.patience import ceiling, wait_until

pytestmark = pytest.mark.slow


def _argv(local: Local, tmp: Path, *args: str) -> dict[str, Any]:
    entry = ["rlpipe.cli.main", "logs"]
    # The stack's endpoints from its env, not from a .rlpipe/local of the checkout (cwd: tmp).
    env = {**os.environ, **local.state.env, "PYTHONPATH": str(ROOT / "shared")}
    return {"args": [sys.executable, "-m", *entry, *args], "cwd": tmp, "env": env, "text": True}


def rlpipe_logs(local: Local, tmp: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        **_argv(local, tmp, *args), capture_output=True, check=False, timeout=ceiling(timeout)
    )


def test_logs_read_the_training_head_while_it_runs_and_follow_it_to_its_end(
    local: Local, faults: Any, tmp_path: Path
) -> None:
    # Export never starts (a stall), so the run stays up with the training head's pod ended but
    # there, until it is cancelled: then its workloads are deleted. Training pauses after step 20
    # until the test releases it, once the follower polls: a follow that came after the head's end
    # would read a log that already ended, and no length of training made that impossible under load.
    run_id = identity.run_id_for(identity.key_for_request_id(request_id := f"follow-{uuid.uuid4().hex[:8]}"))
    faults(
        ["export:stall", {"stage": "train", "attempt": 1, "fault": "hold@20", "run": run_id}], timing="demo"
    )
    assert local.submit(local.request(request_id=request_id, training={"num_batches": 60})) == run_id
    local.wait(run_id, expected=30, until=lambda r: r.stage == "train" and r.attempts[-1].phase == "running")
    workload = f"{run_id}-train-a1"
    head = re.compile(
        rf"kubectl logs -n rlpipe {workload}-pathways-head-\S+ -c workload-container --timestamps"
    )

    # Following from the start: it waits for the head to run, then polls until it ends.
    follow = subprocess.Popen(
        **_argv(local, tmp_path, run_id, "--stage", "train", "--follow"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    said: dict[str, list[str]] = {"out": [], "err": []}
    readers = [
        threading.Thread(target=lambda s=stream, k=key: said[k].extend(iter(s.readline, "")), daemon=True)
        for stream, key in ((follow.stdout, "out"), (follow.stderr, "err"))
    ]
    for reader in readers:
        reader.start()
    seen: dict[str, subprocess.CompletedProcess[str]] = {}

    def started() -> bool:
        seen["done"] = done = rlpipe_logs(local, tmp_path, run_id)  # default: the current stage, train
        return done.returncode == 0 and "Starting RL training" in done.stdout

    wait_until(started, 30, what="train_rl's first lines read back by `rlpipe logs`")
    done = seen["done"]
    assert head.match(done.stderr.splitlines()[0]), done.stderr
    first = done.stdout.splitlines()[0]
    assert re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z ", first), "kubectl's --timestamps lines"

    try:
        wait_until(
            lambda: any("then every 2 s" in line for line in said["err"]),
            30,
            what="the follower polling the held head",
        )
        local.stack.release(run_id)  # the head trains on to its end
        follow.wait(timeout=ceiling(60))
    finally:
        follow.kill()
    for reader in readers:
        reader.join(timeout=ceiling(10))
    out, err = "".join(said["out"]), "".join(said["err"])
    followed = subprocess.CompletedProcess(follow.args, follow.returncode, out, err)
    assert followed.returncode == 0, followed.stderr
    assert "Starting RL training" in out and "RL Training Completed Successfully!" in out, out[-2500:] + err
    assert out.index("Starting RL training") < out.index("RL Training Completed Successfully!")
    assert "Post RL Training" in out
    texts = [line.split(" ", 1)[1] for line in out.splitlines()]
    steps = [t for t in texts if "Train step" in t]
    assert len(steps) == len(set(steps)), "a follow never prints a line twice"
    assert head.match(followed.stderr.splitlines()[0]), followed.stderr
    assert re.search(r"then every 2 s: kubectl logs .* --since-time=\d{4}-\S+Z", followed.stderr), (
        followed.stderr
    )
    assert re.search(r"ended \(Succeeded\): container workload-container exited 0", followed.stderr), (
        followed.stderr
    )

    # A container no pod has: the error names those that exist.
    proxy = rlpipe_logs(local, tmp_path, run_id, "--stage", "train", "-c", "no-such-container")
    assert proxy.returncode == 3 and "its containers: " in proxy.stderr, proxy.stderr
    assert "pathways-proxy" in proxy.stderr and "workload-container" in proxy.stderr

    runs.cancel(local.settings, local.ledger, run_id)
    record = local.wait(run_id, expected=30)
    local.assert_consistent(record, "cancelled")  # its workloads are deleted: no pod to read
    gone = rlpipe_logs(local, tmp_path, run_id, "--stage", "train")
    assert gone.returncode == 0, gone.stderr
    assert f"the program's pods of {workload} (train attempt 1) have ended and are gone" in gone.stderr
    assert "gcloud logging read" in gone.stderr and "the local stack's Cloud Logging" in gone.stderr
    kept = gone.stdout.splitlines()
    assert kept == [line.split(" ", 1)[1] for line in out.splitlines()], "the lines followed, as logged"

    missing = rlpipe_logs(local, tmp_path, "rnosuchrun00")
    assert missing.returncode == 3 and missing.stderr.strip() == "no run rnosuchrun00", missing.stderr
    attempt = rlpipe_logs(local, tmp_path, run_id, "--stage", "convert", "--attempt", "9")
    assert attempt.returncode == 3, attempt.stderr
    numbers = ", ".join(str(a.attempt) for a in record.attempts if a.stage == "convert")
    assert f"run {run_id} has no convert attempt 9; its convert attempts: {numbers}" in attempt.stderr


def test_the_cloud_logging_filter_takes_one_workloads_pods_and_container() -> None:
    query = workload_logs.workload_filter(
        "rlpipe", "rabc-train-a1", "workload-container", "2026-01-01T00:00:00Z"
    )
    assert 'resource.labels.pod_name=~"^rabc-train-a1-"' in query, "attempt 10's pods do not match"
    assert 'resource.labels.container_name="workload-container"' in query
    assert 'timestamp>="2026-01-01T00:00:00Z"' in query
    with pytest.raises(ValueError):
        workload_logs.workload_filter("rlpipe", 'x" OR "', "workload-container", None)
    pages: Iterator[dict[str, Any]] = iter(
        [{"entries": [{"textPayload": "a\nb"}], "nextPageToken": "t"}, {"entries": [{"textPayload": "c"}]}]
    )
    bodies: list[dict[str, Any]] = []

    def post(url: str, body: dict[str, Any]) -> dict[str, Any]:
        bodies.append(body)
        return next(pages)

    assert workload_logs.read_lines(post, "p", query) == (["a", "b", "c"], False)
    assert bodies[1]["pageToken"] == "t" and bodies[0]["orderBy"] == "timestamp asc"


def test_a_preempted_attempts_evaluations_are_all_recorded_and_its_log_read_after_the_fact(
    local: Local, faults: Any, tmp_path: Path
) -> None:
    """``make demo SCENARIO=preempt``: a worker preempted at step 70, attempt 2 resumes. The
    evaluations attempt 1 printed (every 10 steps, each during the step after it) are all in the
    ledger, whichever status read came last before its head's pod was deleted."""
    from rlpipe.core import train_log

    faults(["train:1:preempt@70"], timing="demo")
    run_id = local.submit(local.request(training={"num_batches": 120}))
    record = local.wait(run_id, expected=30)
    local.assert_consistent(record, "succeeded")
    assert [(a.attempt, a.failure_class) for a in record.attempts if a.stage == "train"] == [
        (1, "preempted"),
        (2, None),
    ]
    first = [e["step"] for e in record.results["intermediate"] if e["attempt"] == 1]
    assert first == [10, 20, 30, 40, 50, 60], record.results["intermediate"]

    read = rlpipe_logs(local, tmp_path, run_id, "--stage", "train", "--attempt", "1")
    assert read.returncode == 0, read.stderr
    printed = [e.step for e in train_log.parse(read.stdout).intermediate]
    assert printed == first, "what the ledger holds is what the head printed"
    assert f"^{run_id}-train-a1-pathways-head-" in read.stderr, "the head's program, by its role"
