"""The operations the workflow calls through the ``stage`` function: plan, launch, status, finish, cleanup.

The workflow only sequences and retries; every decision about what is *true* is made here, from
two independent facts: what the cluster says about the workload and what the bucket holds. A Job
that succeeded without its artifact is a failure, and an artifact without a finished Job is not
done yet.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Protocol, runtime_checkable

from rlpipe.cluster.kinds import Kind
from rlpipe.cluster.log_cursor import LogCursor
from rlpipe.control.adapters import blobstore, callbacks, cloud_logs, hub_client, interleave
from rlpipe.control.adapters.cluster_port import Cluster
from rlpipe.control.adapters.logs import Logger
from rlpipe.control.adapters.notify import Notifier, Publish, status_message
from rlpipe.control.adapters.settings import Settings
from rlpipe.control.lifecycle import data_pins, publishing, quality_gate, run_report, stored_outputs
from rlpipe.control.lifecycle.ledger import Ledger
from rlpipe.control.lifecycle.policies import AdmissionRefused, RunPolicies
from rlpipe.control.lifecycle.retry_rounds import first_attempts, forced_stages, this_round
from rlpipe.control.stage import exported_step, train_status
from rlpipe.control.stage.train_status import LogReader
from rlpipe.core import layout, staging, train_verdict
from rlpipe.core.failure_rules import reported
from rlpipe.core.failure_rules.attempt import decide_attempt
from rlpipe.core.failure_rules.evidence import AttemptEvidence
from rlpipe.core.failures import FailureClass, PermanentFailure
from rlpipe.core.identity import STAGES, Stage, workload_name
from rlpipe.core.manifests import (
    RenderContext,
    conversion_cache,
    render,
    request_stages,
    stage_paths,
)
from rlpipe.core.manifests.publish import TRANSIENT_EXIT_CODES
from rlpipe.core.request import Request
from rlpipe.core.runs import (
    admission,
    budgets,
    end_record,
    launch_record,
    phase_record,
    plan_record,
    verdict_record,
)
from rlpipe.core.runs.admission import Queued
from rlpipe.core.runs.ownership import SupersededAttempt, require_owner
from rlpipe.core.runs.record import LEDGER_TIME, Attempt, EarlyStopRecord, RunRecord, parse_time

GATE_STEP = "gate"  # in the plan's stage list: the workflow calls the gate op there
KIND: dict[str, Kind] = {"convert": "Job", "train": "JobSet", "export": "Job", "publish": "Job"}


@dataclass(frozen=True)
class HeldWorkload:
    """A live attempt's workload as the read before its delete saw it (``record_held``): which
    attempt, and the workload's UID, so that the read after the delete (``record_ended``) counts
    that incarnation's pods only."""

    stage: str
    attempt: int
    kind: Kind
    name: str
    uid: str


@runtime_checkable
class PodsToEnd(Protocol):
    """A cluster that reads a deleted workload's pods up to their own ends
    (``rlpipe.cluster.ClusterClient.pod_chip_hours_to_end``). Apart from ``adapters.cluster_port.Cluster``
    so that a double without it still serves a cancel: its attempts keep the figure read before the
    delete."""

    def pod_chip_hours_to_end(
        self, kind: Kind, name: str, *, uid: str, run_id: str, stage: str, attempt: int
    ) -> dict[str, float]: ...

    def pods_gone(
        self, kind: Kind, name: str, *, uid: str, run_id: str, stage: str, attempt: int, within: float
    ) -> bool: ...


