"""4. Control-plane latency on the local stack, with every simulated duration set to zero.

With ``timing="zero"`` the simulated workloads take no time, so what is left between two stages is
the pipeline itself: notifications, functions, the Workflows engine, the Kubernetes API. Measured
per run, every timestamp on this machine's one clock:

* *request → convert created*: the request object's ``timeCreated`` (fake-gcs-server, µs) to the
  moment the convert Job appears on a watch of the Kubernetes API double (``creationTimestamp``
  has one-second resolution, as in Kubernetes, so the watch is used; its own delay is
  milliseconds). Decomposed with two more clocks: the GCS notification reaching a second
  subscription on the same Pub/Sub topic (the emulated Eventarc hop) and the ledger's
  ``accepted`` history object (the claim).
* *commit → next stage created*: ``0/commit_success.txt``'s ``timeCreated`` to the training
  JobSet's appearance (and the final checkpoint's commit to the export Job's), with events on;
  then the same with the convert stage's events dropped (``drop-events:convert``), where only the
  workflow's poll can notice the commit.
* *the workflow's wait* for convert, from the ledger's history: ``launched`` (the end of the launch
  call, when the workflow starts waiting) to the convert ``succeeded`` phase event (written by the
  status check that saw the stage done). With events dropped it should equal the poll interval,
  and is reported as a ratio to it; commit → next stage is shorter by wherever the commit landed
  in that wait.

The stack runs with ``poll_seconds`` = ``--poll-seconds``; runs with events are sequential, the
dropped-event runs ``--drop-concurrency`` at a time (each mostly waits for its poll).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

from bench.common import BenchStack, Section, say, secs, summary, table

NAMESPACE = "rlpipe"
WATCHED = {
    "jobs": "/apis/batch/v1/namespaces/{ns}/jobs",
    "jobsets": "/apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}/jobsets",
}


class WorkloadWatch:
    """Wall time at which each top-level workload first appears on a watch of the API double."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.seen: dict[str, float] = {}
        self.created: dict[str, str] = {}  # name → metadata.creationTimestamp
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._run, args=(path,), daemon=True, name=f"watch-{r}")
            for r, path in WATCHED.items()
        ]

    def start(self) -> WorkloadWatch:
        for thread in self._threads:
            thread.start()
        return self

    def _run(self, path: str) -> None:
        import requests

        url = self.base_url + path.format(ns=NAMESPACE)
        version = ""
        while not self._stop.is_set():
            try:
                params = {
                    "watch": "true",
                    "timeoutSeconds": "30",
                    **({"resourceVersion": version} if version else {}),
                }
                with requests.get(url, params=params, stream=True, timeout=(5, 60)) as response:
                    for line in response.iter_lines():
                        now = time.time()
                        if not line:
                            continue
                        event = json.loads(line)
                        obj = event.get("object") or {}
                        meta = obj.get("metadata") or {}
                        version = meta.get("resourceVersion", version)
                        if event.get("type") == "ADDED" and not meta.get("ownerReferences"):
                            self.seen.setdefault(meta.get("name", ""), now)
                            self.created.setdefault(meta.get("name", ""), meta.get("creationTimestamp", ""))
                        if self._stop.is_set():
                            return
            except Exception:  # the stack is stopping, or a watch ended: reconnect
                if self._stop.wait(0.2):
                    return

    def wait_for(self, name: str, timeout: float = 10.0) -> float | None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if name in self.seen:
                return self.seen[name]
            time.sleep(0.01)
        return None

    def stop(self) -> None:
        self._stop.set()


class NotificationProbe:
    """A second subscription on the stack's GCS notification topic: when each object's
    notification leaves the Pub/Sub emulator (what Eventarc's share of the latency is, locally)."""

    def __init__(self, project: str, topic: str) -> None:
        from google.cloud import pubsub_v1

        self.received: dict[str, float] = {}
        self.subscriber = pubsub_v1.SubscriberClient()
        path = self.subscriber.subscription_path(project, "bench-latency-probe")
        with contextlib.suppress(Exception):
            self.subscriber.create_subscription(name=path, topic=f"projects/{project}/topics/{topic}")
        self.future = self.subscriber.subscribe(path, callback=self._on_message)

    def _on_message(self, message: Any) -> None:
        now = time.time()
        attrs = dict(message.attributes)
        self.received.setdefault(f"{attrs.get('bucketId')}/{attrs.get('objectId')}", now)
        message.ack()

    def stop(self) -> None:
        self.future.cancel()


