"""The operations the workflow calls through the ``stage`` function: plan, launch, status, finish, cleanup.

The workflow only sequences and retries; every decision about what is *true* is made here, from
two independent facts: what the cluster says about the workload and what the bucket holds. A Job
that succeeded without its artifact is a failure, and an artifact without a finished Job is not
done yet.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol, cast

from rlpipe.cluster.kinds import Kind
from rlpipe.cluster.status import WorkloadStatus
from rlpipe.control import blobstore, hub
from rlpipe.control.ledger import STAGE_STATE, Attempt, Failure, Ledger, RunRecord, now
from rlpipe.control.logs import Logger
from rlpipe.control.settings import Settings
from rlpipe.core import layout
from rlpipe.core.failures import FailureClass, PermanentFailure, PipelineFailure
from rlpipe.core.identity import STAGES, Stage, workload_name
from rlpipe.core.manifests import RenderContext, conversion_cache, render
from rlpipe.core.request import Request

KIND: dict[str, Kind] = {"convert": "Job", "train": "JobSet", "export": "Job"}


class Cluster(Protocol):
    """What the stage operations need of ``rlpipe.cluster.ClusterClient`` (tests pass doubles)."""

    def apply(self, obj: dict[str, Any]) -> dict[str, Any]: ...
    def status(
        self,
        name: str,
        *,
        kind: Kind,
        retryable_exit_codes: Collection[int] = (),
        queued_deadline_seconds: float | None = None,
    ) -> WorkloadStatus: ...
    def delete_run(self, run_id: str) -> list[str]: ...
    def delete(self, kind: Kind, name: str) -> bool: ...
    def log_tail(self, jobset: str) -> str: ...


@dataclass
class StageService:
    settings: Settings
    ledger: Ledger
    artifacts: blobstore.BlobStore
    cluster: Cluster
    log: Logger
    resolve_revision: Callable[[str, str], str] = field(
        default=lambda repo, rev: hub.resolve_revision(repo, rev)
    )
    publish: Callable[[str, dict[str, Any]], Any] | None = None
    clock: Callable[[], float] = time.time

    # ---- helpers ------------------------------------------------------------------------------

    def _load(self, run_id: str) -> tuple[RunRecord, Request]:
        record = self.ledger.get(run_id)
        if record is None:
            raise PermanentFailure(f"run {run_id} has no ledger")
        return record, Request.model_validate(record.request)

    def _context(self, record: RunRecord) -> RenderContext:
        return RenderContext(
            run_id=record.run_id,
            bucket=self.artifacts.bucket_name,
            namespace=self.settings.namespace,
            service_account=self.settings.workload_service_account,
            hf_revision=record.lineage.hf_sha,
            converted_dir=_dir_of(record.lineage.converted_uri),
        )

    # ---- plan ---------------------------------------------------------------------------------

    def plan(self, run_id: str, execution_id: str | None = None) -> dict[str, Any]:
        record, req = self._load(run_id)
        log = self.log.bind(run_id=run_id)
        if record.terminal:
            return {"skip": True, "skip_reason": f"run is already {record.state}"}
        owner = record.execution.name
        if owner and execution_id and owner.rsplit("/", 1)[-1] != execution_id:
            log.warning("a second execution reached plan; it stops here", execution_id=execution_id)
            return {"skip": True, "skip_reason": f"run is owned by execution {owner}"}
        try:
            sha = record.lineage.hf_sha or self.resolve_revision(req.hf_repo, req.hf_revision)
        except PermanentFailure as exc:
            # The execution owns the run (checked above), so the run ends here with the reason.
            self.finish(run_id, "failed", {"tag": "permanent", "message": exc.reason, "stage": "plan"})
            raise
        rev_ctx = RenderContext(run_id=run_id, bucket=self.artifacts.bucket_name, hf_revision=sha)
        cache = conversion_cache(req, rev_ctx)
        ready = self._ready(cache)
        stages = [s for s in STAGES if not (s == "convert" and ready)]

        def record_plan(r: RunRecord) -> str | None:
            if (
                r.lineage.hf_sha == sha
                and r.lineage.conversion_key == cache.key
                and r.lineage.conversion_cache_hit == bool(ready)
            ):
                return None
            r.lineage.hf_sha = sha
            r.lineage.conversion_key = cache.key
            r.lineage.conversion_cache_hit = bool(ready)
            if ready:
                r.lineage.converted_uri = layout.gs(cache.bucket, ready)
            if execution_id and not r.execution.name:
                # Intake crashed between starting the execution and recording it: record it here.
                r.execution.name = f"{self.settings.workflow_path}/executions/{execution_id}"
            return "planned"

        self.ledger.update(
            run_id, record_plan, detail=lambda r: {"stages": stages, "hf_sha": sha, "cache_hit": bool(ready)}
        )
        log.info("planned", stages=stages, hf_sha=sha, cache_hit=bool(ready))
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
        }

    def _ready(self, cache: layout.ConversionCache) -> str | None:
        """The finished conversion attempt directory named by READY.json, if any."""
        try:
            data, _ = self.artifacts.read_json(cache.ready)
        except blobstore.NotFound:
            return None
        directory = data.get("attempt_dir") if isinstance(data, dict) else None
        return directory if isinstance(directory, str) and directory.startswith(cache.prefix) else None

    # ---- launch -------------------------------------------------------------------------------

    def launch(
        self, run_id: str, stage: Stage, attempt: int, callback_url: str | None = None
    ) -> dict[str, Any]:
        record, req = self._load(run_id)
        log = self.log.bind(run_id=run_id, stage=stage, attempt=attempt)
        if record.terminal:
            raise PermanentFailure(f"run {run_id} is {record.state}; not launching {stage}")
        ctx = self._context(record)
        obj = render(req, stage, attempt, ctx)
        resume = None
        if stage == "train" and attempt > 1:
            run = layout.RunLayout(self.artifacts.bucket_name, run_id)
            resume = layout.latest_committed_step(self.artifacts.list(run.checkpoints), run)
        # Older attempts of this stage must not keep holding the slice while the new one waits.
        for old in record.attempts:
            if old.stage == stage and old.attempt < attempt and old.phase not in ("deleted",):
                self.cluster.delete(KIND[stage], old.workload)
        created = self.cluster.apply(obj)
        uid = (created.get("metadata") or {}).get("uid")
        name = obj["metadata"]["name"]
        paths_uri = _lineage_uri(ctx, req, stage, attempt)

        def record_launch(r: RunRecord) -> str | None:
            r.set_state(STAGE_STATE[stage])
            r.stage, r.attempt = stage, attempt
            if callback_url:
                r.callbacks[stage] = callback_url
            for old in r.attempts:
                if (
                    old.stage == stage
                    and old.attempt < attempt
                    and old.phase in ("launched", "queued", "running")
                ):
                    old.phase, old.finished_at = "superseded", old.finished_at or now()
            if r.attempt_record(stage, attempt) is None:
                r.attempts.append(
                    Attempt(
                        stage=stage,
                        attempt=attempt,
                        workload=name,
                        uid=uid,
                        launched_at=now(),
                        resume_step=resume,
                    )
                )
            if stage == "convert":
                r.lineage.converted_uri = paths_uri
            elif stage == "train":
                r.lineage.checkpoint_uri = paths_uri
                r.lineage.final_step = layout.final_step(req.training.num_batches)
            else:
                r.lineage.export_uri = paths_uri
            return "launched"

        self.ledger.update(
            run_id,
            record_launch,
            detail=lambda r: {
                "stage": stage,
                "attempt": attempt,
                "workload": name,
                "uid": uid,
                "resume_step": resume,
            },
        )
        log.info("launched", workload=name, uid=uid, resume_step=resume)
        return {"workload": name, "uid": uid, "resume_step": resume}

    # ---- status -------------------------------------------------------------------------------

    def status(self, run_id: str, stage: Stage, attempt: int) -> dict[str, Any]:
        record, req = self._load(run_id)
        log = self.log.bind(run_id=run_id, stage=stage, attempt=attempt)
        name = workload_name(run_id, stage, attempt)
        ws = self.cluster.status(
            name,
            kind=KIND[stage],
            retryable_exit_codes=req.retry.retryable_exit_codes,
            queued_deadline_seconds=float(req.timeouts.queued),
        )
        complete = self._artifact_complete(record, req, stage, attempt)
        phase, failure = ws.phase, None
        if ws.phase == "succeeded" and not complete.complete:
            phase, failure = (
                "failed",
                {
                    "tag": "permanent",
                    "message": f"{name} succeeded but its output is incomplete: {complete.reason}",
                },
            )
        elif ws.phase == "failed":
            failure = self._classify_with_budget(
                record, req, stage, attempt, FailureClass(ws.failure_class or "permanent"), ws.reason
            )
        elif ws.phase in ("queued", "running"):
            first = min((a.launched_at for a in record.attempts if a.stage == stage), default=None)
            if first and _age_seconds(first, self.clock()) > getattr(req.timeouts, stage):
                phase, failure = (
                    "failed",
                    {
                        "tag": "permanent",
                        "message": f"{stage} deadline exceeded "
                        f"({getattr(req.timeouts, stage)} s since its first launch)",
                    },
                )
        if phase == "succeeded" and stage == "convert":
            self._publish_conversion(record, req, attempt)
        progress = None
        if stage == "train" and ws.phase in ("running", "succeeded", "failed"):
            progress = training_progress(self.cluster.log_tail(name))
        self._record_phase(run_id, stage, attempt, phase, failure, log, progress)
        return {
            "phase": phase,
            "failure": failure,
            "reason": ws.reason,
            "artifact": complete.reason,
            "progress": progress,
        }

    def _artifact_complete(
        self, record: RunRecord, req: Request, stage: str, attempt: int
    ) -> layout.Completeness:
        bucket = self.artifacts.bucket_name
        run = layout.RunLayout(bucket, record.run_id)
        if stage == "convert":
            cache = conversion_cache(req, self._context(record))
            directory = cache.attempt_dir(record.run_id, attempt)
            return layout.convert_complete(self.artifacts.list(directory + "0/"), directory)
        if stage == "train":
            final = layout.final_step(req.training.num_batches)
            return layout.train_complete(
                self.artifacts.list(run.step_dir(final)), run, req.training.num_batches
            )
        names = list(self.artifacts.list(run.hf_dir))
        index = None
        if run.hf_dir + layout.HF_INDEX in names:
            try:
                index = self.artifacts.read(run.hf_dir + layout.HF_INDEX).json()
            except (ValueError, blobstore.NotFound):
                index = {}
        return layout.export_complete(names, run.hf_dir, index)

    def _publish_conversion(self, record: RunRecord, req: Request, attempt: int) -> None:
        """First finished conversion of a key wins READY.json; everyone then loads the winner's."""
        cache = conversion_cache(req, self._context(record))
        mine = cache.attempt_dir(record.run_id, attempt)
        self.artifacts.create(
            cache.ready, blobstore.dumps({"attempt_dir": mine, "run_id": record.run_id, "written_at": now()})
        )
        winner = self._ready(cache) or mine
        uri = layout.gs(cache.bucket, winner)

        def set_converted(r: RunRecord) -> str | None:
            if r.lineage.converted_uri == uri:
                return None
            r.lineage.converted_uri = uri
            return "conversion-published"

        self.ledger.update(record.run_id, set_converted, detail=lambda r: {"converted_uri": uri})

    def _classify_with_budget(
        self, record: RunRecord, req: Request, stage: str, attempt: int, cls: FailureClass, reason: str
    ) -> dict[str, str]:
        if cls == FailureClass.PERMANENT:
            return {"tag": cls.value, "message": reason}
        budget = getattr(req.retry.budgets, cls.value)
        used = sum(
            1
            for a in record.attempts
            if a.stage == stage and a.failure_class == cls.value and a.attempt != attempt
        )
        total = sum(
            1 for a in record.attempts if a.stage == stage and a.failure_class and a.attempt != attempt
        )
        if used + 1 > budget:
            return {
                "tag": "permanent",
                "message": f"{cls.value} budget of {budget} exhausted for {stage}: {reason}",
            }
        if total + 1 > req.retry.max_retries:
            return {
                "tag": "permanent",
                "message": f"retry cap of {req.retry.max_retries} reached for {stage}: {cls.value}: {reason}",
            }
        return {"tag": cls.value, "message": reason}

    def _record_phase(
        self,
        run_id: str,
        stage: str,
        attempt: int,
        phase: str,
        failure: dict[str, str] | None,
        log: Logger,
        progress: dict[str, Any] | None = None,
    ) -> None:
        def change(r: RunRecord) -> str | None:
            a = r.attempt_record(stage, attempt)
            if a is None:
                return None
            if a.phase == phase:
                if progress and progress != r.progress:
                    r.progress = progress
                    return "progress"
                return None
            if progress:
                r.progress = progress
            a.phase = phase
            if phase in ("succeeded", "failed"):
                a.finished_at = now()
            if failure:
                a.failure_class, a.reason = failure["tag"], failure["message"]
            return phase

        self.ledger.update(
            run_id,
            change,
            detail=lambda r: {"stage": stage, "attempt": attempt, "phase": phase, "failure": failure},
        )
        if failure:
            log.warning("attempt failed", failure=failure)

    # ---- finish / cleanup ---------------------------------------------------------------------

    def finish(self, run_id: str, outcome: str, failure: dict[str, Any] | None = None) -> dict[str, Any]:
        if outcome not in ("succeeded", "failed", "cancelled"):
            raise PermanentFailure(f"unknown outcome {outcome!r}")
        _, req = self._load(run_id)

        def change(r: RunRecord) -> str | None:
            if r.terminal:
                return None
            r.set_state(outcome)  # type: ignore[arg-type]
            if failure:
                r.failure = Failure(
                    tag=str(failure.get("tag", "permanent")),
                    message=str(failure.get("message", "")),
                    stage=failure.get("stage"),
                    attempt=failure.get("attempt"),
                )
            return outcome

        updated = self.ledger.update(
            run_id,
            change,
            detail=lambda r: {"state": r.state, "failure": r.failure.model_dump() if r.failure else None},
        )
        message = status_message(updated)
        topic = req.notify or self.settings.status_topic
        if topic and self.publish is not None:
            try:
                self.publish(self.settings.topic_path(topic), message)
            except Exception as exc:  # a status message must never turn a finished run into a failed call
                self.log.bind(run_id=run_id).warning("could not publish the status message", error=str(exc))
        self.log.bind(run_id=run_id).info("finished", state=updated.state, failure=message.get("failure"))
        return message

    def cleanup(self, run_id: str) -> dict[str, Any]:
        deleted = self.cluster.delete_run(run_id)
        if self.ledger.get(run_id) is not None:
            self.ledger.note(run_id, "cleanup", {"deleted": deleted})
        self.log.bind(run_id=run_id).info("cleaned up", deleted=deleted)
        return {"deleted": deleted}

    # ---- dispatch for the HTTP function -------------------------------------------------------

    def handle(self, body: dict[str, Any]) -> dict[str, Any]:
        op = body.get("op")
        run_id = body.get("run_id")
        if not isinstance(run_id, str) or not run_id:
            raise BadCall("run_id is required")
        if op == "plan":
            return self.plan(run_id, _opt_str(body, "execution_id"))
        if op == "launch":
            return self.launch(run_id, _stage(body), _attempt(body), _opt_str(body, "callback_url"))
        if op == "status":
            return self.status(run_id, _stage(body), _attempt(body))
        if op == "finish":
            return self.finish(run_id, str(body.get("outcome")), body.get("failure"))
        if op == "cleanup":
            return self.cleanup(run_id)
        raise BadCall(f"unknown op {op!r}; one of plan, launch, status, finish, cleanup")


