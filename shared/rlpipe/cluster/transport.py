"""The connection to the Kubernetes API: authentication, the bounded retry loop, raw reads and writes.

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
* ``kubernetes`` and ``google.auth`` are imported on first use.
"""

from __future__ import annotations

import base64
import binascii
import copy
import functools
import json
import logging
import random
import re
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol, Self, TypeVar

from rlpipe.cluster.api_errors import (
    _api_failure,
    _api_message,
    _disable_urllib3_retries,
    _retry_after,
    _retryable_status,
)
from rlpipe.cluster.kinds import (
    JOBSET_GROUP,
    JOBSET_PLURAL,
    JOBSET_VERSION,
    KUEUE_GROUP,
    KUEUE_VERSION,
    KUEUE_WORKLOAD_PLURAL,
    Kind,
    Obj,
    _clean,
    _gvp,
)
from rlpipe.core.failures import PermanentFailure, TransientFailure

if TYPE_CHECKING:
    from kubernetes.client import ApiClient, Configuration


class ConnectionSettings(Protocol):
    """Where the cluster is; ``rlpipe.control.adapters.settings.Settings`` has these fields. A protocol, so
    the cluster client stays below the control plane and imports nothing from it."""

    @property
    def kube_url(self) -> str: ...
    @property
    def kubeconfig(self) -> str: ...
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


class KubeTransport:
    """One namespace of the Kubernetes API, reached with bounded retries.

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
    def from_settings(cls, settings: ConnectionSettings, **kwargs: Any) -> Self:
        """A kubeconfig file (the local stack's real control plane: its CA and a client certificate),
        else the local stack's plain URL (no auth), else GKE: ``https://<gke_endpoint>``, the cluster
        CA, and a Google access token (Application Default Credentials) refreshed as it expires."""
        from kubernetes import client

        if settings.kubeconfig:
            from kubernetes import config as kube_config

            api_client = kube_config.new_client_from_config(config_file=settings.kubeconfig)
            return cls(api_client, settings.namespace, **kwargs)
        if settings.kube_url:
            config = client.Configuration(host=settings.kube_url.rstrip("/"))
            return cls(client.ApiClient(config), settings.namespace, **kwargs)
        if not settings.gke_endpoint:
            raise PermanentFailure(
                "no cluster configured: set RLPIPE_KUBECONFIG or RLPIPE_KUBE_URL (local) or "
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

    def in_namespace(self, namespace: str) -> Self:
        """The same client (connection, credentials, retry settings) for another namespace: a
        team's workloads live in the team's (core.teams), and every operation of a client is on
        its one namespace, so that status and cleanup look where apply created."""
        other = copy.copy(self)
        other.namespace = namespace
        return other

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
                body: Obj = json.loads(response.data or b"{}")
                return body
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
        return self._list_custom("list JobSets", JOBSET_GROUP, JOBSET_VERSION, JOBSET_PLURAL, selector)

    def _list_kueue_workloads(self, selector: str) -> list[Obj]:
        return self._list_custom(
            "list Kueue Workloads", KUEUE_GROUP, KUEUE_VERSION, KUEUE_WORKLOAD_PLURAL, selector
        )

    def _list_custom(self, what: str, group: str, version: str, plural: str, selector: str) -> list[Obj]:
        """A custom resource's objects in the namespace, by label, page by page."""
        return self._list(
            what,
            lambda token: self._custom.list_namespaced_custom_object(
                group,
                version,
                self.namespace,
                plural,
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
