"""The Kubernetes client of the pipeline: idempotent apply, reads, status, log tail, delete by label.

* **Retries of the API itself live here**, with exponential backoff and full jitter, honouring
  ``Retry-After``, bounded by ``api_retries``; only what survives that budget becomes a
  :class:`~rlpipe.core.failures.TransientFailure` for the workflow. urllib3's own status retries are
  switched off on the client we are given, because they sleep on ``Retry-After`` with the real
  clock and outside any budget (the ``kubernetes`` client enables them for idempotent GETs).
* **Raw JSON, verbatim bodies.** Calls use the typed APIs with ``_preload_content=False`` and the
  objects stay plain dicts, exactly as the manifests render them and the apiserver returns them.
  Jobs are created through the generic objects API: the 37.x typed ``create_namespaced_job``
  validates the body against pydantic models that reject valid Kubernetes (integer quantities
  such as ``cpu: 2``) and every field newer than the client. Creates ask for
  ``fieldValidation=Strict`` so the apiserver refuses, rather than silently prunes, unknown fields.
* ``kubernetes`` and ``google.auth`` are imported on first use: importing this module (e.g. for
  :class:`WorkloadStatus` in a Cloud Function that never talks to the cluster) costs nothing.
"""

from __future__ import annotations

import base64
import binascii
import functools
import json
import logging
import random
import re
import threading
import time
from collections.abc import Callable, Collection
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from rlpipe.cluster.api_errors import (
    _api_failure,
    _api_message,
    _check_same_workload,
    _disable_urllib3_retries,
    _retry_after,
    _retryable_status,
)
from rlpipe.cluster.kinds import (
    JOB_NAME_LABELS,
    JOB_UID_LABELS,
    JOBSET_GROUP,
    JOBSET_NAME_LABEL,
    JOBSET_PLURAL,
    JOBSET_UID_LABEL,
    JOBSET_VERSION,
    KINDS,
    Kind,
    Obj,
    _clean,
    _deleting,
    _gvp,
    _is_jobset_child,
    _kind_of,
    _ts,
)
from rlpipe.cluster.status import RunObject, WorkloadStatus, _is_scheduled, _summary_phase, summarize
from rlpipe.core import identity
from rlpipe.core.failures import FailureClass, PermanentFailure, TransientFailure

if TYPE_CHECKING:
    from kubernetes.client import ApiClient, Configuration


class ConnectionSettings(Protocol):
    """Where the cluster is; ``rlpipe.control.settings.Settings`` has these fields. A protocol, so
    the cluster client stays below the control plane and imports nothing from it."""

    @property
    def kube_url(self) -> str: ...
    @property
    def gke_endpoint(self) -> str: ...
    @property
    def gke_ca_cert(self) -> str: ...
    @property
    def namespace(self) -> str: ...


# The package's name, as before the split: log lines keep their ``component``.
log = logging.getLogger("rlpipe.cluster")

T = TypeVar("T")

CLOUD_PLATFORM_SCOPE = "https://www.googleapis.com/auth/cloud-platform"


class _GoogleBearerToken:
    """``Configuration.refresh_api_key_hook``: the client calls it before every authenticated
    request, so a long-lived client (a warm Cloud Function instance) refreshes its token when
    google-auth says it is expired or about to be, instead of failing with 401 after an hour."""

    def __init__(self, credentials: Any) -> None:
        self._credentials = credentials
        self._lock = threading.Lock()

    def __call__(self, configuration: Configuration) -> None:
        with self._lock:
            if not self._credentials.valid:
                import google.auth.transport.requests

                self._credentials.refresh(google.auth.transport.requests.Request())
            configuration.api_key["BearerToken"] = self._credentials.token
            configuration.api_key_prefix["BearerToken"] = "Bearer"


