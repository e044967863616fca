"""``rlpipe submit``: hand a request to intake (a file drop or a Pub/Sub message), then say what
intake made of it, from the records intake writes: the new run, the run an identical request
already names, or the rejection with its problems. A run id is printed only once the ledger backs
it (docs/cli.md, "submit")."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlpipe.cli.argument_types import seconds
from rlpipe.cli.exit_codes import CliError, ExitCode
from rlpipe.core import identity

if TYPE_CHECKING:  # the parser is built on every command: the records load when a command runs
    from rlpipe.control.adapters.settings import Settings
    from rlpipe.control.lifecycle.ledger import Ledger
    from rlpipe.core.runs.record import RunRecord
    from rlpipe.core.teams import Team


@dataclass(frozen=True)
class Submitted:
    """A request handed to intake: the run it names, and the delivery's own identity, which
    intake's answer is found under (its rejection record, or which run it went to)."""

    run_id: str  # the run the request names: its request_id's, else the delivery's own
    via: str
    where: str
    delivery_id: str  # run_id_for(the delivery's key): where intake records its answer
    source: dict[str, str]  # the ledger's Source of this delivery (control/lifecycle/ledger.py)


def beside(request: Any) -> list[str]:
    """The relative paths of the files a request names beside itself (control/lifecycle/user_files.py)."""
    from rlpipe.control.lifecycle import user_files

    return [f.path for f in user_files.files_of(request).values() if f.path is not None and not f.is_gs]


def edited_document(path: Path, sets: list[str], name: str | None) -> bytes:
    """The file's bytes, or with ``--set PATH=VALUE`` and ``--name`` applied: the document as it will
    be submitted (each value read as the same line in the YAML file would be)."""
    import yaml

    from rlpipe.core.request.documents import parse_document, set_value

    data = path.read_bytes()
    if not sets and name is None:
        return data
    doc = parse_document(data, source=str(path))
    for item in sets:
        field, sep, text = item.partition("=")
        if not sep:
            raise CliError(
                ExitCode.USAGE, f"--set {item!r}: write it as PATH=VALUE, e.g. training.learning_rate=2e-5"
            )
        set_value(doc, field.strip(), text.strip())
    if name is not None:
        doc["request_id"] = name
    if path.suffix.lower() == ".json":
        return json.dumps(doc, indent=2).encode()
    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True).encode()


def submitting_team(settings: Settings, team: str = "", namespace: str = "") -> Team | None:
    """The team a submission goes as, or None on a deployment that declares none (core.teams).

    Where a request arrives decides its team, so with teams declared every submission names one:
    ``--team``, or ``--namespace`` (a team's folder is its name, so the two say the same). A team
    the deployment does not declare is refused here, naming the declared ones, before anything is
    uploaded: intake would refuse the drop or the message anyway."""
    from rlpipe.core.problems import RequestInvalid

    try:
        teams = settings.teams()
    except RequestInvalid as exc:
        raise CliError(
            ExitCode.USAGE, f"this deployment's RLPIPE_TEAMS is not a teams declaration: {exc}"
        ) from None
    if not teams.declared:
        if team:
            raise CliError(
                ExitCode.USAGE,
                f"--team {team}: this deployment declares no teams (RLPIPE_TEAMS is empty); "
                "`rlpipe local up --teams FILE` starts a local stack with teams, and --namespace "
                "drops under a folder of its own",
            )
        return None
    names = ", ".join(teams.names())
    if team and namespace and team != namespace:
        raise CliError(
            ExitCode.USAGE,
            f"--team {team} and --namespace {namespace} name two teams; a team's folder is its name: give one",
        )
    chosen = team or namespace
    if not chosen:
        raise CliError(
            ExitCode.USAGE,
            f"this deployment declares teams ({names}): submit as yours with --team NAME; a request "
            "outside every team's folder and topic is refused",
        )
    found = teams.named(chosen)
    if found is None:
        raise CliError(
            ExitCode.USAGE,
            f"--team {chosen}: this deployment declares no team {chosen!r}; its teams are {names}",
        )
    return found


