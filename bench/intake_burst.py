"""5. Intake under a duplicate burst: N concurrent deliveries of one storage event.

Eventarc delivers at least once, and a retry storm delivers the same event many times at once.
The real ``intake_object`` runs as a functions-framework server (a real process, as in
``tests/control/lifecycle/test_intake.py``) against fake-gcs-server (real generation preconditions) and a recording
Executions gRPC server (the real ``ExecutionsClient`` talks to it). For N = 1 (the baseline), 10,
100 and 1000, N client threads wait on a barrier and POST the same binary CloudEvent at once.

* time to quiesce: barrier release → the last answer (each delivery is synchronous, so the last
  answer is the end of the work; the GCS request log is also checked to stay silent afterwards);
* runs made (must be 1) and executions started (must be 1);
* GCS requests: fake-gcs-server, started here with ``-log-level info``, logs one line per HTTP
  request; the lines written between the burst's start and its end are counted and classified.
  The least invasive counter: nothing is injected into the function process.

A warm-up delivery of another request comes first, so no row pays the first-call imports.
"""

from __future__ import annotations

import argparse
import json
import re
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bench.common import CACHE, Section, say, secs, table

_LINE = re.compile(r'\\"(?P<method>[A-Z]+) (?P<path>\S+) HTTP/[0-9.]+\\" (?P<status>\d{3})')


def classify(method: str, path: str) -> str:
    """One GCS JSON API request → what it is for (object metadata, download, upload, list)."""
    if path.startswith("/upload/"):
        return "upload"
    if path.startswith("/download/") or "alt=media" in path:
        return "download"
    if method == "GET" and re.match(r"^/storage/v1/b/[^/]+/o/[^?]+", path):
        return "metadata"
    if method == "GET" and re.match(r"^/storage/v1/b/[^/]+/o(\?|$)", path):
        return "list"
    return f"other {method}"


def gcs_requests(log: Path, start: int, end: int | None = None) -> list[tuple[str, str, int]]:
    """(method, kind, status) of every request line logged between two byte offsets."""
    with log.open("rb") as fh:
        fh.seek(start)
        text = fh.read(None if end is None else end - start).decode(errors="replace")
    out = []
    for match in _LINE.finditer(text):
        out.append((match["method"], classify(match["method"], match["path"]), int(match["status"])))
    return out


def _intake_outcomes(log_text: str) -> Counter[str]:
    """What each delivery did, from the function's JSON log lines."""
    outcomes: Counter[str] = Counter()
    for line in log_text.splitlines():
        if not line.startswith("{"):
            continue
        try:
            message = json.loads(line).get("message", "")
        except ValueError:
            continue
        if message in ("claimed run", "execution started") or message.startswith("duplicate delivery"):
            outcomes[message] += 1
    return outcomes


def _burst(url: str, event: Any, n: int) -> tuple[float, list[int]]:
    """N threads POST the same event at once; (seconds from release to the last answer, statuses)."""
    import requests
    from cloudevents.conversion import to_binary

    headers, body = to_binary(event)
    barrier = threading.Barrier(n + 1)
    statuses: list[int] = []
    lock = threading.Lock()

    def deliver() -> None:
        barrier.wait()
        try:
            status = requests.post(url, headers=headers, data=body, timeout=300).status_code
        except requests.RequestException:
            status = 0
        with lock:
            statuses.append(status)

    threads = [threading.Thread(target=deliver, daemon=True) for _ in range(n)]
    for thread in threads:
        thread.start()
    barrier.wait()
    released = time.perf_counter()
    for thread in threads:
        thread.join()
    return time.perf_counter() - released, statuses


