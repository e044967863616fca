"""``rlpipe logs RUN [--stage S] [--attempt N] [--follow] [--container C] [--timeout S]``: one
attempt's log.

While the attempt's pods exist, from the cluster (``cluster/pod_logs.py``: the kubelet's log, with
timestamps); after they are gone, from Cloud Logging (``control/adapters/workload_logs.py``): Google's on GCP,
the local stack's stand-in locally (``RLPIPE_LOGGING_ENDPOINT``). The container is the program's
unless ``-c`` names another: found by its role (``workload_logs.program_container``), so after a
preemption that deleted the head but left the failed worker's pods, it is still the head's program.
With ``--follow``, a run not accepted yet, an attempt not launched yet and pods not started yet are
waited for, up to ``--timeout``. Before reading it prints, to stderr, the command a person would
type for the same lines. docs/logs.md.

Exit (cli/exit_codes.py): 0 lines read (or followed to the pod's end); 3 no such run, stage attempt
or container; 75 nothing to read yet (no pod yet and no line logged, Cloud Logging or the cluster
could not be read, a wait that ran out of ``--timeout``: asking again later may work); 130 Ctrl-C.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, cast

from rlpipe.cli.argument_types import positive_seconds
from rlpipe.cli.exit_codes import ExitCode
from rlpipe.core import identity
from rlpipe.core.identity import Stage

POLL_SECONDS = 2.0
FOLLOW_TIMEOUT_SECONDS = 600.0  # how long --follow waits for a run, an attempt or pods to appear
NOT_FOUND, NOTHING = int(ExitCode.NOT_FOUND), int(ExitCode.TRANSIENT)
ENDED_PHASES = ("succeeded", "failed", "deleted", "cancelled")


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


class Waiting:
    """One ``--follow`` wait: says once what it waits for (again only when that changes), and
    gives up at the deadline."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.deadline = time.monotonic() + timeout
        self.said: str | None = None

    def wait(self, what: str) -> bool:
        """Sleep one poll waiting for ``what``; False once the deadline has passed (said so)."""
        if time.monotonic() >= self.deadline:
            _say(f"gave up after {self.timeout:g} s waiting for {what} (--timeout sets how long)")
            return False
        if what != self.said:
            _say(f"waiting for {what} (up to {self.timeout:g} s; Ctrl-C stops)")
            self.said = what
        time.sleep(POLL_SECONDS)
        return True


@dataclass(frozen=True)
class Target:
    """What to read: one attempt of one stage of a run."""

    record: Any
    stage: str
    attempt: int

    @property
    def entry(self) -> Any:
        return self.record.attempt_record(self.stage, self.attempt)

    @property
    def workload(self) -> str:
        entry = self.entry
        return str(
            entry.workload
            or identity.workload_name(self.record.run_id, cast(Stage, self.stage), self.attempt)
        )

    @property
    def ended(self) -> bool:
        return bool(self.record.terminal) or self.entry.phase in ENDED_PHASES


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


def _target(store: Any, args: Any, waiting: Waiting) -> Target | int:
    """The attempt to read; with ``--follow``, waited for while the run may still bring it."""
    while True:
        record = store.get(args.run)
        if record is None:
            if args.follow and waiting.wait(f"run {args.run} to be accepted"):
                continue
            if not args.follow:
                _say(f"no run {args.run}")
                return NOT_FOUND
            return NOTHING
        which = _choose(record, args.stage, args.attempt_number)
        if not isinstance(which, str):
            return Target(record, *which)
        if args.follow and not record.terminal:
            number = f" {args.attempt_number}" if args.attempt_number else ""
            what = f"its {args.stage} attempt{number}" if args.stage else "its first workload"
            if waiting.wait(f"run {args.run} to launch {what}"):
                continue
            return NOTHING
        _say(which)
        return NOT_FOUND


def _pod_of(client: Any, workload: str, uid: str) -> dict[str, Any] | None:
    return next((p for p in client.workload_pods(workload) if p["metadata"].get("uid") == uid), None)


def _from_cluster(
    client: Any, settings: Any, target: Target, pod: dict[str, Any], container: str, args: Any
) -> int:
    """Print the container's log; with ``--follow``, poll until the container ends."""
    from kubernetes.client.exceptions import ApiException

    from rlpipe.cluster import pod_logs
    from rlpipe.cluster.log_cursor import since_time
    from rlpipe.core.failures import PermanentFailure, TransientFailure

    name, uid = pod["metadata"]["name"], str(pod["metadata"].get("uid") or "")
    workload = target.workload
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
            _say(
                f"pod {name} is gone (its workload {workload} was deleted or ended); the rest from Cloud Logging"
            )
            # From the second of the last line shown (it may repeat lines of that second).
            since = since_time(cursor, uid) or target.entry.launched_at
            return _from_cloud_logging(settings, target, since, container, replicated_job=None)
        pod = found