def submit(
    settings: Settings,
    path: Path,
    *,
    via: str = "gcs",
    storage_client: Any = None,
    namespace: str = "",
    team: str = "",
    sets: list[str] | None = None,
    name: str | None = None,
    open_ledger: Callable[[], Ledger] | None = None,
) -> Submitted:
    """Validate locally first (fast feedback), then hand the file to the same intake users use.
    ``namespace``: the team folder under requests/ whose request_ids this one shares (gcs only).
    ``team``: on a deployment with teams, the team it goes as (its folder, or its topic with
    ``via="pubsub"``), checked against the team's allowlists (:func:`submitting_team`).
    ``sets``/``name``: ``--set PATH=VALUE`` edits and a new ``request_id``; an edit of a request
    whose request_id already names a run is refused here (intake would refuse it as a conflict)."""
    if via not in ("gcs", "pubsub"):
        raise CliError(ExitCode.USAGE, f"unknown --via {via!r}; use gcs or pubsub")
    as_team = submitting_team(settings, team, namespace)
    if as_team is not None:
        namespace = as_team.folder
    elif namespace and (via != "gcs" or not identity.is_namespace(namespace)):
        raise CliError(
            ExitCode.USAGE,
            "--namespace is a folder under requests/ (lowercase letters, digits and -), for --via gcs only",
        )
    data = edited_document(path, sets or [], name)
    from rlpipe.cli.request_files import policy
    from rlpipe.control.lifecycle import user_files
    from rlpipe.core import layout
    from rlpipe.core.request import load_request

    deployment = policy()
    checked = deployment.for_team(as_team) if as_team is not None else deployment.for_namespace(namespace)
    request = load_request(data, source=str(path), policy=checked)
    # and its own files, beside it, as intake will check them
    user_files.gather(request, read_relative=user_files.disk_neighbours(path), read_gcs=None)
    if sets and request.request_id and name is None and open_ledger is not None:
        taken = open_ledger().get(
            identity.run_id_for(identity.key_for_request_id(request.request_id, namespace))
        )
        if taken is not None:
            raise CliError(
                ExitCode.INVALID_INPUT,
                f"request_id {request.request_id!r} already names run {taken.run_id} ({taken.state}), and "
                "--set changes the request, which a request_id cannot name twice: give the changed "
                "request a new id with --name NEW_ID",
            )
    if via == "pubsub" and beside(request):
        raise CliError(
            ExitCode.USAGE,
            f"{', '.join(beside(request))}: a request sent on Pub/Sub has no folder to find files "
            "beside it; use --via gcs, or name them gs:// or inline",
        )
    if via == "gcs":
        from rlpipe.control.adapters.blobstore import make_client

        client = storage_client or make_client(settings.project)
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
        folder = f"{layout.REQUESTS_PREFIX}{namespace}/" if namespace else layout.REQUESTS_PREFIX
        suffix = path.suffix if path.suffix.lower() in layout.REQUEST_SUFFIXES else ".yaml"
        object_name = f"{folder}{path.stem}-{stamp}{suffix}"
        bucket = client.bucket(settings.requests_bucket)
        for relative in beside(request):  # the files it names beside itself go first
            bucket.blob(f"{folder}{relative}").upload_from_filename(str(path.parent / relative))
        blob = bucket.blob(object_name)
        blob.upload_from_string(data, if_generation_match=0)
        delivery = identity.key_for_object(settings.requests_bucket, object_name, blob.generation)
        key = identity.key_for_request_id(request.request_id, namespace) if request.request_id else delivery
        source = {
            "kind": "gcs",
            "bucket": settings.requests_bucket,
            "name": object_name,
            "generation": str(blob.generation),
        }
        if as_team is not None:  # intake records the team the folder decided
            source["team"] = as_team.name
        where = f"gs://{settings.requests_bucket}/{object_name}"
        return Submitted(identity.run_id_for(key), "gcs", where, identity.run_id_for(delivery), source)
    topic = settings.topic_path(as_team.topic_id if as_team is not None else settings.requests_topic)
    message_id = _publish(settings, topic, data)
    delivery = identity.key_for_message(topic, message_id)
    key = identity.key_for_request_id(request.request_id, namespace) if request.request_id else delivery
    source = {"kind": "pubsub", "topic": topic, "message_id": message_id}
    if as_team is not None:  # intake records the team the topic decided
        source["team"] = as_team.name
    return Submitted(
        identity.run_id_for(key),
        "pubsub",
        f"{topic} message {message_id}",
        identity.run_id_for(delivery),
        source,
    )


