"""The Kubernetes API's answers as retry decisions and classified failures.

:class:`~rlpipe.cluster.client.ClusterClient` retries 429, 5xx and connection errors itself (with
backoff, honouring ``Retry-After``); these helpers say which answers are retryable, how long the
server asked us to wait, and what a non-retryable answer means for a person. urllib3's own retries
are switched off so that every attempt goes through that one loop.
"""

from __future__ import annotations

import email.utils
import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from rlpipe.cluster.kinds import Kind, Obj, _clean
from rlpipe.core import identity
from rlpipe.core.failures import PermanentFailure, PipelineFailure, TransientFailure

if TYPE_CHECKING:
    from kubernetes.client import ApiClient


def _disable_urllib3_retries(api_client: ApiClient) -> None:
    """Make every attempt visible to our loop: urllib3's default Retry re-sends GETs answered
    429/503 with Retry-After (sleeping with the real clock) and reconnects three times."""
    from kubernetes.client import rest
    from urllib3.util.retry import Retry

    cfg = api_client.configuration
    cfg.retries = Retry(total=0, respect_retry_after_header=False, raise_on_status=False)
    old = api_client.rest_client
    api_client.rest_client = rest.RESTClientObject(cfg)
    old.close()


def _retryable_status(code: int | None) -> bool:
    """429 and 5xx are the apiserver's "not now"; 0 is the client's own connection/TLS failure."""
    return code == 0 or code == 429 or (code is not None and code >= 500)


def _check_same_workload(kind: Kind, wanted: Obj, existing: Obj) -> None:
    """A 409 means "already launched" only if the existing object is this run's same attempt."""
    want = (wanted.get("metadata") or {}).get("labels") or {}
    have = (existing.get("metadata") or {}).get("labels") or {}
    keys = (identity.LABEL_RUN, identity.LABEL_STAGE, identity.LABEL_ATTEMPT)
    name = existing["metadata"]["name"]
    if any(want.get(k) != have.get(k) for k in keys):
        theirs = ", ".join(f"{k}={have.get(k)}" for k in keys)
        raise PermanentFailure(f"{kind} {name} already exists but belongs to something else ({theirs})")
    if existing["metadata"].get("deletionTimestamp"):
        raise TransientFailure(
            f"{kind} {name} already exists and is being deleted; launch again once it is gone"
        )


def _status_body(exc: Any) -> Obj:
    body = getattr(exc, "body", None)
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    try:
        parsed = json.loads(body) if body else {}
    except ValueError:
        return {"message": body}
    return parsed if isinstance(parsed, dict) else {}


def _api_message(exc: Any) -> str:
    status = _status_body(exc)
    return _clean(status.get("message") or getattr(exc, "reason", "") or str(exc), 400)


def _retry_after(exc: BaseException) -> float | None:
    """Seconds from ``Retry-After`` (delta-seconds or an HTTP date), else the Status body's
    ``details.retryAfterSeconds``; None if the server gave no hint."""
    headers = getattr(exc, "headers", None) or {}
    value = headers.get("Retry-After") if hasattr(headers, "get") else None
    if value:
        try:
            return max(0.0, float(value))
        except ValueError:
            try:
                when = email.utils.parsedate_to_datetime(value)
            except (TypeError, ValueError):
                when = None
            if when is not None:
                if when.tzinfo is None:
                    when = when.replace(tzinfo=UTC)
                return max(0.0, (when - datetime.now(UTC)).total_seconds())
    seconds = (_status_body(exc).get("details") or {}).get("retryAfterSeconds")
    return float(seconds) if isinstance(seconds, int | float) and seconds > 0 else None


def _api_failure(exc: Any, what: str) -> PipelineFailure:
    """A non-retryable API answer as a classified failure a person can act on."""
    code = getattr(exc, "status", None)
    status = _status_body(exc)
    message = _api_message(exc)
    if code in (400, 422):
        causes = [
            c.get("message") or f"{c.get('field')}: {c.get('reason')}"
            for c in (status.get("details") or {}).get("causes") or []
        ]
        problems = "; ".join(_clean(c, 200) for c in causes) or message
        return PermanentFailure(f"Kubernetes rejected {what} as invalid ({code}): {problems}")
    if code in (401, 403):
        return PermanentFailure(
            f"Kubernetes refused {what} ({code} {status.get('reason') or ''}): {message}; "
            "check the pipeline identity's credentials and RBAC (cluster.RBAC_RULES)"
        )
    if code == 404:
        return PermanentFailure(
            f"Kubernetes has no such resource for {what} (404): {message}; is the namespace "
            "there and the JobSet CRD installed?"
        )
    return PermanentFailure(f"Kubernetes API {what} failed ({code}): {message}")