def _ca_certificate(value: str) -> tuple[str | None, str | None]:
    """(path, PEM data) from ``gke_ca_cert``: a file path, PEM text, or the base64 PEM that
    ``gcloud container clusters describe`` prints as ``masterAuth.clusterCaCertificate``."""
    text = value.strip()
    if "-----BEGIN" in text:
        return None, text
    if text and "/" not in text and not text.endswith(".pem"):
        try:
            decoded = base64.b64decode(text, validate=True).decode("ascii")
        except (binascii.Error, UnicodeDecodeError):
            decoded = ""
        if "-----BEGIN" in decoded:
            return None, decoded
    return (text or None), None


class ClusterClient:
    """Kubernetes operations of the pipeline, against one namespace.

    ``api_retries`` bounds the retries of one API call after its first attempt; ``sleep`` and
    ``now`` are injectable so tests see the backoff and move the clock. The given ``ApiClient``
    is adopted: its urllib3 retries are switched off (see the module docstring).
    """

    def __init__(
        self,
        api_client: ApiClient,
        namespace: str,
        *,
        api_retries: int = 5,
        sleep: Callable[[float], None] = time.sleep,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        backoff_base: float = 0.5,
        backoff_max: float = 30.0,
        request_timeout: tuple[float, float] = (10.0, 60.0),
        rng: random.Random | None = None,
        retryable_errors: tuple[type[BaseException], ...] = (),
    ) -> None:
        from kubernetes import client

        if api_retries < 0:
            raise ValueError("api_retries must be >= 0")
        _disable_urllib3_retries(api_client)
        self.api_client = api_client
        self.namespace = namespace
        self.api_retries = api_retries
        self._sleep = sleep
        self._now = now
        self._backoff_base = backoff_base
        self._backoff_max = backoff_max
        self._timeout = request_timeout
        self._rng = rng or random.Random()
        self._retryable_errors = retryable_errors
        self._batch = client.BatchV1Api(api_client)
        self._custom = client.CustomObjectsApi(api_client)
        self._core = client.CoreV1Api(api_client)

    @classmethod
    def from_settings(cls, settings: ConnectionSettings, **kwargs: Any) -> ClusterClient:
        """The local stack's plain URL (no auth), else GKE: ``https://<gke_endpoint>``, the cluster
        CA, and a Google access token (Application Default Credentials) refreshed as it expires."""
        from kubernetes import client

        if settings.kube_url:
            config = client.Configuration(host=settings.kube_url.rstrip("/"))
            return cls(client.ApiClient(config), settings.namespace, **kwargs)
        if not settings.gke_endpoint:
            raise PermanentFailure(
                "no cluster configured: set RLPIPE_KUBE_URL (local) or "
                "RLPIPE_GKE_ENDPOINT and RLPIPE_GKE_CA_CERT (GKE)"
            )
        import google.auth
        import google.auth.exceptions

        endpoint = re.sub(r"^https?://", "", settings.gke_endpoint.strip()).rstrip("/")
        config = client.Configuration(host=f"https://{endpoint}")
        config.verify_ssl = True
        path, data = _ca_certificate(settings.gke_ca_cert)
        if path:
            config.ssl_ca_cert = path
        if data:
            config.ca_cert_data = data
        credentials, _project = google.auth.default(scopes=[CLOUD_PLATFORM_SCOPE])
        hook = _GoogleBearerToken(credentials)
        hook(config)  # the client sends a token only if one is present before the first call
        # The client declares the hook only by its initial value None; it calls whatever is set here.
        config.refresh_api_key_hook = hook  # type: ignore[assignment]
        kwargs.setdefault("retryable_errors", (google.auth.exceptions.TransportError,))
        return cls(client.ApiClient(config), settings.namespace, **kwargs)

    # -- the retry loop ---------------------------------------------------------------------

    def _delay(self, attempt: int, exc: BaseException) -> float:
        retry_after = _retry_after(exc)
        if retry_after is not None:
            return min(retry_after, self._backoff_max)
        return self._rng.uniform(0, min(self._backoff_max, self._backoff_base * 2**attempt))

    def _call(self, what: str, fn: Callable[[], T]) -> T:
        """``fn`` with retries on 429/5xx and connection errors; other API errors propagate."""
        import urllib3
        from kubernetes.client.exceptions import ApiException

        attempts = self.api_retries + 1
        retryable: tuple[type[BaseException], ...] = (
            urllib3.exceptions.HTTPError,
            ConnectionError,
            TimeoutError,
            *self._retryable_errors,
        )
        for attempt in range(attempts):
            try:
                return fn()
            except ApiException as exc:
                if not _retryable_status(exc.status):
                    raise
                error = f"{exc.status} {_api_message(exc)}"
                last: BaseException = exc
            except retryable as exc:
                error = f"{type(exc).__name__}: {_clean(exc, 200)}"
                last = exc
            if attempt + 1 >= attempts:
                raise TransientFailure(
                    f"Kubernetes API {what} failed after {attempts} attempts; last error: {error}"
                ) from last
            delay = self._delay(attempt, last)
            log.warning(
                "Kubernetes API %s: %s; retry %d/%d in %.2fs",
                what,
                error,
                attempt + 1,
                self.api_retries,
                delay,
            )
            self._sleep(delay)
        raise AssertionError("unreachable")

    def _json(self, what: str, fn: Callable[[], Any]) -> Obj:
        def call() -> Obj:
            response = fn()
            try:
                return json.loads(response.data or b"{}")
            finally:
                response.release_conn()

        return self._call(what, call)

    # -- raw operations (one API call each, retried) ------------------------------------------

    def _create(self, kind: Kind, body: Obj) -> Obj:
        group, version, plural = _gvp(kind)
        return self._json(
            f"create {kind}",
            lambda: self._custom.create_namespaced_custom_object(
                group,
                version,
                self.namespace,
                plural,
                body,
                field_validation="Strict",
                _preload_content=False,
                _request_timeout=self._timeout,
            ),
        )

    def _read(self, kind: Kind, name: str) -> Obj:
        if kind == "Job":
            return self._json(
                f"get Job {name}",
                lambda: self._batch.read_namespaced_job(
                    name, self.namespace, _preload_content=False, _request_timeout=self._timeout
                ),
            )
        return self._json(
            f"get JobSet {name}",
            lambda: self._custom.get_namespaced_custom_object(
                JOBSET_GROUP,
                JOBSET_VERSION,
                self.namespace,
                JOBSET_PLURAL,
                name,
                _preload_content=False,
                _request_timeout=self._timeout,
            ),
        )

    def _list(self, what: str, page: Callable[[str | None], Any]) -> list[Obj]:
        items: list[Obj] = []
        token: str | None = None
        while True:
            body = self._json(what, functools.partial(page, token))
            items.extend(body.get("items") or [])
            token = (body.get("metadata") or {}).get("continue")
            if not token:
                return items

    def _list_kind(self, kind: Kind, selector: str) -> list[Obj]:
        if kind == "Job":
            return self._list(
                "list Jobs",
                lambda token: self._batch.list_namespaced_job(
                    self.namespace,
                    label_selector=selector,
                    limit=500,
                    _continue=token,
                    _preload_content=False,
                    _request_timeout=self._timeout,
                ),
            )
        return self._list(
            "list JobSets",
            lambda token: self._custom.list_namespaced_custom_object(
                JOBSET_GROUP,
                JOBSET_VERSION,
                self.namespace,
                JOBSET_PLURAL,
                label_selector=selector,
                limit=500,
                _continue=token,
                _preload_content=False,
                _request_timeout=self._timeout,
            ),
        )

    def _list_pods(self, selector: str) -> list[Obj]:
        return self._list(
            "list pods",
            lambda token: self._core.list_namespaced_pod(
                self.namespace,
                label_selector=selector,
                limit=500,
                _continue=token,
                _preload_content=False,
                _request_timeout=self._timeout,
            ),
        )

    def _list_events(self, field_selector: str) -> list[Obj]:
        return self._list(
            "list events",
            lambda token: self._core.list_namespaced_event(
                self.namespace,
                field_selector=field_selector,
                limit=500,
                _continue=token,
                _preload_content=False,
                _request_timeout=self._timeout,
            ),
        )

    def _delete_one(self, kind: Kind, name: str) -> bool:
        """Delete with Background propagation (batch/v1 Jobs orphan their pods by default);
        False if it was already gone."""
        from kubernetes.client.exceptions import ApiException

        group, version, plural = _gvp(kind)
        try:
            if kind == "Job":
                self._json(
                    f"delete Job {name}",
                    lambda: self._batch.delete_namespaced_job(
                        name,
                        self.namespace,
                        propagation_policy="Background",
                        _preload_content=False,
                        _request_timeout=self._timeout,
                    ),
                )
            else:
                self._json(
                    f"delete JobSet {name}",
                    lambda: self._custom.delete_namespaced_custom_object(
                        group,
                        version,
                        self.namespace,
                        plural,
                        name,
                        propagation_policy="Background",
                        _preload_content=False,
                        _request_timeout=self._timeout,
                    ),
                )
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise _api_failure(exc, f"delete {kind} {name}") from exc
        return True

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
        """The workload's phase and, when failed, its failure class (precedence: ``status``).

        A missing workload is reported, not raised: ``failed``/``permanent`` "not found (deleted?)";
        the caller knows whether it just launched it or cleaned it up."""
        from kubernetes.client.exceptions import ApiException

        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
        try:
            obj = self._read(kind, name)
        except ApiException as exc:
            if exc.status == 404:
                return WorkloadStatus(
                    kind=kind,
                    name=name,
                    phase="failed",
                    exists=False,
                    failure_class=FailureClass.PERMANENT,
                    reason=f"workload {name} not found (deleted?)",
                )
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
        if phase in ("queued", "running") and not any(_is_scheduled(p) for p in pods):
            events = self._events_of(kind, obj)  # Kueue's and the controller's explanations
        child_jobs: list[Obj] = []
        if kind == "JobSet" and phase == "failed":
            child_jobs = self._list_kind("Job", f"{JOBSET_NAME_LABEL}={obj['metadata']['name']}")
        return summarize(
            kind,
            obj,
            pods,
            events,
            now=self._now(),
            retryable_exit_codes=retryable_exit_codes,
            queued_deadline_seconds=queued_deadline_seconds,
            child_jobs=child_jobs,
        )

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

    def log_tail(
        self,
        jobset: str,
        *,
        replicated_job: str = "pathways-head",
        container: str = "workload-container",
        lines: int = 200,
    ) -> str:
        """The last lines the training program printed (for progress: step and mean_reward).

        Best effort: an empty string when the pod is not there yet or the log cannot be read.
        """
        from kubernetes.client.exceptions import ApiException

        selector = (
            f"jobset.sigs.k8s.io/jobset-name={jobset},jobset.sigs.k8s.io/replicatedjob-name={replicated_job}"
        )
        try:
            pods = self._list_pods(selector)
            running = [
                p for p in pods if (p.get("status") or {}).get("phase") in ("Running", "Succeeded", "Failed")
            ]
            if not running:
                return ""
            name = sorted(running, key=lambda p: (p.get("metadata") or {}).get("creationTimestamp") or "")[-1]
            pod_name = name["metadata"]["name"]
            # With _preload_content=False this is the urllib3 response, not the str the client declares.
            response: Any = self._call(
                f"log of {pod_name}",
                lambda: self._core.read_namespaced_pod_log(
                    pod_name,
                    self.namespace,
                    container=container,
                    tail_lines=lines,
                    _preload_content=False,
                    _request_timeout=self._timeout,
                ),
            )
            try:
                return (response.data or b"").decode("utf-8", "replace")
            finally:
                response.release_conn()
        except (ApiException, TransientFailure):
            return ""

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
        jobset_names = {js["metadata"]["name"] for js in jobsets}
        deleted = [
            js["metadata"]["name"]
            for js in jobsets
            if not _deleting(js) and self._delete_one("JobSet", js["metadata"]["name"])
        ]
        for job in jobs:
            if _is_jobset_child(job) in jobset_names or _deleting(job):
                continue  # goes with its JobSet, or its deletion is already under way
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