@dataclass
class StageService:
    settings: Settings
    ledger: Ledger
    artifacts: blobstore.BlobStore  # what workloads write: every completeness check reads here
    state: blobstore.BlobStore  # the control plane's: the conversion cache's READY.json
    cluster: Cluster
    log: Logger
    # (repo, revision, **hub) → the commit; ``hub``: the token to resolve with (``_plan_hub``)
    resolve_revision: Callable[..., str] = field(
        default=lambda repo, rev, **hub: hub_client.resolve_revision(repo, rev, **hub)
    )
    # The run's datasets at their commits (control/lifecycle/data_pins.py): request → lineage.data.
    pin_data: Callable[..., dict[str, Any]] = field(default=lambda req, **hub: data_pins.pin(req, **hub))
    publish: Publish | None = None  # status messages (control.adapters.notify.Notifier sends them)
    clock: Callable[[], float] = time.time
    # The head's lines from Cloud Logging once its pod is gone (control/adapters/cloud_logs.py; GCP only).
    cloud_logs: LogReader | None = None
    # The run policies (control/lifecycle/policies.py: a sweep's, its early stopping, a team's
    # limits), as control.services.run_policies wires them; none by default: every run alone.
    policies: RunPolicies = field(default_factory=RunPolicies)

    # ---- helpers ------------------------------------------------------------------------------

    def _load(self, run_id: str) -> tuple[RunRecord, Request]:
        record = self.ledger.get(run_id)
        if record is None:
            raise PermanentFailure(f"run {run_id} has no ledger")
        return record, Request.model_validate(record.request)

    def _namespace(self, record: RunRecord) -> str:
        """Where the run's workloads live: its team's namespace (core.teams; the team's LocalQueues,
        Secrets and quota are there), or the deployment's when it declares no teams."""
        return self.settings.teams().namespace_of(record.team, self.settings.namespace)

    def cluster_for(self, record: RunRecord) -> Cluster:
        """The cluster client for the run's namespace (one connection, another namespace)."""
        namespace = self._namespace(record)
        return self.cluster if namespace == self.settings.namespace else self.cluster.in_namespace(namespace)

    def _context(self, record: RunRecord) -> RenderContext:
        return RenderContext(
            run_id=record.run_id,
            bucket=self.artifacts.bucket_name,
            namespace=self._namespace(record),
            cache_scope=self.settings.teams().cache_scope(record.team),
            team=record.team,
            service_account=self.settings.workload_service_account,
            hf_revision=record.lineage.hf_sha,
            converted_dir=layout.parse_gs(uri)[1] if (uri := record.lineage.converted_uri) else None,
            final_step=record.lineage.final_step,  # train's actual end, once it ended
            export_step=record.lineage.exported_step,  # what export.step chose, once export launched
            data=record.lineage.data,  # what the head stages, at the commits plan pinned
            inputs=record.lineage.inputs,  # the request's own files, by the run's copy and sha256
            export_manifest_sha256=record.lineage.export_manifest_sha256,
        )

    # ---- plan ---------------------------------------------------------------------------------

    def plan(self, run_id: str, execution_id: str | None = None) -> dict[str, Any]:
        """Take (or confirm) ownership of the run, pin the revision, check the conversion cache.

        Ownership and the terminal check are decided inside the compare-and-swap, so after a lease
        lapse two executions cannot both be told ``skip: false``: the first to write owns the run.
        """
        self._load(run_id)  # a run without a ledger is a permanent failure, before anything else
        log = self.log.bind(run_id=run_id)
        record, skip = self.ledger.update(
            run_id,
            lambda r: plan_record.take_ownership(r, execution_id, self.settings.workflow_path),
            detail=lambda r: {"execution": r.execution.name},
        )
        interleave.point("stage.plan:owned")
        if skip is not None:
            log.warning(
                "this execution does not drive the run; it stops here",
                execution_id=execution_id,
                reason=skip,
            )
            return {"skip": True, "skip_reason": skip}
        req = Request.model_validate(record.request)
        try:
            sha, data = self._pins(record, req)
        except PermanentFailure as exc:
            # This execution owns the run (decided above), so the run ends here with the reason.
            self.finish(
                run_id,
                "failed",
                {"tag": "permanent", "message": exc.reason, "stage": "plan", "rule": reported.PLAN_REFUSED},
                execution_id=execution_id,
            )
            raise
        if not (record.lineage.hf_sha and record.lineage.data):  # kept now: a waiting run re-plans
            record = self.ledger.edit(
                run_id,
                lambda r: plan_record.pin_commits(r, execution_id, sha, data),
                detail=lambda r: {"hf_sha": sha, "data": data_pins.summary(data)},
            )
        # The cache of the run's team, at the commit just pinned: the key publish_conversion writes.
        cache = conversion_cache(req, replace(self._context(record), hf_revision=sha))
        ready = stored_outputs.ready_conversion(self.state, cache)
        # A retry's `from` stage and those after it run again even if done (control/lifecycle/retry_rounds.py).
        done = stored_outputs.done_stages(self.artifacts, record, req, self._context(record))
        done -= forced_stages(record)
        stages: list[str] = [
            s for s in request_stages(req) if not (s == "convert" and ready) and s not in done
        ]
        try:  # the run policies, before anything holds a TPU
            queued = self.policies.admission(record, conversion_ready=bool(ready))
        except AdmissionRefused as refused:
            failure = {"tag": "permanent", "message": refused.reason, "stage": "plan", "rule": refused.rule}
            self.finish(run_id, "failed", failure, execution_id=execution_id)
            raise
        self._admission(record, queued, req, execution_id, log)
        if queued is not None:  # beyond a sweep's max_parallel or a team's limit: the workflow asks again
            return {
                "skip": False,
                "wait": True,
                "wait_reason": queued.reason,
                "wait_seconds": self.settings.callback_timeout_seconds,
            }
        stages = self.policies.steps(record, stages)
        if req.gate is not None and "export" not in done:
            # The gate (a step, not a workload) sits between train and export; a promoted run
            # passes it by its recorded override.
            stages.insert(stages.index("export") if "export" in stages else len(stages), GATE_STEP)

        pins = plan_record.Pins(sha, data, cache, ready)
        pinned, skip = self.ledger.update(
            run_id,
            lambda r: plan_record.record_pins(r, execution_id, pins),
            detail=lambda r: {"stages": stages, "hf_sha": sha, "cache_hit": bool(ready)},
        )
        if skip is not None:  # cancelled (or finished) while we resolved the revision
            if pinned.terminal:  # its end may have come before our admission: give the place back
                self.policies.ended(pinned)
            return {"skip": True, "skip_reason": skip}
        log.info("planned", stages=stages, hf_sha=sha, cache_hit=bool(ready), data=data_pins.summary(data))
        return {
            "skip": False,
            "skip_reason": None,
            "stages": stages,
            "cache_hit": bool(ready),
            "timeouts": {s: getattr(req.timeouts, s) for s in STAGES},
            "backoff": req.retry.backoff.model_dump(),
            "budgets": req.retry.budgets.model_dump(),
            "max_retries": req.retry.max_retries,
            "poll_seconds": self.settings.callback_timeout_seconds,
            "first_attempt": first_attempts(record),  # attempt numbers go on across rounds
        }

    def _admission(
        self,
        record: RunRecord,
        queued: Queued | None,
        req: Request,
        execution_id: str | None,
        log: Logger,
    ) -> None:
        """Record what the run waits for now (``core.runs.admission``; nothing: it goes on), and end
        it when it has waited longer than ``timeouts.waiting``, failed with what it waited for:
        every wait of the workflow ends (``PermanentFailure`` raised)."""
        stamp = datetime.fromtimestamp(self.clock(), UTC).strftime(LEDGER_TIME)

        if queued is not None or record.admission is not None:
            detail = {
                "waits_for": queued.waits_for if queued else None,
                "reason": queued.reason if queued else None,
            }
            record = self.ledger.edit(
                record.run_id,
                lambda r: (
                    admission.wait(r, queued.waits_for, queued.reason, stamp)
                    if queued
                    else admission.admitted(r)
                ),
                detail=lambda r: detail,
            )
        overdue = admission.overdue(record.admission, req.timeouts.waiting, self.clock()) if queued else None
        if overdue is None:
            return
        log.warning("waited past its bound", reason=overdue)
        where = "select" if queued is not None and queued.waits_for == "selection" else "plan"
        failure = {"tag": "permanent", "message": overdue, "stage": where, "rule": reported.WAIT_BOUND}
        self.finish(record.run_id, "failed", failure, execution_id=execution_id)
        raise PermanentFailure(overdue)

    def _pins(self, record: RunRecord, req: Request) -> tuple[str, dict[str, Any]]:
        """The model commit and datasets this run trains on: pinned once per run (a retried plan
        or round trains on the same commits), and once per group by its coordinator."""
        if record.lineage.hf_sha and record.lineage.data:
            return record.lineage.hf_sha, record.lineage.data

        hub = self._plan_hub(record)

        def resolve() -> tuple[str, dict[str, Any]]:
            sha = record.lineage.hf_sha or self.resolve_revision(req.hf_repo, req.hf_revision, **hub)
            return sha, record.lineage.data or self.pin_data(req, **hub)

        return self.policies.pins(record, resolve)

    def _plan_hub(self, record: RunRecord) -> dict[str, Any]:
        """How plan reaches the Hub for ``record`` (``hub_client.plan_hub``: a team's own token)."""
        return hub_client.plan_hub(record.team, self.settings.teams())

    # ---- launch -------------------------------------------------------------------------------

    def launch(
        self,
        run_id: str,
        stage: Stage,
        attempt: int,
        callback_url: str | None = None,
        execution_id: str | None = None,
    ) -> dict[str, Any]:
        record, req = self._load(run_id)
        log = self.log.bind(run_id=run_id, stage=stage, attempt=attempt)
        require_owner(record, execution_id)
        if callback_url is not None and not callbacks.is_allowed(callback_url, self.settings):
            raise PermanentFailure(
                "callback_url is not a Workflows callback of this deployment's workflow; not stored"
            )
        if record.terminal:
            raise PermanentFailure(f"run {run_id} is {record.state}; not launching {stage}")
        self.policies.may_launch(record, stage)
        newer = record.current_attempt(stage)
        if newer is not None and newer.attempt > attempt:
            raise SupersededAttempt(
                f"{stage} attempt {newer.attempt} exists; attempt {attempt} is not launched"
            )
        if stage == "train" and not record.lineage.data:
            # A run planned before datasets were pinned: pin them now, once, so train never runs
            # on a manifest that points train_rl at files nobody staged.
            data = self.pin_data(req, **self._plan_hub(record))
            record = self.ledger.edit(
                run_id,
                lambda r: launch_record.pin_data(r, data),
                detail=lambda r: {"data": data_pins.summary(data)},
            )
        ctx = self._context(record)
        if stage == "export":  # the step it loads, chosen once and recorded first
            record, ctx = exported_step.choose(self.artifacts, self.ledger, record, req, ctx)
        if stage == "publish":
            # the run's page first, so the link the card carries resolves (control/lifecycle/run_report.py)
            page = run_report.write_run_report(self.state, record, log, settings=self.settings)
            ctx = publishing.publish_context(self.artifacts, record, req, ctx, report=page)
        obj = render(req, stage, attempt, ctx)
        resume = None
        if stage == "train" and attempt > 1:
            run = ctx.run
            resume = layout.latest_committed_step(self.artifacts.list(run.checkpoints), run)
        # Older attempts of this stage must not keep holding the slice while the new one waits.
        cluster = self.cluster_for(record)
        for old in record.attempts:
            if old.stage == stage and old.attempt < attempt and old.phase not in ("deleted",):
                cluster.delete(KIND[stage], old.workload)
        created = cluster.apply(obj)
        uid = (created.get("metadata") or {}).get("uid")
        name = obj["metadata"]["name"]
        paths_uri = stage_paths(req, ctx, stage, attempt).output
        interleave.point("stage.launch:applied")
        launched = launch_record.Launch(
            run_id, stage, attempt, name, uid, resume, paths_uri, callback_url, execution_id
        )
        recorded, refused = self.ledger.update(
            run_id,
            lambda r: launch_record.apply(r, launched, req, ctx),
            detail=lambda r: {
                "stage": stage,
                "attempt": attempt,
                "workload": name,
                "uid": uid,
                "resume_step": resume,
            },
        )
        if refused is not None:
            cluster.delete(KIND[stage], name)
            log.warning(
                "launch refused after apply; deleted the workload", workload=name, reason=refused.reason
            )
            raise refused
        # Again after our record: a late launch of an older attempt (an HTTP retry of it) that
        # applied between our delete and our record would otherwise run beside this one until a
        # reconcile pass. From here on, such a launch is refused by the record (superseded).
        for old in recorded.attempts:  # the record as our update left it: no second read
            if old.stage == stage and old.attempt < attempt:
                cluster.delete(KIND[stage], old.workload)
        log.info("launched", workload=name, uid=uid, resume_step=resume)
        return {"workload": name, "uid": uid, "resume_step": resume}

    # ---- status -------------------------------------------------------------------------------

    def status(
        self, run_id: str, stage: Stage, attempt: int, execution_id: str | None = None
    ) -> dict[str, Any]:
        record, req = self._load(run_id)
        log = self.log.bind(run_id=run_id, stage=stage, attempt=attempt)
        require_owner(record, execution_id)
        known = record.attempt_record(stage, attempt)
        if known is not None and known.phase == reported.STOPPED_TAG:  # a read again after its stop
            return self._stopped(record, attempt, known.reason or "stopped early", execution_id, log)
        name = workload_name(run_id, stage, attempt)
        ws = self.cluster_for(record).status(
            name,
            kind=KIND[stage],
            retryable_exit_codes=TRANSIENT_EXIT_CODES
            if stage == "publish"
            # the head's staging step exits 75 when the Hub or GCS failed on the way (core.staging)
            else (*req.retry.retryable_exit_codes, *((staging.EXIT_TRANSIENT,) if stage == "train" else ())),
            queued_deadline_seconds=float(req.timeouts.queued),
        )
        progress = seen = cursor = None
        ended: train_verdict.TrainOutcome | None = None
        if stage == "train" and ws.phase in ("running", "succeeded", "failed"):
            progress, seen, cursor, found = self.read_train_log(record, name, attempt)
            if ws.phase == "succeeded":
                ended = self._train_end(record, req, attempt, progress, log_read=found)
        ctx = self._context(record)
        if ended is not None and ended.final is not None:
            ctx = replace(ctx, final_step=ended.final)
        complete = stored_outputs.stage_complete(self.artifacts, req, ctx, stage, attempt)
        # What the workload says, judged with what the bucket holds, the deadline and the budgets
        # (core.failure_rules.attempt): a Job that succeeded without its artifact is a failure.
        cls = FailureClass(ws.failure_class or "permanent") if ws.phase == "failed" else None
        first = min((a.launched_at for a in this_round(record, stage)), default=None)  # a retry starts afresh
        verdict = decide_attempt(
            AttemptEvidence(
                stage=stage,
                workload=name,
                phase=ws.phase,
                failure_class=cls,
                message=ws.reason,
                rule=ws.rule,
                train_end=ended,
                output=complete,
                age_seconds=_age_seconds(first, self.clock()) if first else None,
                timeout_seconds=getattr(req.timeouts, stage),
                budget=budgets.use(record, req, stage, attempt, cls) if cls else None,
            )
        )
        phase, failure = verdict.phase, verdict.failure()
        if phase == "succeeded" and stage == "convert":
            stored_outputs.publish_conversion(self.state, self.ledger, req, self._context(record), attempt)
        commit = (
            stored_outputs.published_commit(self.artifacts, run_id, ctx.cache_scope)
            if phase == "succeeded" and stage == "publish"
            else None
        )
        final = None
        if stage == "train":
            final = (
                ended.final if ended is not None and ended.final is not None else layout.final_step_for(req)
            )
        moved = cursor.to_json() if cursor is not None else None
        reading = phase_record.Reading(
            phase, failure, progress, seen, final, ws.pod_chip_hours, moved, commit, ws.reserved_chip_hours
        )
        recorded = self._record_phase(
            run_id,
            stage,
            attempt,
            reading,
            log,
            extra=(lambda r: verdict_record.record_train_end(r, ended, attempt))
            if ended
            else (lambda r: _record_manifest_digest(r, complete.manifest_sha256))
            if phase == "succeeded" and stage == "export" and complete.manifest_sha256
            else None,
        )
        if phase == "succeeded" and stage == "export":
            gone = exported_step.prune(self.artifacts, req, ctx, recorded.lineage.exported_step)
            if gone:
                log.info("deleted the checkpoints kept only for export.step", steps=gone)
        if stage == "train" and phase == "running":
            # A sweep's early-stopping rule, on the evaluations this read recorded (or a stop
            # decided before whose carrying out was interrupted).
            stop = self.policies.evaluated(recorded)
            if stop is not None:
                return self._stop_early(recorded, attempt, stop, ws.pod_chip_hours, execution_id, log)
        return {
            "phase": phase,
            "failure": failure,
            "reason": ws.reason,
            "artifact": complete.reason,
            "progress": progress,
        }

    def read_train_log(
        self, record: RunRecord, name: str, attempt: int
    ) -> tuple[dict[str, Any], dict[str, Any], LogCursor | None, bool]:
        reader = self.cloud_logs
        namespace = self._namespace(record)
        if reader is not None and namespace != self.settings.namespace:  # the team's pods' lines
            reader = cloud_logs.head_reader(replace(self.settings, namespace=namespace))
        return train_status.read_train_log(self.cluster_for(record), reader, record, name, attempt)

    def _train_end(
        self, record: RunRecord, req: Request, attempt: int, progress: dict[str, Any], *, log_read: bool
    ) -> train_verdict.TrainOutcome:
        return train_status.train_end(
            self.artifacts,
            record,
            req,
            attempt,
            progress,
            log_read=log_read,
            scope=self.settings.teams().cache_scope(record.team),
        )

    def _record_phase(
        self,
        run_id: str,
        stage: str,
        attempt: int,
        reading: phase_record.Reading,
        log: Logger,
        *,
        extra: Callable[[RunRecord], None] | None = None,
    ) -> RunRecord:

        def change(r: RunRecord) -> tuple[str | None, Attempt | None]:
            what, ended = phase_record.apply(r, stage, attempt, reading, self.settings.prices_json)
            if extra is not None and what is not None:
                extra(r)  # in the same compare-and-swap as the phase: never one without the other
            return what, ended

        failure = reading.failure
        recorded, ended = self.ledger.update(
            run_id,
            change,
            detail=lambda r: {"stage": stage, "attempt": attempt, "phase": reading.phase, "failure": failure},
        )
        if failure and reading.phase == "failed":
            log.warning("attempt failed", failure=failure)
        if ended is not None:
            quality_gate.log_stage_ended(self.log, recorded, ended, self.clock())
        return recorded

    def _stop_early(
        self,
        record: RunRecord,
        attempt: int,
        stop: EarlyStopRecord,
        chips: Mapping[str, float],
        execution_id: str | None,
        log: Logger,
    ) -> dict[str, Any]:
        """Its sweep's rule stopped this child: its workloads deleted (the slice goes back), the
        attempt ended ``stopped`` with the chip-hours it held, then the run finished (``_stopped``)."""
        deleted = self.cluster_for(record).delete_run(record.run_id)
        why = {"tag": reported.STOPPED_TAG, "message": stop.reason, "rule": reported.SWEEP_EARLY_STOPPED}
        self._record_phase(
            record.run_id, "train", attempt, phase_record.Reading("stopped", why, chips=chips), log
        )
        log.info("stopped early", rule=stop.rule, step=stop.step, deleted=deleted)
        return self._stopped(record, attempt, stop.reason, execution_id, log, deleted=True)

    def _stopped(
        self,
        record: RunRecord,
        attempt: int,
        reason: str,
        execution_id: str | None,
        log: Logger,
        *,
        deleted: bool = False,
    ) -> dict[str, Any]:
        """The run of an attempt that ended ``stopped`` finished ``stopped`` (its slot goes back to
        the sweep there; a repeat finishes nothing), and the answer the workflow gets, every time it
        asks: a failure tagged ``stopped``, which it does not retry and ends its execution with."""
        failure = {
            "tag": reported.STOPPED_TAG,
            "message": reason,
            "stage": "train",
            "attempt": attempt,
            "rule": reported.SWEEP_EARLY_STOPPED,
        }
        if not deleted and not record.terminal:  # a stop interrupted before its end
            self.cluster_for(record).delete_run(record.run_id)
        self.finish(record.run_id, reported.STOPPED_TAG, failure, execution_id=execution_id)
        answer = {"tag": reported.STOPPED_TAG, "message": reason, "rule": reported.SWEEP_EARLY_STOPPED}
        return {"phase": "failed", "failure": answer, "reason": reason, "artifact": None, "progress": None}

    # ---- finish / cleanup ---------------------------------------------------------------------

    def finish(
        self,
        run_id: str,
        outcome: str,
        failure: dict[str, Any] | None = None,
        execution_id: str | None = None,
        *,
        caller: str | None = None,
    ) -> dict[str, Any]:
        """End the run once. The status message goes out only from the call that ended it: a late
        duplicate ``finish`` (an HTTP retry, a second execution, the reconciler) publishes nothing.
        ``caller``: the verified identity of a person who ended it (``cancel``), kept on the failure."""
        tag = (failure or {}).get("tag")
        if outcome == "failed" and tag in (quality_gate.GATED, reported.STOPPED_TAG):
            outcome = str(tag)  # the workflow reports the gate's and early stopping's failure like any other
        if outcome not in ("succeeded", "failed", "cancelled", quality_gate.GATED, reported.STOPPED_TAG):
            raise PermanentFailure(f"unknown outcome {outcome!r}")
        record, req = self._load(run_id)
        require_owner(record, execution_id)
        group = self._end_group(record, outcome, caller)
        if group is not None:  # a run that stands for a group (a sweep's parent): it ends with them
            return status_message(group)

        updated, ended = self.ledger.update(
            run_id,
            lambda r: end_record.end(r, outcome, failure, caller),
            detail=lambda r: {"state": r.state, "failure": r.failure.model_dump() if r.failure else None},
        )
        message = status_message(updated)
        notifier = Notifier(self.settings, self.publish, self.log)
        if ended:
            notifier.send(updated)
        self.log.bind(run_id=run_id).info("finished", state=updated.state, failure=message.get("failure"))
        if ended:
            quality_gate.log_run_ended(self.log, updated)
            if req.publish is not None:  # the page its card links, now with how the run ended
                run_report.write_run_report(self.state, updated, self.log, settings=self.settings)
        if updated.terminal:
            # Also when a repeated finish (an HTTP retry after our write) ended nothing: the
            # group's refresh is safe to repeat, and its message goes out from one call only (on
            # the child's topic: the parent's request names the same).
            group = self.policies.ended(updated)
            if group is not None:
                notifier.send(group, topic=req.notify or self.settings.status_topic)
        return message

    def end_group(
        self, run_id: str, outcome: str, caller: str | None, refused: dict[str, str] | None = None
    ) -> list[tuple[str, list[HeldWorkload]]]:
        """End the members of a run that stands for a group (a sweep's parent) that have not
        ended, as ``finish`` would; → each member ended, with the workloads it held, for the
        cancel to read them to their ends (``cancel_read``). Nothing for any other run.
        ``refused``: filled with each member whose workloads the cluster would not delete, and why."""
        record = self.ledger.get(run_id)
        ended: list[tuple[str, list[HeldWorkload]]] = []
        if record is not None:
            self._end_group(record, outcome, caller, ended, refused)
        return ended

    def _end_group(
        self,
        record: RunRecord,
        outcome: str,
        caller: str | None,
        ended: list[tuple[str, list[HeldWorkload]]] | None = None,
        refused: dict[str, str] | None = None,
    ) -> RunRecord | None:
        """A person ends a run that stands for a group: each member not ended yet has its
        workloads deleted and is finished with the group's failure, by the same caller (each one
        added to ``ended``, with what it held). A delete the cluster refuses is logged and the
        member finished still, as a run's own cancel does: one refusal must not leave the other
        members, and the group, running on."""

        def end_member(run_id: str, failure: dict[str, Any]) -> None:
            held = self.record_held(run_id)  # what its pods held up to now, before they go
            try:
                self.cluster_for(record).delete_run(run_id)  # a group's members are of its team
            except Exception as exc:  # as for a run's own cancel: finished still; reconcile deletes
                error = f"{type(exc).__name__}: {exc}".strip()
                self.log.bind(run_id=run_id).warning(
                    "cancel: cleanup failed (reconcile deletes what is left)", error=error
                )
                if refused is not None:
                    refused[run_id] = error
                self.finish(run_id, "cancelled", failure, caller=caller)
                return  # its pods are not ending: nothing to read to their ends
            self.record_ended(run_id, held)  # and through their termination, to their own ends
            self.finish(run_id, "cancelled", failure, caller=caller)
            if ended is not None:
                ended.append((run_id, held))

        return self.policies.end_group(record, outcome, caller=caller, end_member=end_member)

    # ---- gate ---------------------------------------------------------------------------------

    def gate(self, run_id: str, execution_id: str | None = None) -> dict[str, Any]:
        """After train: does the model meet the request's thresholds? The verdict (or a person's
        override) is recorded in the ledger; the workflow raises the answer's ``tag`` when not passed."""
        record, req = self._load(run_id)
        require_owner(record, execution_id)
        if req.export is not None and req.export.step != "last":
            # The gate judges the model export will load: its step is chosen first, once.
            exported_step.choose(self.artifacts, self.ledger, record, req, self._context(record))
        return quality_gate.gate(self.ledger, self.log, run_id, req)

    def select(self, run_id: str, execution_id: str | None = None) -> dict[str, Any]:
        """Before a sweep child's publish: wait for its siblings, then learn whether it publishes."""
        record, req = self._load(run_id)
        require_owner(record, execution_id)
        answer = self.policies.select(record)
        self.policies.arrived_at_selection(record)
        queued = Queued("selection", f"at selection: {answer['reason']}") if answer.get("wait") else None
        self._admission(record, queued, req, execution_id, self.log.bind(run_id=run_id))
        return answer

    def record_held(self, run_id: str) -> list[HeldWorkload]:
        """One last read of the pods of each attempt that has not ended, recording the chip-hours
        they have held up to now, before something deletes them (a cancel): the workflow reads them
        only on its poll, so without this the time since its last read would go unrecorded. → the
        workloads read, for ``record_ended`` to read their pods again once the delete has ended
        them. Only the chip-hours change (``phase_record.record_chips``): a phase the workflow's own
        read records meanwhile stands. Never raises: an attempt whose read fails keeps its figure
        (and is not read again), the others are still read, and what asked goes on."""
        log = self.log.bind(run_id=run_id)
        try:
            record = self.ledger.get(run_id)
        except Exception as exc:  # the ledger refused: the figures stay at the workflow's last reads
            log.warning("chip-hours: the last read failed", error=f"{type(exc).__name__}: {exc}")
            return []
        if record is None:
            return []
        cluster = self.cluster_for(record)
        read: list[HeldWorkload] = []
        for a in record.attempts:
            if a.finished_at is not None:
                continue
            try:
                ws = cluster.status(a.workload, kind=KIND[a.stage])
                if ws.pod_chip_hours or ws.reserved_chip_hours is not None:  # ended unread: Kueue's
                    self._record_chips(run_id, a.stage, a.attempt, ws.pod_chip_hours, ws.reserved_chip_hours)
                if ws.exists and ws.uid:
                    read.append(HeldWorkload(a.stage, a.attempt, ws.kind, ws.name, ws.uid))
            except Exception as exc:  # this attempt's figure stays at the workflow's last read
                log.warning(
                    "chip-hours: the last read failed",
                    workload=a.workload,
                    error=f"{type(exc).__name__}: {exc}",
                )
        return read

    def record_ended(self, run_id: str, held: list[HeldWorkload]) -> None:
        """After the delete of ``held`` (what ``record_held`` read): their pods read once more, each
        counted up to its own end as Kubernetes reports it (its containers' ``finishedAt``, else the
        ``deletionTimestamp`` the API server stamped when its deletion was asked, the moment the
        kubelet kills it), so that a cancelled attempt is charged what its pods held through their
        termination, not up to the read before the delete. Never below that read (a pod keeps the
        most it was read holding). Never raises: an attempt whose read fails keeps its figure."""
        if not held:
            return
        log = self.log.bind(run_id=run_id)
        try:
            record = self.ledger.get(run_id)
        except Exception as exc:
            log.warning("chip-hours: the read after the delete failed", error=f"{type(exc).__name__}: {exc}")
            return
        if record is None:
            return
        cluster = self.cluster_for(record)
        if not isinstance(cluster, PodsToEnd):
            return
        for w in held:
            try:
                ended = cluster.pod_chip_hours_to_end(
                    w.kind, w.name, uid=w.uid, run_id=run_id, stage=w.stage, attempt=w.attempt
                )
                if ended:
                    self._record_chips(run_id, w.stage, w.attempt, ended)
            except Exception as exc:  # this attempt's figure stays at the read before the delete
                log.warning(
                    "chip-hours: the read after the delete failed",
                    workload=w.name,
                    error=f"{type(exc).__name__}: {exc}",
                )

    def _record_chips(
        self, run_id: str, stage: str, attempt: int, held: Mapping[str, float], reserved: float | None = None
    ) -> None:
        prices = self.settings.prices_json
        self.ledger.update(
            run_id,
            lambda r: (phase_record.record_chips(r, stage, attempt, held, prices, reserved), None),
            detail=lambda r: {"stage": stage, "attempt": attempt},
        )

    def cleanup(self, run_id: str, execution_id: str | None = None) -> dict[str, Any]:
        record = self.ledger.get(run_id)
        if record is not None:
            require_owner(record, execution_id)  # a lagging execution must not delete the live attempt
        deleted = (self.cluster_for(record) if record is not None else self.cluster).delete_run(run_id)
        if self.ledger.get(run_id) is not None:
            self.ledger.note(run_id, "cleanup", {"deleted": deleted})
        self.log.bind(run_id=run_id).info("cleaned up", deleted=deleted)
        return {"deleted": deleted}


def _age_seconds(timestamp: str, now_epoch: float) -> float:
    return now_epoch - parse_time(timestamp).timestamp()


def _record_manifest_digest(record: RunRecord, digest: str | None) -> None:
    """Export ended: the digest of the manifest its done rule was judged on, which publish checks
    (a manifest rewritten after export, listing a planted file, is then refused)."""
    record.lineage.export_manifest_sha256 = digest
