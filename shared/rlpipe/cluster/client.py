"""The pipeline's Kubernetes operations: idempotent apply, classified status, log tail, delete by label.

Built on :class:`~rlpipe.cluster.transport.KubeTransport` (authentication and the bounded retry
loop); status classification is :func:`~rlpipe.cluster.status.summarize`. Importing this module
costs nothing: ``kubernetes`` loads on first use.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from datetime import UTC, datetime
from typing import Any

from rlpipe.cluster import log_cursor
from rlpipe.cluster.api_errors import (
    _api_failure,
    _check_same_workload,
)
from rlpipe.cluster.evidence import _is_scheduled
from rlpipe.cluster.kinds import (
    JOB_NAME_LABELS,
    JOB_UID_LABELS,
    JOBSET_NAME_LABEL,
    JOBSET_UID_LABEL,
    KINDS,
    KUEUE_JOB_UID_LABEL,
    Kind,
    Obj,
    _deleting,
    _is_jobset_child,
    _kind_of,
    _ts,
)
from rlpipe.cluster.log_cursor import LogCursor
from rlpipe.cluster.status import (
    RunObject,
    WorkloadStatus,
    _summary_phase,
    missing,
    summarize,
    with_reservation,
)
from rlpipe.cluster.transport import KubeTransport
from rlpipe.core import chip_hours, identity
from rlpipe.core.failures import PermanentFailure, TransientFailure

# The package's name, as before the split: log lines keep their ``component``.
log = logging.getLogger("rlpipe.cluster")

# After a workload is deleted, its pods are read again until each TPU pod reports its own end (or
# its deletion deadline): at most SETTLE_READS reads, SETTLE_STEP_SECONDS apart. Why wait at all:
# the delete (Background propagation) returns before the garbage collector has deleted the Jobs
# and then their pods, so the pods' deletionTimestamps appear shortly after it, not with it.
SETTLE_READS = 10
SETTLE_STEP_SECONDS = 1.0


class ClusterClient(KubeTransport):
    """Kubernetes operations of the pipeline, against one namespace (see ``KubeTransport`` for the
    constructor: ``api_retries``, injectable ``sleep`` and ``now``)."""

    # -- public API ---------------------------------------------------------------------------

    def apply(self, obj: Obj) -> Obj:
        """Create a rendered Job or JobSet; if it already exists (a repeated launch of the same
        attempt), return the existing object instead. 422/400 → PermanentFailure naming the problems."""
        from kubernetes.client.exceptions import ApiException

        kind = _kind_of(obj)
        meta = obj.get("metadata") or {}
        name = meta.get("name") or ""
        namespace = meta.get("namespace") or self.namespace
        if namespace != self.namespace:
            raise PermanentFailure(
                f"{kind} {name} is rendered for namespace {namespace!r} but this client "
                f"works in {self.namespace!r}; status and cleanup would never find it"
            )
        for _ in range(2):  # a 409 for an object deleted before we read it: create again, once
            try:
                return self._create(kind, obj)
            except ApiException as exc:
                if exc.status != 409:
                    raise _api_failure(exc, f"create {kind} {name}") from exc
            try:
                existing = self._read(kind, name)
            except ApiException as exc:
                if exc.status == 404:
                    continue
                raise _api_failure(exc, f"get {kind} {name}") from exc
            _check_same_workload(kind, obj, existing)
            return existing
        raise TransientFailure(f"{kind} {name} exists and vanishes as we read it; try again")

    def status(
        self,
        name: str,
        *,
        kind: Kind,
        retryable_exit_codes: Collection[int] = (),
        queued_deadline_seconds: float | None = None,
    ) -> WorkloadStatus:
        """The workload's phase and, when failed, its failure class (precedence: ``core.failure_rules.workload``).

        A missing workload is reported, not raised: ``failed``/``permanent`` "not found (deleted?)";
        the caller knows whether it just launched it or cleaned it up."""
        from kubernetes.client.exceptions import ApiException

        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
        try:
            obj = self._read(kind, name)
        except ApiException as exc:
            if exc.status == 404:
                return missing(kind, name, now=self._now())
            raise _api_failure(exc, f"get {kind} {name}") from exc
        try:
            return self._status_of(kind, obj, retryable_exit_codes, queued_deadline_seconds)
        except ApiException as exc:
            raise _api_failure(exc, f"status of {kind} {name}") from exc

    def _status_of(
        self,
        kind: Kind,
        obj: Obj,
        retryable_exit_codes: Collection[int],
        queued_deadline_seconds: float | None,
    ) -> WorkloadStatus:
        phase = _summary_phase(obj)
        pods = [] if phase == "succeeded" else self._pods_of(kind, obj)
        events: list[Obj] = []
        suspended = bool((obj.get("spec") or {}).get("suspend"))
        if suspended or (phase in ("queued", "running") and not any(_is_scheduled(p) for p in pods)):
            # Kueue's and the controller's explanations; after an eviction the pods are still
            # terminating on their nodes, so a suspended workload is always asked.
            events = self._events_of(kind, obj)
        child_jobs: list[Obj] = []
        if kind == "JobSet" and phase != "succeeded":
            # A child Job at FailureTarget is certain preemption evidence before the JobSet fails.
            child_jobs = self._list_kind("Job", f"{JOBSET_NAME_LABEL}={obj['metadata']['name']}")
        now = self._now()
        status = summarize(
            kind,
            obj,
            pods,
            events,
            now=now,
            retryable_exit_codes=retryable_exit_codes,
            queued_deadline_seconds=queued_deadline_seconds,
            child_jobs=child_jobs,
        )
        uid = (obj.get("metadata") or {}).get("uid")
        if status.finished_at is None or not uid:
            return status
        # Its TPU workers may be gone already (core.chip_hours.reserved_by_kueue). A floor only:
        # a refused read leaves it out, never fails the status read.
        try:
            reserved = self._list_kueue_workloads(f"{KUEUE_JOB_UID_LABEL}={uid}")
        except Exception as exc:
            log.warning(
                "chip-hours: Kueue's Workloads of %s could not be read: %s", obj["metadata"]["name"], exc
            )
            return status
        return with_reservation(status, reserved)

    def _pods_of(self, kind: Kind, obj: Obj) -> list[Obj]:
        """The workload's pods by the controller's labels, else by the run labels; pods of an
        earlier incarnation of the same name (another uid) are left out."""
        meta = obj["metadata"]
        name, uid = meta["name"], meta.get("uid")
        name_labels, uid_labels = (
            (JOB_NAME_LABELS, JOB_UID_LABELS)
            if kind == "Job"
            else ((JOBSET_NAME_LABEL,), (JOBSET_UID_LABEL,))
        )
        selectors = [f"{label}={name}" for label in name_labels]
        labels = meta.get("labels") or {}
        run_keys = (identity.LABEL_RUN, identity.LABEL_STAGE, identity.LABEL_ATTEMPT)
        if all(labels.get(k) for k in run_keys):
            selectors.append(",".join(f"{k}={labels[k]}" for k in run_keys))
        for selector in selectors:
            pods = [
                p
                for p in self._list_pods(selector)
                if all((p["metadata"].get("labels") or {}).get(k, uid) == uid for k in uid_labels)
            ]
            if pods:
                return sorted(pods, key=lambda p: p["metadata"]["name"])
        return []

    def pod_chip_hours_to_end(
        self, kind: Kind, name: str, *, uid: str, run_id: str, stage: str, attempt: int
    ) -> dict[str, float]:
        """Chip-hours each TPU pod of a workload just deleted (of this ``uid``) held up to its own
        end, by pod UID: the last read of a cancelled attempt (``core.chip_hours``, ``final``).

        The workload object is gone, so its pods are found by their controller's labels (or the run
        labels), as :meth:`status` finds them. Read until every TPU pod has settled (its containers
        have exited, or the API server has stamped its ``deletionTimestamp``), at most
        ``SETTLE_READS`` times; a pod still not reached by the garbage collector at the last read
        counts up to now. A pod gone between two reads keeps the figure of the read that last saw
        it. Raises what the API raises (the caller keeps its earlier figure)."""
        from kubernetes.client.exceptions import ApiException

        workload = _deleted(kind, name, uid, run_id, stage, attempt)
        held: dict[str, float] = {}
        for read in range(SETTLE_READS):
            try:
                pods = self._pods_of(kind, workload)
            except ApiException as exc:
                raise _api_failure(exc, f"pods of deleted {kind} {name}") from exc
            held.update(chip_hours.held_by_pod(pods, self._now(), final=True))
            if all(chip_hours.settled(p) for p in pods) or read == SETTLE_READS - 1:
                break
            self._sleep(SETTLE_STEP_SECONDS)
        return held

    def pods_gone(
        self,
        kind: Kind,
        name: str,
        *,
        uid: str,
        run_id: str,
        stage: str,
        attempt: int,
        within: float,
    ) -> bool:
        """Whether every pod of a workload just deleted (of this ``uid``) is gone: its containers
        exited and the kubelet removed it, so its log has its last line. Read every
        SETTLE_STEP_SECONDS for at most ``within`` seconds; False when some pod outlived that.
        Raises what the API raises."""
        from kubernetes.client.exceptions import ApiException

        workload = _deleted(kind, name, uid, run_id, stage, attempt)
        checks = max(0, int(within / SETTLE_STEP_SECONDS)) + 1
        for check in range(checks):
            try:
                if not self._pods_of(kind, workload):
                    return True
            except ApiException as exc:
                raise _api_failure(exc, f"pods of deleted {kind} {name}") from exc
            if check < checks - 1:
                self._sleep(SETTLE_STEP_SECONDS)
        return False

    def _events_of(self, kind: Kind, obj: Obj) -> list[Obj]:
        """Events on the workload, and on the Kueue Workload Kueue made for it (named
        ``<kind>-<name>-<hash>``): that is where Kueue says why it does not admit it."""
        meta = obj["metadata"]
        name, uid = meta["name"], meta.get("uid")
        own = [
            e
            for e in self._list_events(f"involvedObject.name={name}")
            if (e.get("involvedObject") or {}).get("uid") in (None, uid)
        ]
        prefix = f"{kind.lower()}-{name}-"
        kueue = [
            e
            for e in self._list_events("involvedObject.kind=Workload")
            if (e.get("involvedObject") or {}).get("name", "").startswith(prefix)
        ]
        return own + kueue

    def read_log(
        self,
        jobset: str,
        cursor: LogCursor | None,
        *,
        replicated_job: str = "pathways-head",
        container: str = "workload-container",
        limit_bytes: int = log_cursor.READ_LIMIT_BYTES,
    ) -> tuple[list[str], LogCursor | None, bool]:
        """The head's log lines not read before (``cluster/log_cursor.py``), the new cursor, and
        whether the kubelet served them (the caller falls back to Cloud Logging if not: the pod is
        gone, went between its listing and its log read, or its log could not be read).

        Best effort: no lines (and the same cursor) when the log cannot be read; the next read
        starts where this one would have.
        """
        from kubernetes.client.exceptions import ApiException

        selector = (
            f"jobset.sigs.k8s.io/jobset-name={jobset},jobset.sigs.k8s.io/replicatedjob-name={replicated_job}"
        )
        try:
            pods = [
                p
                for p in self._list_pods(selector)
                if (p.get("status") or {}).get("phase") in ("Running", "Succeeded", "Failed")
            ]
            if not pods:
                return [], cursor, False
            newest = sorted(pods, key=lambda p: (p.get("metadata") or {}).get("creationTimestamp") or "")[-1]
            meta = newest["metadata"]
            pod_id = str(meta.get("uid") or meta["name"])
            query: list[tuple[str, Any]] = [("container", container), ("timestamps", "true")]
            since = log_cursor.since_time(cursor, pod_id)
            if since is not None:
                query.append(("sinceTime", since))
            while True:
                data = self._pod_log(meta["name"], [*query, ("limitBytes", limit_bytes)])
                cut_short = len(data) >= limit_bytes
                lines, moved = log_cursor.take_new(
                    data.decode("utf-8", "replace"), cursor, pod_id, cut_short=cut_short
                )
                if lines or not cut_short or limit_bytes >= log_cursor.MAX_READ_LIMIT_BYTES:
                    return lines, moved, True
                limit_bytes *= 4  # one second held more than the limit: ask for more of it
        except (ApiException, TransientFailure) as exc:
            # Not read here: the caller reads Cloud Logging instead. A pod listed and then deleted
            # before its log was asked for answers 404, and that read may be its attempt's last
            # (a preempted head), so its lines would never be read otherwise.
            log.warning(
                "reading the log of %s from its pod failed (read from Cloud Logging instead): %s",
                jobset,
                exc,
            )
            return [], cursor, False

    def _pod_log(self, pod: str, query: list[tuple[str, Any]]) -> bytes:
        """``GET pods/{pod}/log`` with ``query`` as given: the generated client has no ``sinceTime``
        parameter, which the API (PodLogOptions) takes, so the request is built with the client's
        own serializer and sent by its REST layer (same credentials, TLS and timeout)."""
        from kubernetes.client.exceptions import ApiException

        api = self._core.api_client
        request = api.param_serialize(
            method="GET",
            resource_path="/api/v1/namespaces/{namespace}/pods/{name}/log",
            path_params={"namespace": self.namespace, "name": pod},
            query_params=query,
            # As the generated client asks: the real API server refuses `Accept: text/plain` on
            # pods/log with 406 (it answers the log as text whatever the Accept).
            header_params={"Accept": api.select_header_accept(["text/plain", "application/json"])},
            auth_settings=["BearerToken"],
        )

        def get() -> bytes:
            response = api.call_api(*request, _request_timeout=self._timeout)
            data = response.read() or b""
            if not 200 <= response.status <= 299:
                raise ApiException.from_response(http_resp=response, body=None, data=None)
            return bytes(data)

        return self._call(f"log of {pod}", get)

    def delete(self, kind: Kind, name: str) -> bool:
        """Delete one workload (Background propagation, so its pods go too); True if it existed."""
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
        return self._delete_one(kind, name)

    def delete_run(self, run_id: str) -> list[str]:
        """Delete every Job and JobSet of the run (by label), pods included; the names deleted by
        this call. Idempotent: a second call deletes nothing and returns []."""
        selector = identity.run_selector(run_id)
        from kubernetes.client.exceptions import ApiException

        try:
            jobsets = self._list_kind("JobSet", selector)
            jobs = self._list_kind("Job", selector)
        except ApiException as exc:
            raise _api_failure(exc, f"list the objects of run {run_id}") from exc
        deleted = [
            js["metadata"]["name"]
            for js in jobsets
            if not _deleting(js) and self._delete_one("JobSet", js["metadata"]["name"])
        ]
        for job in jobs:
            # A JobSet's child Job goes with its JobSet: the garbage collector removes it, even
            # after the JobSet itself is gone (Background propagation deletes the owner first and
            # the children later, so a second call can still list them).
            if _is_jobset_child(job) or _deleting(job):
                continue
            if self._delete_one("Job", job["metadata"]["name"]):
                deleted.append(job["metadata"]["name"])
        return deleted

    def list_run_objects(self, run_id: str | None = None) -> list[RunObject]:
        """Every top-level Job and JobSet carrying ``rlpipe.dev/run`` (of one run, or all), for
        reconciliation. A JobSet's child Jobs carry the run labels too and are left out."""
        selector = identity.run_selector(run_id) if run_id else identity.LABEL_RUN
        from kubernetes.client.exceptions import ApiException

        try:
            found: list[tuple[Kind, Obj]] = [("JobSet", o) for o in self._list_kind("JobSet", selector)]
            found += [("Job", o) for o in self._list_kind("Job", selector) if not _is_jobset_child(o)]
        except ApiException as exc:
            raise _api_failure(exc, "list run objects") from exc
        out = []
        for kind, obj in found:
            meta = obj["metadata"]
            labels = meta.get("labels") or {}
            attempt = labels.get(identity.LABEL_ATTEMPT, "")
            out.append(
                RunObject(
                    kind=kind,
                    name=meta["name"],
                    run_id=labels.get(identity.LABEL_RUN, ""),
                    stage=labels.get(identity.LABEL_STAGE),
                    attempt=int(attempt) if attempt.isdigit() else None,
                    uid=meta.get("uid", ""),
                    created_at=_ts(meta.get("creationTimestamp")),
                    phase=_summary_phase(obj),
                    deleting=_deleting(obj),
                )
            )
        return sorted(out, key=lambda o: (o.run_id, o.created_at or datetime.min.replace(tzinfo=UTC), o.name))


def _deleted(kind: Kind, name: str, uid: str, run_id: str, stage: str, attempt: int) -> Obj:
    """A deleted workload as ``_pods_of`` finds its pods: the object is gone, so by its controller's
    labels (or the run labels) and its UID."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    labels = {identity.LABEL_RUN: run_id, identity.LABEL_STAGE: stage, identity.LABEL_ATTEMPT: str(attempt)}
    return {"metadata": {"name": name, "uid": uid, "labels": labels}}