def _history_time(value: str) -> float | None:
    with contextlib.suppress(ValueError):
        return datetime.strptime(value, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC).timestamp()
    return None


def _ts(value: str) -> float | None:
    with contextlib.suppress(ValueError):
        return datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()
    return None


def _one_run(
    s: BenchStack, watch: WorkloadWatch, probe: NotificationProbe | None, variant: str
) -> dict[str, Any]:
    request_id = f"lat-{variant}-{time.time_ns() % 10**10}"
    run_id, name = s.submit(s.request(request_id))
    out: dict[str, Any] = {"run_id": run_id, "variant": variant}
    out["request"] = s.object_created(s.settings.requests_bucket, name)
    record = s.wait([run_id], timeout=90, interval=0.05)[run_id]
    out["state"] = record.state if record else None
    if record is None or record.state != "succeeded":
        return out
    for stage in ("convert", "train", "export"):
        out[f"{stage}_seen"] = watch.wait_for(f"{run_id}-{stage}-a1", timeout=5)
    out["convert_creation_timestamp"] = watch.created.get(f"{run_id}-convert-a1")
    key = record.lineage.conversion_key
    out["convert_commit"] = s.object_created(
        s.settings.artifacts_bucket, f"cache/maxtext/{key}/{run_id}-a1/0/commit_success.txt"
    )
    final = record.lineage.final_step
    out["train_commit"] = s.object_created(
        s.settings.artifacts_bucket, f"runs/{run_id}/trained/rl/checkpoints/actor/{final}/commit_success.txt"
    )
    accepted = next(
        (
            b
            for b in s.client.list_blobs(s.settings.state_bucket, prefix=f"runs/{run_id}/events/")
            if b.name.endswith("-accepted.json")
        ),
        None,
    )
    out["claimed"] = accepted.time_created.timestamp() if accepted is not None else None
    # The workflow's wait, from the ledger's history (times written by the stage function, µs):
    # `launched` ends the launch call, right before the workflow starts waiting; the convert
    # `succeeded` phase event is written by the status check that noticed the commit.
    for event in s.ledger.history(run_id):
        if event.get("stage") != "convert":
            continue
        if event.get("event") == "launched":
            out["convert_launched"] = _history_time(event.get("time", ""))
        elif event.get("event") == "succeeded" and event.get("phase") == "succeeded":
            out["convert_noticed"] = _history_time(event.get("time", ""))
    if probe is not None:
        out["notified"] = probe.received.get(f"{s.settings.requests_bucket}/{name}")
    return out


def _spans(runs: list[dict[str, Any]], end: str, start: str) -> list[float]:
    return [r[end] - r[start] for r in runs if r.get(end) is not None and r.get(start) is not None]


