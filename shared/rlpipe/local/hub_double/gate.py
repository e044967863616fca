"""What every request to the Hub double goes through before a route sees it: it is recorded,
stalled, failed or limited when a test forced that, counted against its rate-limit bucket, and
refused when its token was revoked.

Its own module because none of this depends on the route: ``rlpipe.local.hub_double.routes`` (and
``.writes``, ``.listing``) answer only what passes. Sources as in ``rlpipe.local.hub_double.routes``:

- A bad token: 401 with ``X-Error-Message: Invalid credentials in Authorization header`` and no
  error code, which the client leaves a plain ``HfHubHTTPError`` (``utils/_http.py:933-936``;
  seen on ``/api/models/…`` in comfyanonymous/ComfyUI#9415).
- Rate limits (hub-docs ``rate-limits.md``): buckets "api" and "resolvers" (every URL with a
  ``/resolve/`` segment, lines 9-10), 5-minute fixed windows (line 76), 429 when one is used up
  (line 38), headers per the IETF draft (line 40) in the format of lines 55-56. The client reads
  them "on every response" (``utils/_http.py:971``), so every answer here carries them.
- A stall (``HubDouble.stall``) is a server that accepts the connection and never answers: the
  client's shared session has no timeout (``utils/_http.py:348``), so only the caller's bounds it.
- ``HubDouble.fail`` answers a status (e.g. 500) to chosen requests, after draining their body so a
  client still sending sees the answer, not a reset socket. The client retries 429 and 5xx itself,
  5 times with waits of 1-8 s (``utils/_http.py:556-566,572-582``).
"""

from __future__ import annotations

import math
import time
from http.server import BaseHTTPRequestHandler
from urllib.parse import urlparse

from rlpipe.local.hub_double.routes import STORAGE, Exchange, HubState

STALL_MAX_SECONDS = 600.0  # a stalled request is closed after this even if nobody releases it
BAD_TOKEN = "Invalid credentials in Authorization header"  # the message the client special-cases


def bucket_of(path: str) -> str:
    if "/resolve/" in path:
        return "resolvers"
    return "api" if path.startswith("/api/") else "pages"


def _rate_headers(bucket: str, remaining: int, reset: int, limit: int, window: int) -> dict[str, str]:
    return {
        "RateLimit": f'"{bucket}";r={max(0, remaining)};t={reset}',
        "RateLimit-Policy": f'"fixed window";"{bucket}";q={limit};w={window}',
    }


def _count(hub: HubState, token: str, bucket: str) -> tuple[int, int, int, int]:
    """Count this request against the caller's bucket: (limit, remaining, reset seconds, window).
    Caller holds the lock. Callers are tokens, or "anonymous" (the Hub counts per IP)."""
    quota = hub.quota
    prefix = "" if token else "anonymous_"
    limit = int(getattr(quota, prefix + bucket, 0) or getattr(quota, bucket, 0) or 1)
    now = time.time()
    start = int(now // quota.window) * quota.window
    key = (token or "anonymous", bucket, start)
    hub.used[key] = hub.used.get(key, 0) + 1
    reset = max(1, math.ceil(start + quota.window - now))
    return limit, limit - hub.used[key], reset, quota.window


def prelude(hub: HubState, req: BaseHTTPRequestHandler, method: str) -> tuple[Exchange, str] | None:
    """What every request goes through: recorded, stalled, forced failures and limits, counted,
    revoked tokens refused. Returns the exchange and the token, or None when already answered."""
    path = urlparse(req.path).path
    token = (req.headers.get("Authorization") or "").removeprefix("Bearer ").strip()
    bucket = bucket_of(path)
    with hub.lock:
        hub.requests.append((method, path))
        stall = next((s for s in hub.stalls if path.startswith(s.path_prefix)), None)
    if stall is not None:
        stall.release.wait(STALL_MAX_SECONDS)
        req.close_connection = True  # closed without a status line: the client saw nothing at all
        return None
    with hub.lock:
        failure = _forced_failure(hub, method, path)
        forced = next((f for f in hub.limits if path.startswith(f.path_prefix)), None)
        if forced is not None:
            forced.remaining_times -= 1
            if forced.remaining_times <= 0:
                hub.limits.remove(forced)
        storage = path.startswith(STORAGE)
        limit, remaining, reset, window = (0, 1, 0, 0) if storage else _count(hub, token, bucket)
    common = {} if storage else _rate_headers(bucket, remaining, reset, limit, window)
    x = Exchange(req, method == "HEAD", common)
    if failure is not None:
        x.drain()
        x.send(failure, {"error": f"forced failure {failure} (HubDouble.fail)"})
        return None
    if forced is not None:
        headers = _rate_headers(bucket, forced.left, forced.reset, forced.limit, forced.window)
        if forced.retry_after is not None:
            headers["Retry-After"] = str(forced.retry_after)
        x.drain()
        x.send(429, {"error": "You have exceeded our rate limit"}, headers=headers)
        return None
    if remaining < 0:
        x.drain()
        x.send(429, {"error": f"You have exceeded the '{bucket}' rate limit"})
        return None
    if token and token in hub.revoked:
        x.drain()
        x.send(401, {"error": BAD_TOKEN})
        return None
    return x, token


def _forced_failure(hub: HubState, method: str, path: str) -> int | None:
    """The status a ``HubDouble.fail`` forces on this request, if any. Caller holds the lock."""
    for item in hub.failures:
        if item.matches(method, path):
            if item.after > 0:
                item.after -= 1
                return None
            item.times -= 1
            if item.times <= 0:
                hub.failures.remove(item)
            return item.status
    return None