class BadCall(PipelineFailure):
    """The workflow sent a malformed call: a bug, never retried."""


def _opt_str(body: dict[str, Any], key: str) -> str | None:
    value = body.get(key)
    return value if isinstance(value, str) and value else None


def _stage(body: dict[str, Any]) -> Stage:
    stage = body.get("stage")
    if stage not in STAGES:
        raise BadCall(f"stage must be one of {', '.join(STAGES)}")
    return cast(Stage, stage)


def _attempt(body: dict[str, Any]) -> int:
    attempt = body.get("attempt")
    if isinstance(attempt, float) and attempt.is_integer():
        attempt = int(attempt)
    if not isinstance(attempt, int) or isinstance(attempt, bool) or attempt < 1:
        raise BadCall("attempt must be an integer >= 1")
    return attempt


def _dir_of(uri: str | None) -> str | None:
    if not uri:
        return None
    return layout.parse_gs(uri)[1]


def _lineage_uri(ctx: RenderContext, req: Request, stage: Stage, attempt: int) -> str:
    from rlpipe.core.manifests import stage_paths

    return stage_paths(req, ctx, stage, attempt).output


def _age_seconds(timestamp: str, now_epoch: float) -> float:
    started = datetime.strptime(timestamp, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
    return now_epoch - started.timestamp()


_REWARD = re.compile(r"mean_reward[=:]\s*(-?[0-9.]+(?:e-?[0-9]+)?)")
_STEP = re.compile(r"\bstep[=: ]\s*([0-9]+)", re.IGNORECASE)


def training_progress(log_text: str) -> dict[str, Any] | None:
    """The latest step and mean_reward the trainer printed, if any."""
    for line in reversed(log_text.splitlines()):
        reward = _REWARD.search(line)
        if reward:
            step = _STEP.search(line)
            return {"mean_reward": float(reward.group(1)), "step": int(step.group(1)) if step else None}
    return None


def status_message(record: RunRecord) -> dict[str, Any]:
    """What subscribers of the status topic receive: the outcome, why, and where the results are."""
    attempts: dict[str, int] = {}
    for a in record.attempts:
        attempts[a.stage] = max(attempts.get(a.stage, 0), a.attempt)
    text = f"run {record.run_id} {record.state}"
    if record.failure:
        text += (
            f" in {record.failure.stage or 'the pipeline'}: [{record.failure.tag}] {record.failure.message}"
        )
    elif record.state == "succeeded" and record.lineage.export_uri:
        text += f"; model at {record.lineage.export_uri}"
    return {
        "run_id": record.run_id,
        "state": record.state,
        "message": text,
        "failure": record.failure.model_dump() if record.failure else None,
        "attempts": attempts,
        "lineage": record.lineage.model_dump(exclude_none=True),
        "request_id": record.request.get("request_id"),
        "model": record.request.get("model"),
        "hf_repo": record.request.get("hf_repo"),
    }