def run(args: argparse.Namespace) -> Section:
    import os

    from rlpipe.control.adapters.blobstore import BlobStore, make_client
    from rlpipe.control.lifecycle.ledger import Ledger
    from rlpipe.core.identity import key_for_object, run_id_for
    from rlpipe.local.gcs import binary_path
    from rlpipe.local.ports import free_port
    from rlpipe.local.procs import Child, http_ready
    from tests.harness.executions import RecordingExecutions
    from tests.harness.functions import FunctionServer, gcs_event

    started = time.monotonic()
    workdir = CACHE / "intake-burst"
    workdir.mkdir(parents=True, exist_ok=True)
    log = workdir / "fake-gcs-server.log"
    log.unlink(missing_ok=True)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    gcs = Child(
        "fake-gcs-server",
        [
            str(binary_path()),
            "-scheme",
            "http",
            "-host",
            "127.0.0.1",
            "-port",
            str(port),
            "-backend",
            "memory",
            "-external-url",
            url,
            "-log-level",
            "info",
        ],
        log_path=log,
    ).start()
    executions = RecordingExecutions().start()
    saved = os.environ.get("STORAGE_EMULATOR_HOST")
    function: Any = None
    rows_data: list[dict[str, Any]] = []
    try:
        gcs.wait_ready(http_ready(f"{url}/storage/v1/b"), timeout=30)
        os.environ["STORAGE_EMULATOR_HOST"] = url
        client = make_client("rlpipe-bench")
        requests_bucket = client.create_bucket("bench-requests").name
        artifacts_bucket = client.create_bucket("bench-artifacts").name
        state_bucket = client.create_bucket("bench-state").name
        env = {
            "STORAGE_EMULATOR_HOST": url,
            "RLPIPE_PROJECT": "rlpipe-bench",
            "RLPIPE_REQUESTS_BUCKET": requests_bucket,
            "RLPIPE_ARTIFACTS_BUCKET": artifacts_bucket,
            "RLPIPE_STATE_BUCKET": state_bucket,
            "RLPIPE_WORKFLOWS_ENDPOINT": executions.target,
        }
        for old in workdir.glob("intake_object-*.log"):
            old.unlink()
        function = FunctionServer("intake_object", "cloudevent", env, workdir).start()
        ledger = Ledger(BlobStore(client, state_bucket))
        threads = os.environ.get("THREADS") or f"{(os.cpu_count() or 1) * 4} (functions-framework default)"
        # A warm-up delivery of another request: no row below pays the function's first-call imports.
        warm = client.bucket(requests_bucket).blob("requests/warm-up.json")
        warm.upload_from_string(json.dumps({"model": "gemma4-26b", "hf_repo": "google/gemma-4-26b-a4b-it"}))
        _burst(function.url, gcs_event(requests_bucket, warm.name, warm.generation, warm.size or 0), 1)
        for n in (1, *args.burst_sizes):
            doc = {"model": "gemma4-26b", "hf_repo": "google/gemma-4-26b-a4b-it", "labels": {"burst": str(n)}}
            data = json.dumps(doc).encode()
            name = f"requests/burst-{n}.json"
            blob = client.bucket(requests_bucket).blob(name)
            blob.upload_from_string(data)
            run_id = run_id_for(key_for_object(requests_bucket, name, blob.generation))
            event = gcs_event(requests_bucket, name, blob.generation, len(data), event_id=f"burst-{n}")
            creates_before = len(executions.creates())
            runs_before = set(ledger.list_run_ids())
            function_log_start = function.log_path.stat().st_size if function.log_path.exists() else 0
            time.sleep(0.2)  # let the upload's own log line land before the mark
            mark = log.stat().st_size
            say(f"intake burst: {n} concurrent deliveries")
            quiesce, statuses = _burst(function.url, event, n)
            end_mark = log.stat().st_size
            time.sleep(1.0)
            late = len(gcs_requests(log, end_mark))
            requests_made = gcs_requests(log, mark, end_mark)
            new_runs = sorted(set(ledger.list_run_ids()) - runs_before)
            history = [e["event"] for e in ledger.history(run_id)] if new_runs else []
            with function.log_path.open("rb") as fh:
                fh.seek(function_log_start)
                outcomes = _intake_outcomes(fh.read().decode(errors="replace"))
            rows_data.append(
                {
                    "n": n,
                    "quiesce_s": quiesce,
                    "statuses": dict(Counter(statuses)),
                    "runs": len(new_runs),
                    "run_is_expected": new_runs == [run_id],
                    "executions": len(executions.creates()) - creates_before,
                    "accepted_events": history.count("accepted"),
                    "gcs_requests": len(requests_made),
                    "gcs_by_kind": dict(Counter(f"{m} {k} {s}" for m, k, s in requests_made)),
                    "gcs_late": late,
                    "outcomes": dict(outcomes),
                }
            )
    finally:
        if function is not None:
            function.stop()
        executions.stop()
        gcs.stop()
        if saved is None:
            os.environ.pop("STORAGE_EMULATOR_HOST", None)
        else:
            os.environ["STORAGE_EMULATOR_HOST"] = saved

    base = rows_data[0]
    rows = []
    for r in rows_data:
        per_delivery = r["gcs_requests"] / r["n"]
        rows.append(
            [
                f"{r['n']:,}" + (" (**baseline**)" if r is base else ""),
                secs(r["quiesce_s"]),
                f"×{r['quiesce_s'] / base['quiesce_s']:.3g}"
                + (f" ({secs(r['quiesce_s'] / r['n'])}/delivery)" if r["n"] > 1 else ""),
                ", ".join(f"{k}×{v}" for k, v in sorted(r["statuses"].items())),
                r["runs"],
                r["executions"],
                r["accepted_events"],
                f"{r['gcs_requests']:,}",
                f"{per_delivery:.2f} (×{per_delivery / base['gcs_requests']:.2f})",
                r["gcs_late"],
            ]
        )
    kinds = sorted({k for r in rows_data for k in r["gcs_by_kind"]})
    kind_rows = [[k, *[f"{r['gcs_by_kind'].get(k, 0):,}" for r in rows_data]] for k in kinds]
    outcome_names = sorted({k for r in rows_data for k in r["outcomes"]})
    outcome_rows = [[k, *[f"{r['outcomes'].get(k, 0):,}" for r in rows_data]] for k in outcome_names]
    ok = all(
        r["runs"] == 1
        and r["run_is_expected"]
        and r["executions"] == 1
        and r["accepted_events"] == 1
        and set(r["statuses"]) == {200}
        for r in rows_data
    )
    body = (
        f"One `intake_object` functions-framework process (gunicorn, 1 worker, THREADS={threads}), fake-gcs-server "
        "(in memory), a recording Executions server; all on loopback. Baseline: a single delivery.\n\n"
        + table(
            [
                "deliveries",
                "time to quiesce",
                "vs one delivery",
                "HTTP answers",
                "runs",
                "executions",
                "`accepted` events",
                "GCS requests",
                "per delivery (vs one delivery)",
                "GCS requests after the last answer",
            ],
            rows,
        )
        + "\n\nGCS requests by kind (method, kind, status):\n\n"
        + table(["request", *[f"N={r['n']:,}" for r in rows_data]], kind_rows)
        + "\n\nWhat the deliveries did (the function's log):\n\n"
        + table(["outcome", *[f"N={r['n']:,}" for r in rows_data]], outcome_rows)
        + f"\n\nExactly one run, one execution and one `accepted` event at every N: **{ok}**."
    )
    last = rows_data[-1]
    headline = [
        (
            f"intake: {last['n']:,} concurrent duplicate deliveries",
            f"{secs(last['quiesce_s'])} to quiesce, "
            f"{last['runs']} run, {last['executions']} execution, {last['gcs_requests']:,} GCS requests",
            f"one delivery: {secs(base['quiesce_s'])}, {base['gcs_requests']} GCS requests "
            f"(×{last['gcs_requests'] / last['n'] / base['gcs_requests']:.2f} per delivery)",
        ),
    ]
    return Section(
        "intake",
        "5. Intake under a duplicate burst",
        body,
        headline,
        data={"levels": rows_data},
        seconds=time.monotonic() - started,
        ok=ok,
    )


if __name__ == "__main__":
    print(run(argparse.Namespace(burst_sizes=[10, 100])).body)
