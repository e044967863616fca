"""Hugging Face webhooks: a faster path to the poller, never a second way to start runs.

The Hub sends the secret configured on the webhook verbatim in ``X-Webhook-Secret`` (no HMAC),
so the only check possible is a constant-time comparison. That check, and the size cap on what a
caller declares (``Content-Length``), come before a byte of the body is read: a caller without
the secret costs no read and no parse, and the body of one with it is read through a bound
(``MAX_BODY`` + 1 bytes at most, so a chunked or endless body is cut off, not buffered).
Content pushes arrive with
``event.scope == "repo.content"`` and ``updatedRefs: [{ref, oldSha, newSha}]``. The Hub may add
narrower scopes, and a handler should treat any action on a narrowed scope as an update on the
broader one (hub-docs ``webhooks.md`` lines 102-104, "More scopes can be added in the future"),
so ``repo.content.<anything>`` is a content event too. A new pull request also fires
``repo.content`` (webhooks.md line 97: "It triggers on new Pull Requests as well due to the
newly created reference/commit"); its ref is ``refs/pr/N``, not a branch, and is ignored.
An accepted event only asks for an immediate poll of that repo and branch: the poller decides
(diff, debounce, access) exactly as on a tick, and intake's key makes a webhook and a tick
seeing the same commit one run. The Hub does not redeliver failed webhooks, which is why the
scheduled poll stays the source of truth.
"""

from __future__ import annotations

import hmac
import os
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from rlpipe.control.adapters import json_body

WEBHOOK_SECRET_ENV = "RLPIPE_WEBHOOK_SECRET"
SECRET_HEADER = "x-webhook-secret"
BRANCH_REF = "refs/heads/"
CONTENT_SCOPE = "repo.content"
MAX_BODY = 1024 * 1024


def webhook_secret() -> str | None:
    """The shared secret; Cloud Functions mounts the Secret Manager secret as this env variable."""
    return os.environ.get(WEBHOOK_SECRET_ENV, "").strip() or None


TOO_LARGE = f"payload larger than {MAX_BODY} bytes"


class BodyStream(Protocol):
    """The request's body, not read yet (the WSGI input, bounded by the server): ``read(n)``
    returns at most ``n`` bytes (possibly fewer), ``b""`` at its end."""

    def read(self, size: int, /) -> bytes: ...


def _header(headers: Mapping[str, str], name: str) -> str | None:
    return next((str(v) for k, v in headers.items() if k.lower() == name), None)


def declared_length(headers: Mapping[str, str]) -> int | None:
    """The ``Content-Length`` the caller declared; None when absent (a chunked body) or not a
    number (the server answers that one itself)."""
    value = (_header(headers, "content-length") or "").strip()
    return int(value) if value.isdigit() else None


def admit(headers: Mapping[str, str], secret: str | None) -> tuple[int, dict[str, Any]] | None:
    """Before the body is read: (status, answer) refusing the call, or None to go on. The secret
    first (503 when none is configured, 401 when wrong), then the declared size (413)."""
    if not secret:
        # Never "no secret configured = accept everything".
        return 503, {"error": f"the webhook secret is not configured ({WEBHOOK_SECRET_ENV})"}
    if not verify_secret(headers, secret):
        return 401, {"error": "missing or wrong X-Webhook-Secret"}
    declared = declared_length(headers)
    if declared is not None and declared > MAX_BODY:
        return 413, {"error": TOO_LARGE}
    return None


def read_at_most(body: BodyStream, limit: int) -> bytes | None:
    """Up to ``limit`` bytes of ``body``; None when it holds more (at most ``limit`` + 1 bytes are
    read: what is beyond is never read)."""
    chunks: list[bytes] = []
    total = 0
    while total <= limit:
        chunk = body.read(limit + 1 - total)
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
    return None if total > limit else b"".join(chunks)


def verify_secret(headers: Mapping[str, str], secret: str) -> bool:
    given = _header(headers, SECRET_HEADER)
    return given is not None and hmac.compare_digest(given.encode("utf-8"), secret.encode("utf-8"))


def is_content_scope(scope: Any) -> bool:
    """``repo.content`` or a narrower ``repo.content.*`` scope (never ``repo.contents`` and the like)."""
    return isinstance(scope, str) and (scope == CONTENT_SCOPE or scope.startswith(CONTENT_SCOPE + "."))


def updated_branches(payload: Mapping[str, Any]) -> list[str]:
    """Branches whose head moved (``refs/heads/*`` with a new sha); PR refs, tags and deletions ignored."""
    branches: list[str] = []
    refs = payload.get("updatedRefs")
    for ref in refs if isinstance(refs, list) else []:
        if not isinstance(ref, Mapping):
            continue
        name, new_sha = ref.get("ref"), ref.get("newSha")
        if isinstance(name, str) and name.startswith(BRANCH_REF) and new_sha:
            branch = name[len(BRANCH_REF) :]
            if branch and branch not in branches:
                branches.append(branch)
    return branches


def handle_webhook(
    headers: Mapping[str, str],
    body: BodyStream | bytes | str | Mapping[str, Any] | None,
    *,
    secret: str | None,
    poll_one: Callable[[str, str], Any],
) -> tuple[int, dict[str, Any]]:
    """(HTTP status, JSON answer). 401 on a bad secret; 2xx for anything authentic, acted on or not.

    ``body``: the request's unread stream (functions/main.py), or bytes, text or a parsed object
    (tests, callers that already hold it); a stream is read only once ``admit`` let the call in."""
    refused = admit(headers, secret)
    if refused is not None:
        return refused
    try:
        if isinstance(body, Mapping):
            payload: Any = body
        else:
            if body is None or isinstance(body, (bytes, str)):
                held = body.encode() if isinstance(body, str) else (body or b"")
                raw = held if len(held) <= MAX_BODY else None
            else:
                raw = read_at_most(body, MAX_BODY)
            if raw is None:
                return 413, {"error": TOO_LARGE}
            payload = json_body.loads(raw)
    except json_body.UnreadableJson as exc:
        return 400, {"error": str(exc)}
    if not isinstance(payload, Mapping):
        return 400, {"error": "the body is not a JSON object"}

    raw_event, raw_repo = payload.get("event"), payload.get("repo")
    event: Mapping[str, Any] = raw_event if isinstance(raw_event, Mapping) else {}
    repo: Mapping[str, Any] = raw_repo if isinstance(raw_repo, Mapping) else {}
    scope, name = event.get("scope"), repo.get("name")
    if not is_content_scope(scope):
        return 200, {"status": "ignored", "reason": f"event scope {scope!r} is not repo.content"}
    if repo.get("type", "model") != "model":
        return 200, {"status": "ignored", "reason": f"{repo.get('type')!r} repos are not watched"}
    if not isinstance(name, str) or "/" not in name:
        return 400, {"error": "repo.name is missing or not owner/name"}
    branches = updated_branches(payload)
    if not branches:
        return 200, {
            "status": "ignored",
            "repo": name,
            "reason": "no branch head moved (pull-request refs, tags and deletions are ignored)",
        }
    results: dict[str, Any] = {}
    for branch in branches:
        try:
            results[branch] = poll_one(name, branch)
        except Exception as exc:  # the tick will catch it; the Hub would not redeliver anyway
            results[branch] = {"error": f"{type(exc).__name__}: {exc}"}
    polled = any(results.values())
    return 200, {
        "status": "polled" if polled else "ignored",
        "repo": name,
        "branches": branches,
        "results": results,
        **({} if polled else {"reason": "repo/branch is not in the watch list"}),
    }