def run(args: argparse.Namespace) -> Section:
    started = time.monotonic()
    poll = args.poll_seconds
    results: list[dict[str, Any]] = []
    with BenchStack("latency", timing="zero", poll_seconds=poll) as s:
        watch = WorkloadWatch(s.state.endpoints["kubernetes-api (simulated cluster)"]).start()
        probe = None
        if s.state.events == "pubsub":
            probe = NotificationProbe(s.settings.project, s.stack.config.gcs_topic)
        try:
            say(f"latency: {args.latency_warmup} warm-up runs, then {args.latency_runs} runs with events")
            for _ in range(args.latency_warmup):
                _one_run(s, watch, probe, "warmup")
            for i in range(args.latency_runs):
                results.append(_one_run(s, watch, probe, "events"))
                if (i + 1) % 10 == 0:
                    say(f"latency: {i + 1}/{args.latency_runs} runs with events")
            s.stack.set_faults([{"fault": "drop-events:convert"}])
            say(
                f"latency: {args.latency_runs} runs with drop-events:convert, {args.drop_concurrency} at a time"
            )
            with ThreadPoolExecutor(args.drop_concurrency) as pool:
                results += list(
                    pool.map(lambda _: _one_run(s, watch, probe, "dropped"), range(args.latency_runs))
                )
            s.stack.set_faults([])
        finally:
            watch.stop()
            if probe is not None:
                probe.stop()
        events_mode = s.state.events_note
    on = [r for r in results if r["variant"] == "events" and r.get("state") == "succeeded"]
    dropped = [r for r in results if r["variant"] == "dropped" and r.get("state") == "succeeded"]
    failed = [r for r in results if r.get("state") != "succeeded"]

    req_convert = summary(_spans(on, "convert_seen", "request"))
    notified = summary(_spans(on, "notified", "request"))
    claimed = summary(_spans(on, "claimed", "request"))
    claim_to_convert = summary(_spans(on, "convert_seen", "claimed"))
    commit_train_on = summary(_spans(on, "train_seen", "convert_commit"))
    commit_export_on = summary(_spans(on, "export_seen", "train_commit"))
    commit_train_drop = summary(_spans(dropped, "train_seen", "convert_commit"))
    wait_on = summary(_spans(on, "convert_noticed", "convert_launched"))
    wait_drop = summary(_spans(dropped, "convert_noticed", "convert_launched"))
    phase_drop = summary(_spans(dropped, "convert_commit", "convert_launched"))
    # The watch must agree with the server's own creationTimestamp, which is truncated to the
    # second. Checked by order, never by how fast the machine is: the Job was created after its
    # request was written and before the watch saw it, so its timestamp lies between the request's
    # time truncated likewise and the sighting (0.01 s for float rounding). Every run that
    # succeeded must have all three, so an empty or partial list cannot pass.
    stamps = [
        (r["request"], ts, r[seen])
        for r in on + dropped
        for seen, created in (("convert_seen", "convert_creation_timestamp"),)
        if r.get(seen) and r.get("request") and (ts := _ts(r.get(created) or ""))
    ]
    skews = [seen - ts for _, ts, seen in stamps]
    watch_ok = len(stamps) == len(on + dropped) > 0 and all(
        math.floor(request) <= ts <= seen + 0.01 for request, ts, seen in stamps
    )

    def row(label: str, st: dict[str, float], base: str) -> list[str]:
        return [label, str(st["n"]), secs(st["p50"]), secs(st["p95"]), secs(st["max"]), base]

    def share(part: dict[str, float]) -> str:
        return f"{part['p50'] / req_convert['p50']:.0%} of the p50 above"

    rows = [
        row(
            "request object written → convert Job created",
            req_convert,
            f"poll interval {poll} s: p50 ×{req_convert['p50'] / poll:.3f}",
        ),
        row(
            "  … object written → its notification leaves the Pub/Sub emulator (emulated Eventarc hop)",
            notified,
            share(notified),
        ),
        row("  … object written → run claimed (ledger `accepted`)", claimed, share(claimed)),
        row(
            "  … run claimed → convert Job created (execution start, plan, launch)",
            claim_to_convert,
            share(claim_to_convert),
        ),
        row(
            "`0/commit_success.txt` written → train JobSet created, **events on**",
            commit_train_on,
            f"events dropped (below): ×{commit_train_on['p50'] / commit_train_drop['p50']:.3f}",
        ),
        row(
            "final `commit_success.txt` written → export Job created, events on",
            commit_export_on,
            f"poll interval: ×{commit_export_on['p50'] / poll:.3f}",
        ),
        row(
            "`0/commit_success.txt` written → train JobSet created, **events dropped**",
            commit_train_drop,
            f"poll interval: ×{commit_train_drop['p50'] / poll:.3f} (p95 ×{commit_train_drop['p95'] / poll:.3f})",
        ),
        row(
            "the workflow's wait for convert, **events dropped**: launched → the status check that saw it done",
            wait_drop,
            f"**poll interval: ×{wait_drop['p50'] / poll:.3f}** (p95 ×{wait_drop['p95'] / poll:.3f})",
        ),
        row("the same wait, events on", wait_on, f"poll interval: ×{wait_on['p50'] / poll:.3f}"),
        row(
            "  (where the commit lands in that wait, events dropped: launched → `0/commit_success.txt`)",
            phase_drop,
            f"poll interval: ×{phase_drop['p50'] / poll:.3f}",
        ),
    ]
    body = (
        f'`timing="zero"`, `poll_seconds={poll}`, events: {events_mode}. {len(on)} runs with events '
        f"(sequential, after {args.latency_warmup} warm-up runs), {len(dropped)} with the convert stage's "
        f"events dropped (`drop-events:convert`, {args.drop_concurrency} at a time); {len(failed)} runs did not "
        "succeed. The workflow's wait is read from the ledger's history (`launched` and the convert `succeeded` "
        "phase event, both timed by the `stage` function).\n\n"
        + table(["span", "n", "p50", "p95", "max", "vs baseline"], rows)
        + "\n\nWith events, a stage boundary costs "
        f"{secs(commit_train_on['p50'])} (p50). Without them, the workflow's wait ends on its poll: "
        f"{secs(wait_drop['p50'])} after the launch, ×{wait_drop['p50'] / poll:.2f} the interval; the remaining "
        f"{secs(wait_drop['p50'] - poll)} is the status call that noticed it (Kubernetes status, the GCS listing, "
        "the conversion-cache publication and the ledger write whose timestamp ends the span). The commit → next stage span is shorter than one interval because even with zero "
        f"durations the simulated conversion writes its ~25 objects for {secs(phase_drop['p50'])} before the commit, "
        "so the commit lands that far into the wait; in production, where a stage runs for hours, the commit lands "
        "anywhere in the interval: a lost event costs up to one interval (300 s by default), half on average. "
        "Timestamp check: every Job's `creationTimestamp` (truncated to the second) lies between its "
        f"request's write (truncated likewise) and the watch's sighting: {watch_ok} (n={len(skews)}; "
        f"sighting − timestamp at most {max(skews, default=float('nan')):.3f} s)."
    )
    headline = [
        (
            "request → convert workload created (p50 / p95)",
            f"{secs(req_convert['p50'])} / {secs(req_convert['p95'])}",
            f"the emulated notification hop alone: {secs(notified['p50'])}",
        ),
        (
            "convert committed → train created, events on (p50 / p95)",
            f"{secs(commit_train_on['p50'])} / {secs(commit_train_on['p95'])}",
            f"events dropped: {secs(commit_train_drop['p50'])} (×{commit_train_drop['p50'] / poll:.2f} the {poll} s poll "
            "interval; the commit lands mid-wait)",
        ),
        (
            "workflow's wait when the convert events are dropped (p50)",
            secs(wait_drop["p50"]),
            f"×{wait_drop['p50'] / poll:.3f} the {poll} s poll interval",
        ),
    ]
    data = {
        "poll_seconds": poll,
        "runs": results,
        "summaries": {
            "request_to_convert": req_convert,
            "request_to_notified": notified,
            "request_to_claimed": claimed,
            "claimed_to_convert": claim_to_convert,
            "commit_to_train_events": commit_train_on,
            "commit_to_export_events": commit_export_on,
            "commit_to_train_dropped": commit_train_drop,
            "wait_events": wait_on,
            "wait_dropped": wait_drop,
            "commit_phase_dropped": phase_drop,
        },
        "watch_skews": skews,
    }
    ok = not failed and watch_ok and len(on) >= args.latency_runs and len(dropped) >= args.latency_runs
    return Section(
        "latency",
        "4. Control-plane latency (local stack, zero-duration stages)",
        body,
        headline,
        data=data,
        seconds=time.monotonic() - started,
        ok=ok,
    )


if __name__ == "__main__":
    print(run(argparse.Namespace(poll_seconds=2, latency_runs=5, latency_warmup=1, drop_concurrency=3)).body)
