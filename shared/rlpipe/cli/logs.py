"""``rlpipe logs RUN [--stage S] [--attempt N] [--follow] [--container C]``: one attempt's log.

While the attempt's pods exist, from the cluster (``cluster/pod_logs.py``: the kubelet's log, with
timestamps); after they are gone, on GCP, from Cloud Logging (``control/workload_logs.py``); on the
local stack there is no Cloud Logging, and it says so. Before reading it prints, to stderr, the
command a person would type for the same lines. docs/logs.md.

Exit: 0 lines read (or followed to the pod's end); 1 nothing could be read (no pod yet, pods gone
and no Cloud Logging, an API error); 3 no such run, stage attempt or container; 130 Ctrl-C.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from collections.abc import Callable
from typing import Any

from rlpipe.core import identity

CONTAINER = "workload-container"
POLL_SECONDS = 2.0
NOT_FOUND, NOTHING = 3, 1


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _out(lines: list[str]) -> None:
    for line in lines:
        print(line)
    sys.stdout.flush()


def kubectl_command(namespace: str, pod: str, container: str, since: str | None = None) -> str:
    words = ["kubectl", "logs", "-n", namespace, pod, "-c", container, "--timestamps"]
    if since:
        words.append(f"--since-time={since}")
    return shlex.join(words)


def gcloud_command(query: str, project: str) -> str:
    words = ["gcloud", "logging", "read", query, "--project", project, "--order", "asc"]
    return shlex.join([*words, "--format", "value(textPayload)"])


def _choose(record: Any, stage: str | None, attempt: int | None) -> tuple[str, int] | str:
    """(stage, attempt) to read, or why there is none."""
    run = record.run_id
    if stage is None:
        stage = record.stage or (record.attempts[-1].stage if record.attempts else None)
    if stage is None:
        return f"run {run} has launched no workload yet"
    numbers = sorted(a.attempt for a in record.attempts if a.stage == stage)
    if not numbers:
        launched = sorted({a.stage for a in record.attempts}, key=identity.STAGES.index)
        return f"run {run} has no {stage} attempt" + (
            f"; stages launched: {', '.join(launched)}" if launched else "; it has launched no workload yet"
        )
    chosen = attempt or numbers[-1]
    if record.attempt_record(stage, chosen) is None:
        return f"run {run} has no {stage} attempt {chosen}; its {stage} attempts: " + ", ".join(
            str(n) for n in numbers
        )
    return stage, chosen


def _pod_of(client: Any, workload: str, uid: str) -> dict[str, Any] | None:
    return next((p for p in client.workload_pods(workload) if p["metadata"].get("uid") == uid), None)


def _from_cluster(client: Any, settings: Any, workload: str, pod: dict[str, Any], args: Any) -> int:
    """Print the container's log; with ``--follow``, poll until the container ends."""
    from kubernetes.client.exceptions import ApiException

    from rlpipe.cluster import pod_logs
    from rlpipe.cluster.log_cursor import since_time
    from rlpipe.core.failures import PermanentFailure, TransientFailure

    name, uid, container = pod["metadata"]["name"], str(pod["metadata"].get("uid") or ""), args.container
    _say(kubectl_command(settings.namespace, name, container))
    cursor, said_since, said_waiting = None, False, False
    while True:
        ended = pod_logs.container_exit(pod, container)  # before the read: no line is written after
        phase = (pod.get("status") or {}).get("phase")
        if phase in pod_logs.READABLE_PHASES:
            try:
                while True:
                    lines, cursor, more = client.read_container(name, uid, container, cursor)
                    _out(lines)
                    if not more:
                        break
            except (ApiException, TransientFailure, PermanentFailure) as exc:
                if not args.follow:
                    _say(f"could not read the log of {name}: {exc}")
                    return NOTHING
        elif not args.follow:
            _say(f"pod {name} is {phase}: no log yet (--follow waits for it)")
            return NOTHING
        elif not said_waiting:
            _say(f"pod {name} is {phase}: waiting for it to start")
            said_waiting = True
        if not args.follow:
            return 0
        if ended is not None:
            _say(
                f"pod {name} ended ({phase}): container {container} exited {ended.get('exitCode')}"
                + (f" ({ended['reason']})" if ended.get("reason") else "")
            )
            return 0
        time.sleep(POLL_SECONDS)
        if not said_since and (since := since_time(cursor, uid)):
            _say(
                f"then every {POLL_SECONDS:g} s: {kubectl_command(settings.namespace, name, container, since)}"
            )
            said_since = True
        found = _pod_of(client, workload, uid)
        if found is None:
            _say(f"pod {name} is gone (its workload {workload} was deleted)")
            if settings.local:
                _say("the local stack has no Cloud Logging: lines written after the last poll are not shown")
                return 0
            # The rest from Cloud Logging, from the second of the last line shown (it may repeat).
            return _from_cloud_logging(settings, workload, since_time(cursor, uid) or "", container)
        pod = found