def _from_cloud_logging(
    settings: Any, target: Target, since: str, container: str, *, replicated_job: str | None
) -> int:
    from rlpipe.control.adapters import cloud_logs, workload_logs

    try:
        query = workload_logs.workload_filter(
            settings.namespace, target.workload, container, since, replicated_job=replicated_job
        )
    except ValueError as exc:
        _say(f"{exc}: name a container as its pod spec does (-c)")
        return NOT_FOUND
    if settings.local and not settings.logging_endpoint:
        _say(
            "this local stack plays no Cloud Logging (started before it did): restart it with `rlpipe local up`"
        )
        return NOTHING
    where = (
        f" (the local stack's Cloud Logging, {settings.logging_endpoint})"
        if settings.logging_endpoint
        else ""
    )
    _say(gcloud_command(query, settings.project) + where)
    try:
        post, url = cloud_logs.entries_list(settings)
        lines, more = workload_logs.read_lines(post, settings.project, query, url=url)
    except Exception as exc:  # credentials, permissions, the network: say which, as gcloud would
        _say(f"could not read Cloud Logging: {type(exc).__name__}: {exc}")
        return NOTHING
    _out(lines)
    if more:
        _say(f"stopped after {workload_logs.MAX_PAGES} pages; the command above reads the rest")
    if not lines:
        _say(
            f"Cloud Logging holds no line of {container} for {target.workload} "
            f"({target.stage} attempt {target.attempt}; kept 30 days by default)"
            + ("" if target.ended else ": its pods have not started yet (--follow waits for them)")
        )
        return NOTHING
    return 0


def _read(client: Any, settings: Any, store: Any, target: Target, args: Any, waiting: Waiting) -> int:
    """Read the attempt's log from its pod if it has one, else from Cloud Logging; with
    ``--follow``, an attempt whose pods have not started yet is waited for."""
    from rlpipe.cluster import pod_logs
    from rlpipe.control.adapters import workload_logs

    while True:
        workload = target.workload
        try:
            pods = client.workload_pods(workload)
        except Exception as exc:  # the cluster cannot be reached: Cloud Logging still can
            _say(f"could not list the pods of {workload}: {exc}")
            pods = []
        container = args.container or workload_logs.program_container(pods, target.stage)
        pod = pod_logs.pick(pods, container)
        if pod is not None:
            return _from_cluster(client, settings, target, pod, container, args)
        program_pods = workload_logs.program_pods(pods, target.stage)
        if program_pods and args.container:  # the program's pods are there, and none has it
            names = sorted({c for p in pods for c in pod_logs.containers_of(p)})
            _say(f"no pod of {workload} has a container {container}; its containers: {', '.join(names)}")
            return NOT_FOUND
        if not pods and args.follow and not target.ended:
            what = f"the pods of {workload} ({target.stage} attempt {target.attempt}) to start"
            if not waiting.wait(what):
                return NOTHING
            record = store.get(target.record.run_id) or target.record
            target = Target(record, target.stage, target.attempt)
            continue
        break
    role = workload_logs.program_role(target.stage)[0] if not args.container else None
    gone = "have ended and are gone" if target.ended else "are not there (gone, or not started yet)"
    _say(
        f"the program's pods of {workload} ({target.stage} attempt {target.attempt}) {gone}; reading Cloud Logging"
    )
    return _from_cloud_logging(settings, target, target.entry.launched_at, container, replicated_job=role)


def cmd_logs(args: argparse.Namespace, settings: Callable[[], Any], ledger: Callable[[Any], Any]) -> int:
    if args.attempt_number is not None and args.attempt_number < 1:
        _say("--attempt must be 1 or more")
        return int(ExitCode.USAGE)
    if args.timeout <= 0:
        _say("--timeout must be a number of seconds above 0")
        return int(ExitCode.USAGE)
    chosen = settings()
    store = ledger(chosen)
    waiting = Waiting(args.timeout)
    try:
        target = _target(store, args, waiting)
        if isinstance(target, int):
            return target
        from rlpipe.cluster import pod_logs

        # A team's run has its pods in its team's namespace (docs/teams.md): read, and say, there.
        chosen = replace(chosen, namespace=chosen.teams().namespace_of(target.record.team, chosen.namespace))
        client = pod_logs.PodLogs.from_settings(chosen, api_retries=2)
        return _read(client, chosen, store, target, args, waiting)
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
        "-f",
        "--follow",
        action="store_true",
        help=f"poll every {POLL_SECONDS:g} s until the pod ends; wait for the run, attempt and pod first",
    )
    p.add_argument(
        "-c",
        "--container",
        default=None,
        help="container name (default: the program's, the Pathways head's on a train JobSet)",
    )
    p.add_argument(
        "--timeout",
        type=positive_seconds,
        default=FOLLOW_TIMEOUT_SECONDS,
        metavar="SECONDS",
        help=f"how long --follow waits for the run, its attempt or its pods (default {FOLLOW_TIMEOUT_SECONDS:g}; exit 75 after)",
    )
    p.set_defaults(func=lambda args: cmd_logs(args, settings, ledger))