@dataclass(frozen=True)
class IntakeAnswer:
    """What intake made of one delivery, as its records say:

    - ``started``: this delivery is the run's own (a new run; ``record`` is it);
    - ``existing``: the request's ``request_id`` already named run ``record``, which this delivery
      did not start (an identical request sent again);
    - ``rejected``: intake refused it; ``rejection`` is its error record (problems and fixes);
    - ``pending``: neither record appeared before the wait ended.
    """

    kind: str
    record: RunRecord | None = None
    rejection: dict[str, Any] | None = None


def intake_answer(ledger: Ledger, submitted: Submitted) -> IntakeAnswer:
    """One look at the records intake writes for a delivery (the rejection first: a delivery
    refused as a conflict names an existing run, which must not be mistaken for its own)."""
    rejection = ledger.rejection(submitted.delivery_id)
    if rejection is not None:
        return IntakeAnswer("rejected", rejection=rejection)
    record = ledger.get(submitted.run_id)
    if record is not None and record.source.model_dump(exclude_none=True) == submitted.source:
        return IntakeAnswer("started", record)
    went_to = ledger.delivery(submitted.delivery_id)  # control/lifecycle/intake.py: _record_delivery
    if went_to is not None:
        record = ledger.get(str(went_to.get("run_id")))
        if record is not None:
            mine = record.source.model_dump(exclude_none=True) == submitted.source
            return IntakeAnswer("started" if mine else "existing", record)
    return IntakeAnswer("pending")


def await_intake(ledger: Ledger, submitted: Submitted, *, timeout: float) -> IntakeAnswer:
    """Wait, up to ``timeout`` seconds, for intake's answer to ``submitted``."""
    from rlpipe.cli.lookup import poll

    return poll(lambda: intake_answer(ledger, submitted), lambda a: a.kind != "pending", timeout=timeout)


def _publish(settings: Settings, topic: str, data: bytes) -> str:
    import os

    direct = os.environ.get("RLPIPE_INTAKE_MESSAGE_URL")
    if os.environ.get("RLPIPE_LOCAL") and not os.environ.get("PUBSUB_EMULATOR_HOST") and direct:
        # Local stack without the Pub/Sub emulator: deliver the same CloudEvent the shim would.
        import uuid

        from rlpipe.local.shim import deliver, message_published

        message_id = uuid.uuid4().hex[:16]
        event = message_published(
            topic, "projects/local/subscriptions/direct", data, {}, message_id, datetime.now(UTC).isoformat()
        )
        if not deliver(direct, event):
            raise RuntimeError("intake_message refused the request")
        return message_id
    from google.cloud.pubsub_v1 import PublisherClient

    return str(PublisherClient().publish(topic, data).result(timeout=30))