def _from_cloud_logging(settings: Any, workload: str, since: str, container: str) -> int:
    from rlpipe.control import cloud_logs, workload_logs

    query = workload_logs.workload_filter(settings.namespace, workload, container, since)
    _say(gcloud_command(query, settings.project))
    try:
        lines, more = workload_logs.read_lines(cloud_logs.google_post(), settings.project, query)
    except Exception as exc:  # credentials, permissions, the network: say which, as gcloud would
        _say(f"could not read Cloud Logging: {type(exc).__name__}: {exc}")
        return NOTHING
    _out(lines)
    if more:
        _say(f"stopped after {workload_logs.MAX_PAGES} pages; the command above reads the rest")
    if not lines:
        _say(f"Cloud Logging holds no line of {container} for {workload} (kept 30 days by default)")
        return NOTHING
    return 0


def cmd_logs(args: argparse.Namespace, settings: Callable[[], Any], ledger: Callable[[Any], Any]) -> int:
    if args.attempt_number is not None and args.attempt_number < 1:
        _say("--attempt must be 1 or more")
        return 2
    chosen = settings()
    record = ledger(chosen).get(args.run)
    if record is None:
        _say(f"no run {args.run}")
        return NOT_FOUND
    which = _choose(record, args.stage, args.attempt_number)
    if isinstance(which, str):
        _say(which)
        return NOT_FOUND
    stage, attempt = which
    entry = record.attempt_record(stage, attempt)
    workload = entry.workload or identity.workload_name(record.run_id, entry.stage, attempt)
    from rlpipe.cluster import pod_logs

    client = pod_logs.PodLogs.from_settings(chosen, api_retries=2)
    try:
        pods = client.workload_pods(workload)
    except Exception as exc:  # the cluster cannot be reached: Cloud Logging still can
        _say(f"could not list the pods of {workload}: {exc}")
        pods = []
    pod = pod_logs.pick(pods, args.container)
    try:
        if pod is not None:
            return _from_cluster(client, chosen, workload, pod, args)
        if pods:
            names = sorted({c for p in pods for c in pod_logs.containers_of(p)})
            _say(f"no pod of {workload} has a container {args.container}; its containers: {', '.join(names)}")
            return NOT_FOUND
        if chosen.local:
            _say(
                f"the pods of {workload} ({stage} attempt {attempt}) are gone, and the local stack has "
                "no Cloud Logging to read them from: read a log while its attempt runs (--follow)"
            )
            return NOTHING
        _say(f"the pods of {workload} are gone; reading Cloud Logging")
        return _from_cloud_logging(chosen, workload, entry.launched_at, args.container)
    except KeyboardInterrupt:
        return 130


def register(subparsers: Any, *, settings: Callable[[], Any], ledger: Callable[[Any], Any]) -> None:
    """Add ``logs`` to the ``rlpipe`` parser; ``settings`` picks the deployment, ``ledger(settings)``
    opens its ledger (``cli.main._settings`` and ``cli.main._ledger``)."""
    p = subparsers.add_parser(
        "logs",
        help="print one attempt's log: from its pod while it exists, else from Cloud Logging",
    )
    p.add_argument("run")
    p.add_argument("--stage", choices=identity.STAGES, help="default: the run's current (or last) stage")
    # Not `attempt`: cli.main checks args.attempt >= 1 for `render`, and here it defaults to None.
    p.add_argument(
        "--attempt", dest="attempt_number", type=int, metavar="N", help="default: the stage's newest attempt"
    )
    p.add_argument(
        "-f", "--follow", action="store_true", help=f"poll every {POLL_SECONDS:g} s until the pod ends"
    )
    p.add_argument(
        "-c", "--container", default=CONTAINER, help=f"container name (default {CONTAINER}: the program)"
    )
    p.set_defaults(func=lambda args: cmd_logs(args, settings, ledger))
