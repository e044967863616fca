"""The head's log is read with a cursor, so no evaluation line is missed however fast the log
scrolls, every attempt's evaluations are kept with its number, and progress is the newest line's.

The cursor's rules are tested pure (cluster/log_cursor.py); the kubelet's log options on the API
double with the real kubernetes client (local/pod_logs.py); and the whole path through the stage
function's status, with a log flooded by debug lines between two polls.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from rlpipe.cluster.log_cursor import LogCursor, since_time, take_new
from rlpipe.local import pod_logs
from rlpipe.local.pod_logs import LogLine
from tests.control.stage.test_stage import NS, env, hub, kube  # noqa: F401

ABSL = "W1204 13:00:00.000000 1234 train_rl.py:785] "
FIELDS = "corr=3, total=8, accuracy=37.5%, partial_accuracy=40.0%, format_accuracy=90.0%, mean_reward={r}"


def _eval(step: int | None, reward: float) -> str:
    what = f"Intermediate Eval (step={step})" if step is not None else "Pre RL Training"
    return f"{ABSL}{what}: {FIELDS.format(r=reward)}"


def _train_step(step: int) -> str:
    return f"I1204 13:00:00.000000 1234 peft_trainer.py:1] Train step {step} training loss: 0.5  - training perplexity: 1.6"


# ---- the cursor, pure ----------------------------------------------------------------------------


def test_lines_are_taken_once_even_when_they_share_a_nanosecond() -> None:
    body = "".join(
        f"2026-12-04T13:00:0{s}.{ns}Z {text}\n"
        for s, ns, text in [(1, "5", "a"), (1, "5", "b"), (2, "123456789", "c"), (2, "123456789", "d")]
    )
    first, cursor = take_new(body[: body.index("d")], None, "pod-1", cut_short=True)
    assert first == ["a", "b", "c"], "a read cut short drops its partial last line"
    again, cursor = take_new(body, cursor, "pod-1", cut_short=False)
    assert again == ["d"], "the second line of that nanosecond, and nothing read before"
    assert cursor is not None and cursor.nanos % 1_000_000_000 == 123456789 and cursor.at_nanos == 2
    assert take_new(body, cursor, "pod-1", cut_short=False) == ([], cursor)
    fresh, other = take_new(body, cursor, "pod-2", cut_short=False)
    assert fresh == ["a", "b", "c", "d"] and other is not None and other.pod == "pod-2", (
        "a new pod: from its start"
    )


def test_the_next_read_starts_at_the_cursors_second_and_a_new_pod_from_its_start() -> None:
    nanos = int(datetime(2026, 12, 4, 13, 0, 5, tzinfo=UTC).timestamp()) * 1_000_000_000 + 999_999_999
    cursor = LogCursor("pod-1", nanos, 1)
    assert since_time(cursor, "pod-1") == "2026-12-04T13:00:05Z", "whole seconds: the API's precision"
    assert since_time(cursor, "pod-2") is None and since_time(None, "pod-1") is None
    assert LogCursor.from_json(cursor.to_json()) == cursor
    assert LogCursor.from_json({"pod": "x"}) is None and LogCursor.from_json("junk") is None


def test_the_kubelets_log_options_as_the_double_serves_them() -> None:
    now = datetime(2026, 12, 4, 13, 0, 0, tzinfo=UTC)
    lines = [LogLine(now - timedelta(seconds=s), f"line {s}") for s in (100, 10, 1)]
    stamped = pod_logs.render(lines, {"timestamps": "true"}, now).decode().splitlines()
    assert stamped[0] == "2026-12-04T12:58:20Z line 100", "RFC3339Nano: no fraction when it is zero"
    assert pod_logs.render(lines, {"sinceSeconds": "10"}, now) == b"line 10\nline 1\n"
    assert pod_logs.render(lines, {"sinceTime": "2026-12-04T12:59:50Z"}, now) == b"line 10\nline 1\n"
    assert pod_logs.render(lines, {"tailLines": "1"}, now) == b"line 1\n"
    assert pod_logs.render(lines, {"tailLines": "0"}, now) == b""
    assert pod_logs.render(lines, {"limitBytes": "5"}, now) == b"line "
    for bad in (
        {"sinceSeconds": "0"},
        {"tailLines": "-1"},
        {"limitBytes": "x"},
        {"sinceTime": "yesterday"},
        {"sinceSeconds": "5", "sinceTime": "2026-12-04T12:59:50Z"},
    ):
        with pytest.raises(pod_logs.BadLogOptions):
            pod_logs.render(lines, bad, now)


def test_the_double_refuses_a_text_plain_accept_on_pod_logs_as_the_real_api_server_does(
    kube: Any,
) -> None:
    """Found on the real plane: kube-apiserver v1.34 answers `Accept: text/plain` on pods/log with
    406 NotAcceptable, though it sends the log as text to a client that accepts JSON."""
    import requests

    kube.create(
        "pods",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "accept-probe", "namespace": NS},
            "spec": {"containers": [{"name": "c", "image": "i"}]},
        },
    )
    kube.append_pod_log("accept-probe", ["hello"], namespace=NS)
    url = f"{kube.url}/api/v1/namespaces/{NS}/pods/accept-probe/log"
    assert requests.get(url, headers={"Accept": "text/plain"}, timeout=10).status_code == 406
    answer = requests.get(url, headers={"Accept": "application/json"}, timeout=10)
    assert answer.status_code == 200 and answer.text == "hello\n"
    kube.delete("pods", "accept-probe", namespace=NS)


# ---- through the stage ---------------------------------------------------------------------------


def _running_head(env: dict[str, Any], run_id: str, attempt: int) -> str:
    """The train JobSet of ``attempt`` running, with its head pod (as the simulator would make)."""
    jobset = f"{run_id}-train-a{attempt}"
    env["kube"].patch_status(
        "jobsets",
        jobset,
        {
            "replicatedJobsStatus": [
                {
                    "name": "pathways-head",
                    "active": 1,
                    "ready": 1,
                    "succeeded": 0,
                    "failed": 0,
                    "suspended": 0,
                }
            ]
        },
        namespace=NS,
    )
    pod = f"{jobset}-pathways-head-0-0-x{attempt}"
    env["kube"].create(
        "pods",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": pod,
                "namespace": NS,
                "labels": {
                    "jobset.sigs.k8s.io/jobset-name": jobset,
                    "jobset.sigs.k8s.io/replicatedjob-name": "pathways-head",
                },
            },
            "spec": {"nodeName": "tpu-node-0", "containers": [{"name": "workload-container", "image": "i"}]},
            "status": {
                "phase": "Running",
                "conditions": [
                    {"type": "PodScheduled", "status": "True"},
                    {"type": "Ready", "status": "True"},
                ],
            },
        },
    )
    return pod


def _debug_flood(count: int) -> list[str]:
    return [f"D1204 13:00:00.000000 1234 xla.py:1] debug line {i} " + "x" * 80 for i in range(count)]


def test_a_log_flooded_between_two_polls_still_records_every_evaluation_and_the_newest_step(
    env: dict[str, Any],
) -> None:
    from tests.control.stage.test_stage import _convert_done

    run_id = "rflood000001"
    env["claim"](run_id)
    env["service"].plan(run_id, f"{run_id}-exec")
    env["service"].launch(run_id, "convert", 1, None, f"{run_id}-exec")
    _convert_done(env, run_id)
    env["service"].launch(run_id, "train", 1, None, f"{run_id}-exec")
    pod = _running_head(env, run_id, 1)
    log = env["kube"].append_pod_log
    # 60,000 debug lines (about 6 MB) between two polls: far more than one read takes, and the
    # evaluations sit between them.
    log(pod, [_eval(None, 0.1), *_debug_flood(20_000), _train_step(9), _eval(10, 0.2)], namespace=NS)
    log(pod, [*_debug_flood(20_000), _eval(20, 0.3), _train_step(21), *_debug_flood(20_000)], namespace=NS)
    polls = 0
    while True:
        polls += 1
        env["service"].status(run_id, "train", 1, f"{run_id}-exec")
        record = env["ledger"].get(run_id)
        if [e["step"] for e in record.results.get("intermediate") or []] == [10, 20] or polls > 10:
            break
    assert polls >= 2, "one read is bounded; the rest came on the next polls"
    log(pod, [_eval(30, 0.4), _train_step(35), *_debug_flood(10)], namespace=NS)
    env["service"].status(run_id, "train", 1, f"{run_id}-exec")
    record = env["ledger"].get(run_id)
    assert record.results["pre"]["mean_reward"] == 0.1
    assert [(e["attempt"], e["step"], e["mean_reward"]) for e in record.results["intermediate"]] == [
        (1, 10, 0.2),
        (1, 20, 0.3),
        (1, 30, 0.4),
    ]
    assert record.progress["step"] == 35, "the newest Train step line"
    env["service"].status(run_id, "train", 1, f"{run_id}-exec")  # nothing new: nothing read twice
    assert len(env["ledger"].get(run_id).results["intermediate"]) == 3


def test_a_resumed_attempts_evaluations_are_kept_beside_the_first_ones(env: dict[str, Any]) -> None:
    """Attempt 1 evaluated at 10, 20, 30 and was preempted; attempt 2 resumed from 30 and
    evaluates at 30 again: both are kept, each with its attempt, and the baseline stays attempt
    1's (a resumed attempt's Pre RL Training line evaluates a partly trained model)."""
    from rlpipe.core.runs import results

    first = results.merge_results(
        {},
        {
            "pre": {"mean_reward": 0.1},
            "intermediate": [{"step": s, "mean_reward": s / 100} for s in (10, 20, 30)],
        },
        100,
        attempt=1,
    )
    both = results.merge_results(
        first,
        {
            "pre": {"mean_reward": 0.29},
            "intermediate": [{"step": 30, "mean_reward": 0.31}, {"step": 40, "mean_reward": 0.4}],
        },
        100,
        resumed=True,
        attempt=2,
    )
    assert [(e["attempt"], e["step"]) for e in both["intermediate"]] == [
        (1, 10),
        (1, 20),
        (1, 30),
        (2, 30),
        (2, 40),
    ]
    assert both["pre"] == {"mean_reward": 0.1}


# ---- a gone pod's lines from Cloud Logging -----------------------------------------------------


class _LoggingApi:
    """``POST /v2/entries:list`` as Cloud Logging answers it (entries with ``timestamp`` and
    ``textPayload``, pages joined by ``nextPageToken``); it records each request's body."""

    def __init__(self, pages: list[list[dict[str, Any]]]) -> None:
        import json
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.bodies: list[dict[str, Any]] = []
        api = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                api.bodies.append(body)
                page = int(body.get("pageToken") or 0)
                answer: dict[str, Any] = {"entries": pages[page]} if pages[page] else {}
                if page + 1 < len(pages):
                    answer["nextPageToken"] = str(page + 1)
                data = json.dumps(answer).encode()
                self.send_response(200 if self.path == "/v2/entries:list" else 404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v2/entries:list"


def test_a_gone_head_pods_evaluations_come_from_cloud_logging(env: dict[str, Any]) -> None:
    import requests

    from rlpipe.control.adapters import cloud_logs

    def entry(second: int, text: str) -> dict[str, Any]:
        return {"timestamp": f"2026-12-04T13:00:{second:02d}.123456789Z", "textPayload": text}

    api = _LoggingApi([[entry(1, _eval(None, 0.1)), entry(2, _eval(10, 0.2))], [entry(3, _eval(20, 0.3))]])

    def post(url: str, body: dict[str, Any]) -> dict[str, Any]:
        answer: dict[str, Any] = requests.post(url, json=body, timeout=10).json()
        return answer

    run_id = "rgone0000001"
    service = _training_with_cloud_logging(env, api, run_id)
    _head_failed(env, run_id)
    answer = service.status(run_id, "train", 1, f"{run_id}-exec")  # no head pod: it is gone
    assert answer["phase"] == "failed"
    record = env["ledger"].get(run_id)
    assert [(e["attempt"], e["step"]) for e in record.results["intermediate"]] == [(1, 10), (1, 20)]
    assert record.results["pre"]["mean_reward"] == 0.1
    first = api.bodies[0]
    assert first["resourceNames"] == ["projects/p"] and first["orderBy"] == "timestamp asc"
    for clause in (
        'resource.type="k8s_container"',
        f'resource.labels.namespace_name="{NS}"',
        f'resource.labels.pod_name:"{run_id}-train-a1-pathways-head-"',
        'resource.labels.container_name="workload-container"',
        'textPayload:"Intermediate Eval"',
    ):
        assert clause in first["filter"], clause
    assert "timestamp>=" not in first["filter"] and api.bodies[1]["pageToken"] == "1"
    # The next read asks from the cursor's second and takes nothing twice.
    service.cloud_logs(f"{run_id}-train-a1", None)
    cursor = LogCursor.from_json(record.attempt_record("train", 1).log_cursor)
    lines, _ = cloud_logs.read_head_lines(post, "p", NS, f"{run_id}-train-a1", cursor, url=api.url)
    assert lines == [] and 'timestamp>="2026-12-04T13:00:03Z"' in api.bodies[-1]["filter"]
    api.server.shutdown()


def test_a_head_pod_deleted_between_its_listing_and_its_log_read_is_read_from_cloud_logging(
    env: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The last read of a preempted attempt: the head pod is listed, then deleted (its JobSet
    failed, Kubernetes removes it) before its log is asked for, and the kubelet answers 404. The
    lines it printed since the last poll are then only in Cloud Logging, and they are read there:
    this read is the attempt's last, so nothing would read them later."""

    def entry(second: int, text: str) -> dict[str, Any]:
        return {"timestamp": f"2026-12-04T13:00:{second:02d}.000000000Z", "textPayload": text}

    api = _LoggingApi([[entry(1, _eval(None, 0.1)), entry(2, _eval(10, 0.2)), entry(3, _eval(20, 0.3))]])
    at = datetime(2026, 12, 4, 13, 0, tzinfo=UTC)

    run_id = "rlate0000001"
    service = _training_with_cloud_logging(env, api, run_id)
    pod = _running_head(env, run_id, 1)
    for second, line in ((1, _eval(None, 0.1)), (2, _eval(10, 0.2))):  # as Cloud Logging stamps them
        env["kube"].append_pod_log(pod, [line], namespace=NS, when=at + timedelta(seconds=second))
    service.status(run_id, "train", 1, f"{run_id}-exec")
    assert [e["step"] for e in env["ledger"].get(run_id).results["intermediate"]] == [10]

    _head_failed(env, run_id)
    cluster = service.cluster
    listed = cluster._list_pods

    def listed_then_deleted(selector: str) -> list[dict[str, Any]]:
        pods = listed(selector)
        if env["kube"].list("pods", namespace=NS):
            env["kube"].delete("pods", pod, namespace=NS)
        return pods

    monkeypatch.setattr(cluster, "_list_pods", listed_then_deleted)
    assert service.status(run_id, "train", 1, f"{run_id}-exec")["phase"] == "failed"
    record = env["ledger"].get(run_id)
    assert [(e["attempt"], e["step"]) for e in record.results["intermediate"]] == [(1, 10), (1, 20)]
    assert 'timestamp>="2026-12-04T13:00:02Z"' in api.bodies[-1]["filter"], "from the kubelet's cursor on"
    api.server.shutdown()


def _training_with_cloud_logging(env: dict[str, Any], api: _LoggingApi, run_id: str) -> Any:
    """The stage service reading a gone pod's lines from ``api`` (Cloud Logging's entries.list),
    with ``run_id`` planned, converted and its training launched; returns the service."""
    import requests

    from rlpipe.control.adapters import cloud_logs
    from tests.control.stage.test_stage import _convert_done

    def post(url: str, body: dict[str, Any]) -> dict[str, Any]:
        answer: dict[str, Any] = requests.post(url, json=body, timeout=10).json()
        return answer

    service = env["service"]
    service.cloud_logs = lambda jobset, cursor: cloud_logs.read_head_lines(
        post, "p", NS, jobset, cursor, url=api.url
    )
    env["claim"](run_id)
    service.plan(run_id, f"{run_id}-exec")
    service.launch(run_id, "convert", 1, None, f"{run_id}-exec")
    _convert_done(env, run_id)
    service.launch(run_id, "train", 1, None, f"{run_id}-exec")
    return service


def _head_failed(env: dict[str, Any], run_id: str) -> None:
    """Attempt 1's JobSet failed, as the JobSet controller writes it."""
    failed = {
        "type": "Failed",
        "status": "True",
        "reason": "FailedJobs",
        "message": "head exited 1",
        "lastTransitionTime": "2026-12-04T13:00:05Z",
    }
    env["kube"].patch_status("jobsets", f"{run_id}-train-a1", {"conditions": [failed]}, namespace=NS)