def cmd_submit(args: argparse.Namespace, settings: Callable[[], Any], ledger: Callable[[Any], Any]) -> int:
    """Hand the request to intake, then say what intake made of it, from the records intake
    writes: a run id is printed only once the ledger backs it."""
    chosen = settings()
    submitted = submit(
        chosen,
        Path(args.file),
        via=args.via,
        namespace=args.namespace,
        team=args.team,
        sets=args.set,
        name=args.name,
        open_ledger=lambda: ledger(chosen),
    )
    print(f"submitted {args.file} via {submitted.via} ({submitted.where})", flush=True)
    if args.wait <= 0:
        print(f"intake decides shortly; see what it made of it with: rlpipe status {submitted.delivery_id}")
        return ExitCode.OK
    answer = await_intake(ledger(chosen), submitted, timeout=args.wait)
    return print_intake_answer(answer, submitted, waited=args.wait)


def print_intake_answer(answer: IntakeAnswer, submitted: Submitted, *, waited: float) -> int:
    """``submit``'s last lines and exit code for intake's answer (docs/cli.md, "submit")."""
    if answer.kind == "rejected":
        print(str((answer.rejection or {}).get("message") or "intake rejected the request"), file=sys.stderr)
        print(
            f"nothing was started; the rejection stays readable: rlpipe status {submitted.delivery_id}",
            file=sys.stderr,
        )
        return ExitCode.INVALID_INPUT
    if answer.kind == "pending":
        raise CliError(
            ExitCode.TRANSIENT,
            f"intake has not answered in {waited:g}s (no run and no rejection recorded for this delivery "
            f"yet); see what it made of it with: rlpipe status {submitted.delivery_id}",
        )
    record = answer.record
    if record is None:  # an answer that is neither rejected nor pending names its run
        raise CliError(
            ExitCode.TRANSIENT, f"intake's answer names no run; see rlpipe status {submitted.delivery_id}"
        )
    kind = "sweep" if record.sweep is not None else "run"
    if answer.kind == "existing":
        print(
            f"request_id {record.request.get('request_id')!r} already names {kind} {record.run_id} "
            f"({record.state}, accepted {record.created_at}); this identical request started nothing new. "
            "To run it again, give it a new id: --name NEW_ID"
        )
        return ExitCode.OK
    extra = f" with {len(record.sweep.children)} children" if record.sweep is not None else ""
    print(
        f"{kind} id: {record.run_id}{extra} ({record.state})   follow it with: rlpipe watch {record.run_id}"
    )
    return ExitCode.OK


def register(subparsers: Any, *, settings: Callable[[], Any], ledger: Callable[[Any], Any]) -> None:
    """Add ``submit`` to the ``rlpipe`` parser; ``settings`` picks the deployment, ``ledger(settings)``
    opens its ledger (``cli.main._settings`` and ``cli.main._ledger``)."""
    p = subparsers.add_parser(
        "submit", help="submit a request (file drop or Pub/Sub message) and say what intake made of it"
    )
    p.add_argument("file")
    p.add_argument("--via", choices=["gcs", "pubsub"], default="gcs")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="PATH=VALUE",
        help="change one field before submitting (repeatable), e.g. training.learning_rate=2e-5; "
        "VALUE is read as it would be in the YAML file",
    )
    p.add_argument(
        "--name", metavar="ID", help="the request_id to submit it under (a new id for a changed request)"
    )
    p.add_argument(
        "--wait",
        type=seconds,
        default=120.0,
        metavar="SECONDS",
        help="wait this long for intake's answer (a run id, or the problems it found); 0: do not wait",
    )
    p.add_argument(
        "--namespace",
        default="",
        help="drop under requests/NAMESPACE/: your team's folder, whose request_ids no other team can take "
        "(on a deployment with teams, the same as --team)",
    )
    p.add_argument(
        "--team",
        default="",
        metavar="NAME",
        help="on a deployment with teams (RLPIPE_TEAMS): submit as team NAME, into its folder "
        "requests/NAME/ (--via gcs) or on its requests topic (--via pubsub), checked against its allowlists",
    )
    p.set_defaults(func=lambda args: cmd_submit(args, settings, ledger))
