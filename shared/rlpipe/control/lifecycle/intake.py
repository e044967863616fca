"""Intake: a request document from any source becomes exactly one run with one execution.

At-least-once delivery is the norm (Eventarc and Pub/Sub redeliver, users drop a file twice),
so every step is idempotent: the run id is derived from the idempotency key, the claim is a
create-if-absent of the ledger, and starting the execution is guarded by a lease taken with a
compare-and-swap, so racing deliveries start one execution between them. A crash anywhere
leaves a state the next delivery (or the reconciler) finishes.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rlpipe.control.adapters import blobstore, interleave
from rlpipe.control.adapters.events import MessageEvent, ObjectEvent
from rlpipe.control.adapters.logs import Logger
from rlpipe.control.adapters.orchestrator import Orchestrator
from rlpipe.control.lifecycle import retry_rounds, run_metrics, user_files
from rlpipe.control.lifecycle.coordinator import Delivery, RunCoordinator
from rlpipe.control.lifecycle.intake_result import IntakeResult, RequestConflict
from rlpipe.control.lifecycle.ledger import Ledger
from rlpipe.core import identity, layout
from rlpipe.core.failures import PermanentFailure
from rlpipe.core.problems import Problem, RequestInvalid
from rlpipe.core.request import MAX_DOCUMENT_BYTES, Request, bounds, parse_document, validate_request
from rlpipe.core.request.policy import Policy
from rlpipe.core.runs import start_record
from rlpipe.core.runs.record import Execution, Lineage, RunRecord, Source, SweepMember, now
from rlpipe.core.teams import Team, Teams

# The error record lists this many problems and counts the rest, so that a document with
# thousands of unknown keys still gets an error.json far below the blob size limit.
MAX_PROBLEMS_RECORDED = 50
# Each problem's path, message and fix is cut to this many characters in the record (a path can
# name a long key; a message can quote a long value).
MAX_PROBLEM_PART_CHARS = 400
# Leases taken to start one run's execution before the run is failed instead of tried again:
# each try is a delivery (or a reconcile pass) whose start failed transiently.
MAX_START_ATTEMPTS = 5


@dataclass
class Intake:
    requests: blobstore.BlobStore
    ledger: Ledger
    orchestrator: Orchestrator
    log: Logger
    lease_seconds: float = 60.0
    clock: Callable[[], float] = time.time
    after_claim: Callable[[str], None] | None = field(default=None)  # test hook: simulate a crash here
    # The status message of a run that could not start (control.adapters.notify.Notifier.send: it never raises).
    notify: Callable[[RunRecord], object] | None = None
    policy: Policy = field(default_factory=Policy)  # the deployment's allowlists
    # Where a request's own files are copied (the run's prefix), and how a gs:// one is read.
    artifacts: blobstore.BlobStore | None = None
    read_gcs: user_files.GcsReader | None = None
    # A run's part in a group of runs (a sweep's, wired by control.services); alone by default.
    coordinator: RunCoordinator = field(default_factory=RunCoordinator)
    # The deployment's teams (core.teams): the source decides a request's team and its allowlists.
    teams: Teams = field(default_factory=Teams)

    # ---- sources ------------------------------------------------------------------------------

    def from_object(self, event: ObjectEvent) -> IntakeResult:
        source = Source(kind="gcs", bucket=event.bucket, name=event.name, generation=event.generation)
        source_key = identity.key_for_object(event.bucket, event.name, event.generation)
        log = self.log.bind(object=f"gs://{event.bucket}/{event.name}#{event.generation}")
        if event.bucket != self.requests.bucket_name:
            # Requests are read only from the configured bucket: an event naming another bucket
            # would otherwise start a second run for the same object under another key.
            log.warning("ignored: the event names another bucket", expected=self.requests.bucket_name)
            return IntakeResult("ignored", detail=f"bucket {event.bucket} is not the requests bucket")
        if not event.name.startswith(layout.REQUESTS_PREFIX):
            log.info("ignored: object is outside requests/")
            return IntakeResult("ignored", detail="outside requests/")
        if layout.is_user_file(event.name):
            log.info("ignored: a request's own file, read when a request names it")
            return IntakeResult(
                "ignored", detail="a request's own file (reward functions, processor or template)"
            )
        if not layout.is_request_object(event.name):
            return self._reject(
                source_key,
                source,
                [
                    Problem(
                        "",
                        f"{event.name} is not a request file",
                        "put only .json, .yaml or .yml request documents under requests/ (and "
                        "the .py and .template.json files a request names beside it)",
                    )
                ],
                log,
            )
        if event.size is not None and event.size > MAX_DOCUMENT_BYTES:
            return self._reject(
                source_key,
                source,
                [
                    Problem(
                        "",
                        f"{event.name} is {event.size} bytes",
                        f"keep requests under {MAX_DOCUMENT_BYTES} bytes",
                    )
                ],
                log,
            )
        try:
            blob = self.requests.read(
                event.name, max_bytes=MAX_DOCUMENT_BYTES, generation=int(event.generation)
            )
        except blobstore.TooLarge as exc:
            return self._reject(
                source_key,
                source,
                [Problem("", str(exc), f"keep requests under {MAX_DOCUMENT_BYTES} bytes")],
                log,
            )
        except blobstore.NotFound:
            return self._reject(
                source_key,
                source,
                [
                    Problem(
                        "",
                        f"{event.name} generation {event.generation} no longer exists",
                        "upload the request again",
                    )
                ],
                log,
            )
        return self.submit(blob.data, source, source_key, source_name=event.name, log=log)

    def from_message(self, event: MessageEvent) -> IntakeResult:
        source = Source(kind="pubsub", topic=event.topic, message_id=event.message_id)
        source_key = identity.key_for_message(event.topic, event.message_id)
        log = self.log.bind(pubsub_message=f"{event.topic}/{event.message_id}")
        return self.submit(event.data, source, source_key, source_name=f"message {event.message_id}", log=log)

    # ---- the one code path every source takes ---------------------------------------------------

    def submit(
        self,
        data: bytes,
        source: Source,
        source_key: str,
        *,
        source_name: str = "request",
        log: Logger | None = None,
        request: Request | None = None,
    ) -> IntakeResult:
        log = log or self.log
        namespace = layout.request_namespace(source.name) if source.kind == "gcs" and source.name else ""
        if self.teams.declared:
            team = self._team_of(source, namespace)
            if isinstance(team, Problem):
                return self._reject(source_key, source, [team], log)
            source = source.model_copy(update={"team": team.name})
            policy = self.policy.for_team(team)
            namespace = team.folder
            log = log.bind(team=team.name)
        else:
            policy = self.policy.for_namespace(namespace)
        if request is None:
            try:
                doc = parse_document(data, source=source_name)
                if retry_rounds.is_retry_document(doc):  # control goes through the stage function
                    raise RequestInvalid(
                        [
                            Problem(
                                "retry", retry_rounds.REFUSED_DOCUMENT, "run `rlpipe retry RUN --reason ...`"
                            )
                        ]
                    )
                request = validate_request(doc, policy)
            except RequestInvalid as exc:
                return self._reject(source_key, source, exc.problems, log)
        refused = policy.problems(request)  # a request handed over already parsed, too
        if refused:
            return self._reject(source_key, source, refused, log)
        key = identity.key_for_request_id(request.request_id, namespace) if request.request_id else source_key
        if request.sweep is not None:  # a group of runs: its coordinator claims them (control/sweep)
            result = self._admit(request, Delivery(source, source_key, key, policy, log))
        else:
            result = self.claim_run(request, key, source, source_key, log)
        self._record_delivery(source_key, source, result)
        return result

    def _team_of(self, source: Source, folder: str) -> Team | Problem:
        """The team where ``source`` came from, or why it is no team's: the folder of a drop, the
        topic of a message, the team a watch entry names. A request never names its own team."""
        names = ", ".join(self.teams.names())
        if source.kind == "gcs":
            team = self.teams.for_folder(folder)
            if team is None:
                return Problem(
                    "",
                    f"{source.name} is in no team's folder",
                    f"drop it under requests/<team>/ of your team (teams: {names}); "
                    "only a team's submitters may write its folder",
                )
            return team
        if source.kind == "pubsub":
            team = self.teams.for_topic(source.topic or "")
            if team is None:
                return Problem(
                    "",
                    f"the message arrived on {source.topic}, a topic no team owns",
                    f"publish on your team's topic ({', '.join(t.topic_id for t in self.teams)})",
                )
            return team
        team = self.teams.named(source.team or "")
        if team is None:
            return Problem(
                "",
                f"the {source.kind} request names team {source.team!r}, which this deployment does not declare"
                if source.team
                else f"the {source.kind} request belongs to no team",
                f"name one of the teams ({names}) where the request is made (a watch entry's team)",
            )
        return team

    def _admit(self, request: Request, delivery: Delivery) -> IntakeResult:
        """A request naming a group of runs, claimed by the coordinator; each run through
        ``claim_run``, its files read once."""
        source, source_key, log = delivery.source, delivery.source_key, delivery.log
        try:
            return self.coordinator.admit(
                request,
                delivery,
                lambda child, key, member, found: self.claim_run(
                    child, key, source, source_key, log, member=member, found=found
                ),
                lambda req: self.gather_files(req, source),
            )
        except RequestInvalid as exc:
            return self._reject(source_key, source, exc.problems, log)
        except RequestConflict as exc:
            return self._conflict(exc.existing, source_key, source, log)

    def _record_delivery(self, source_key: str, source: Source, result: IntakeResult) -> None:
        """Say which run this delivery went to, when a ``request_id`` named the run: otherwise the
        submitter, who knows only its own delivery, could not tell "your request started run R"
        from "run R already existed and nothing new started" (a rejection has its error record)."""
        delivery_id = identity.run_id_for(source_key)
        if (
            result.run_id is None
            or result.run_id == delivery_id
            or result.outcome in ("rejected", "conflict")
        ):
            return
        self.ledger.write_delivery(
            delivery_id,
            {
                "delivery_id": delivery_id,
                "key": source_key,
                "source": source.model_dump(exclude_none=True),
                "run_id": result.run_id,
                "outcome": result.outcome,
                "at": now(),
            },
        )

    def claim_run(
        self,
        request: Request,
        key: str,
        source: Source,
        source_key: str,
        log: Logger,
        *,
        member: SweepMember | None = None,
        found: dict[str, bytes] | None = None,
    ) -> IntakeResult:
        """Claim the run ``key`` names and start its execution once. ``member``: a sweep's child,
        whose files the parent's intake gathered once (``found``) for all of its children."""
        run_id = identity.run_id_for(key)
        log = log.bind(run_id=run_id)
        holder = uuid.uuid4().hex
        inputs: dict[str, Any] = {}
        if user_files.files_of(request):
            existing = self.ledger.get(run_id)
            if existing is not None and existing.source.same_delivery(source):
                # This very delivery again: the run keeps the files it was started with, whatever
                # happened to them at their source since.
                return self._start(run_id, holder, log, already_leased=False)
            try:
                request, inputs = self._own_files(
                    request, run_id, source, claimed=existing is not None, found=found
                )
            except RequestInvalid as exc:
                if existing is not None:  # the run exists with other files under its prefix
                    return self._conflict(existing, source_key, source, log)
                return self._reject(source_key, source, exc.problems, log)
        record = RunRecord(
            run_id=run_id,
            key=key,
            source=source,
            request=request.model_dump(mode="json"),
            execution=Execution(
                lease_holder=holder, lease_until=self.clock() + self.lease_seconds, start_attempts=1
            ),
            lineage=Lineage(
                hf_repo=request.hf_repo,
                hf_revision=request.hf_revision,
                image=request.image,
                inputs=inputs or None,
                sweep=member,
            ),
        )
        if self.ledger.claim(record):
            log.info("claimed run", key=key)
            if self.after_claim:
                self.after_claim(run_id)
            return self._start(run_id, holder, log, already_leased=True)
        existing = self.ledger.get(run_id)
        if existing is None:  # claimed and gone: should not happen, but never lose the request
            raise RuntimeError(f"run {run_id} was claimed but its ledger cannot be read")
        if existing.request != record.request:
            return self._conflict(existing, source_key, source, log)
        return self._start(run_id, holder, log, already_leased=False)

    def gather_files(self, request: Request, source: Source) -> dict[str, bytes]:
        """The request's own files, read once from beside it (or ``gs://``) and checked."""
        return user_files.gather(
            request,
            read_relative=user_files.bucket_neighbours(self.requests, source.name)
            if source.kind == "gcs" and source.name
            else None,
            read_gcs=self._gcs_reader(),
        )

    def _gcs_reader(self) -> user_files.GcsReader:
        if self.artifacts is None or self.read_gcs is None:
            raise RequestInvalid(
                [
                    Problem(
                        "",
                        "this intake has no artifacts bucket to keep a request's files in",
                        "set RLPIPE_ARTIFACTS_BUCKET for the intake functions",
                    )
                ]
            )
        return self.read_gcs

    def _own_files(
        self,
        request: Request,
        run_id: str,
        source: Source,
        *,
        claimed: bool,
        found: dict[str, bytes] | None = None,
    ) -> tuple[Request, dict[str, Any]]:
        """The request's own files, checked and copied under the run's prefix; the request then
        names those copies (``control.lifecycle.user_files``). ``claimed``: the run exists, so its copies are
        never replaced. Raises ``RequestInvalid``."""
        self._gcs_reader()  # refuses first when this intake cannot keep files
        if found is None:
            found = self.gather_files(request, source)
        assert self.artifacts is not None
        scope = self.teams.cache_scope(source.team) if source.team else ""  # a team's own prefix
        copied = user_files.copy_to_run(
            self.artifacts, run_id, found, request, scope=scope, replace=not claimed
        )
        return user_files.pinned_request(request, copied), {r: c.record(request) for r, c in copied.items()}

    # ---- starting the execution exactly once ----------------------------------------------------

    def start_claimed(self, run_id: str) -> IntakeResult:
        """Finish a claim whose execution never started (the reconciler's path), under the same lease."""
        return self._start(run_id, uuid.uuid4().hex, self.log.bind(run_id=run_id), already_leased=False)

    def _start(self, run_id: str, holder: str, log: Logger, *, already_leased: bool) -> IntakeResult:
        if not already_leased:
            record, decision = self.ledger.update(
                run_id,
                lambda r: start_record.take_lease(
                    r,
                    holder,
                    now_epoch=self.clock(),
                    lease_seconds=self.lease_seconds,
                    max_attempts=MAX_START_ATTEMPTS,
                ),
            )
            if decision == "give-up":
                return self._start_failed(
                    run_id, f"no execution could be started in {MAX_START_ATTEMPTS} tries", log
                )
            if decision != "lease":
                log.info(f"duplicate delivery: {decision}", execution=record.execution.name)
                return IntakeResult(decision, run_id, execution=record.execution.name)
        interleave.point("intake.start:leased")
        try:
            name = self.orchestrator.start(run_id)
        except PermanentFailure as exc:
            # Workflows refused (400/403/404): no redelivery or reconcile pass can change that.
            return self._start_failed(run_id, exc.reason, log)
        interleave.point("intake.start:started")

        record, lost = self.ledger.update(
            run_id, lambda r: start_record.record_execution(r, name), detail=lambda r: {"execution": name}
        )
        if lost is not None:  # our lease expired and someone else started one meanwhile
            self.orchestrator.cancel(name)
            log.warning("started a second execution after the lease expired; cancelled it", execution=name)
            return IntakeResult("duplicate", run_id, execution=lost)
        log.info("execution started", execution=name)
        run_metrics.run_started(self.log, run_id=run_id, source_kind=record.source.kind, team=record.team)
        return IntakeResult("started", run_id, execution=name)

    def _start_failed(self, run_id: str, reason: str, log: Logger) -> IntakeResult:
        """End a run that cannot start, with the reason; the delivery is then acknowledged."""
        message = f"the workflow execution could not be started: {reason}"

        record = self.ledger.edit(
            run_id,
            lambda r: start_record.not_started(r, message),
            detail=lambda r: {"state": r.state, "failure": message},
        )
        if record.state == "failed":
            self.coordinator.member_ended(record)  # a sweep's child: its sweep may end with it
        if record.state == "failed" and record.failure and record.failure.stage == "start":
            log.error("run failed before it started", reason=message)
            if self.notify is not None:  # best-effort: it never turns an answer into a redelivery
                self.notify(record)
        return IntakeResult("start-failed", run_id, detail=message)

    # ---- rejections ---------------------------------------------------------------------------

    def _reject(self, source_key: str, source: Source, problems: list[Problem], log: Logger) -> IntakeResult:
        run_id = identity.run_id_for(source_key)
        # Bounded by construction: at most MAX_PROBLEMS_RECORDED problems, each part cut to
        # MAX_PROBLEM_PART_CHARS and escaped to valid Unicode, so the record is always writable.
        shown = [
            Problem(*(bounds.shown(part, MAX_PROBLEM_PART_CHARS) for part in (p.path, p.message, p.fix)))
            for p in problems[:MAX_PROBLEMS_RECORDED]
        ]
        message = RequestInvalid(shown).render()
        if len(problems) > len(shown):
            message += f"\n  … and {len(problems) - len(shown)} more (fix these first)"
        body: dict[str, Any] = {
            "run_id": run_id,
            "key": source_key,
            "source": source.model_dump(exclude_none=True),
            "rejected_at": now(),
            "message": message,
            "problem_count": len(problems),
            "problems": [{"path": p.path, "message": p.message, "fix": p.fix} for p in shown],
        }
        self.ledger.write_error(run_id, body)
        log.bind(run_id=run_id).warning(
            "request rejected", problems=[str(p) for p in shown], problem_count=len(problems)
        )
        return IntakeResult("rejected", run_id, detail=body["message"])

    def _conflict(self, existing: RunRecord, source_key: str, source: Source, log: Logger) -> IntakeResult:
        problem = Problem(
            "request_id",
            f"request_id is already used by run {existing.run_id} with a different request",
            "choose a new request_id, or resubmit the identical request",
        )
        result = self._reject(source_key, source, [problem], log)
        return IntakeResult("conflict", result.run_id, detail=result.detail)
