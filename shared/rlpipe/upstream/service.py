"""Upstream watch: a new Hugging Face release of a watched repo becomes one run, pinned to its commit.

docs/design.md#upstream-releases: the poller is the source of truth and the webhook only makes it faster. Both end in
``Poller.poll`` and then in the intake every other source uses, keyed
``hf:<repo>@<sha>:<template-hash>``, so a release seen by two polls, or by a webhook and a poll,
is one run. This module is the public face and the wiring from ``Settings``; the parts:

- ``upstream_watch``    the watch list (``config/watch.yaml``) and its validation
- ``upstream_release``  what counts as a release (pure: content ids of trigger files, shards)
- ``upstream_hub``      the Hugging Face calls, classified errors, rate-limit backoff
- ``upstream_state``    ``upstream/<repo>/state.json``, written with generation preconditions
- ``upstream_poller``   one poll of each entry: release, wait, ignore, no access
- ``upstream_report``   the per-entry outcomes and sentences
- ``upstream_webhook``  Hugging Face webhooks: verify, then ask for a poll of that repo

Order of the checks, and why: access is checked before the index is read (the index of a gated
repo cannot be read without it, and "accept the license" is the fastest useful answer); shards
before debounce ("upload in progress" says more than "debounce"); and the processed sha is
recorded only after intake accepted the run.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from rlpipe.control.adapters import blobstore
from rlpipe.control.adapters.logs import Logger
from rlpipe.control.adapters.settings import Settings
from rlpipe.core.problems import Problem
from rlpipe.core.request import MAX_DOCUMENT_BYTES
from rlpipe.upstream.hub_calls import HubReader, RateLimitBudget
from rlpipe.upstream.poll_outcomes import EntryOutcome, PollReport
from rlpipe.upstream.poller import Poller, utc_now
from rlpipe.upstream.state import StateStore, state_path
from rlpipe.upstream.watchlist import WATCH_LIST, PolicyFor, WatchList, WatchListInvalid, load_watch_list
from rlpipe.upstream.webhook import WEBHOOK_SECRET_ENV, BodyStream, handle_webhook, webhook_secret

if TYPE_CHECKING:
    from rlpipe.control.lifecycle.intake import Intake

__all__ = [
    "WATCH_LIST",
    "WEBHOOK_SECRET_ENV",
    "EntryOutcome",
    "PollReport",
    "Poller",
    "RateLimitBudget",
    "build_poller",
    "check",
    "handle_webhook",
    "on_tick",
    "on_webhook",
    "read_watch_list",
    "run_poll",
    "state_path",
    "tick_filter",
    "webhook_secret",
]


# ---- wiring: from Settings to a poll (functions and CLI) ------------------------------------------


def read_watch_list(store: blobstore.BlobStore, policy_for: PolicyFor | None = None) -> WatchList:
    """``config/watch.yaml`` from the requests bucket; an absent list watches nothing. Each
    entry's template is checked against ``policy_for`` its team."""
    source = f"gs://{store.bucket_name}/{WATCH_LIST}"
    try:
        blob = store.read(WATCH_LIST, max_bytes=MAX_DOCUMENT_BYTES)
    except blobstore.NotFound:
        return WatchList(source=source)
    except blobstore.TooLarge as exc:
        raise WatchListInvalid(
            [Problem("", str(exc), f"keep the watch list under {MAX_DOCUMENT_BYTES} bytes")]
        ) from None
    return load_watch_list(blob.data, source=source, policy_for=policy_for)


def build_poller(
    settings: Settings,
    log: Logger,
    *,
    client: Any = None,
    intake: Intake | None = None,
    token: str | None = None,
    clock: Callable[[], datetime] = utc_now,
    sleep: Callable[[float], None] = time.sleep,
    budget: RateLimitBudget | None = None,
    publish: Callable[[str, dict[str, Any]], Any] | None = None,
) -> Poller:
    """A Poller on the deployment named by ``settings`` (state in the state bucket)."""
    from rlpipe.control.adapters import hub_client, notify

    client = client or blobstore.make_client(settings.project)
    reader = HubReader(
        token=token or hub_client.pipeline_token(),
        sleep=sleep,
        clock=clock,
        budget=budget or RateLimitBudget(),
        timeout=settings.hub_timeout_seconds,
    )
    return Poller(
        hub=reader,
        state=StateStore(blobstore.BlobStore(client, settings.state_bucket)),
        log=log,
        intake=intake,
        settings=settings,
        publish=publish or notify.publish,
        clock=clock,
    )


def run_poll(
    settings: Settings,
    log: Logger,
    *,
    repo: str | None = None,
    branch: str | None = None,
    dry_run: bool = False,
    client: Any = None,
    poller: Poller | None = None,
    **build: Any,
) -> PollReport:
    """Read the watch list and poll once; a rejected watch list is reported, never raised."""
    poller = poller or build_poller(settings, log, client=client, **build)
    client = client or poller.state.store.client
    try:
        watch = read_watch_list(blobstore.BlobStore(client, settings.requests_bucket), poller.policy_for)
    except WatchListInvalid as exc:
        log.error("watch list rejected", problems=[str(p) for p in exc.problems])
        return PollReport(
            (
                EntryOutcome(
                    None,
                    None,
                    "error",
                    exc.render().splitlines()[0],
                    reason="invalid-watch-list",
                    problems=tuple(exc.problems),
                ),
            ),
            dry_run,
            poller.clock().isoformat(),
        )
    return poller.poll(watch, repo=repo, branch=branch, dry_run=dry_run)


def check(
    settings: Settings,
    *,
    repo: str | None = None,
    dry_run: bool = True,
    log: Logger | None = None,
    **build: Any,
) -> PollReport:
    """One cycle that reports what it would do and why; with dry_run (the default) it submits
    nothing and writes no state, so it is safe to run against production at any time."""
    log = log or Logger("upstream-check")
    if not dry_run and "intake" not in build:
        from rlpipe.control import services

        build["intake"] = services.intake(log)
    return run_poll(settings, log, repo=repo, dry_run=dry_run, **build)


def tick_filter(data: Any) -> tuple[str | None, str | None]:
    """A tick's optional ``{"repo": ..., "branch": ...}`` (Pub/Sub message data, base64 JSON)."""
    message = data.get("message") if isinstance(data, Mapping) else None
    raw = message.get("data") if isinstance(message, Mapping) else None
    if not isinstance(raw, str) or not raw:
        return None, None
    try:
        body = json.loads(base64.b64decode(raw, validate=True))
    except ValueError:
        return None, None
    if not isinstance(body, dict):
        return None, None
    repo, branch = body.get("repo"), body.get("branch")
    return (repo if isinstance(repo, str) else None), (branch if isinstance(branch, str) else None)


def on_tick(data: Any, log: Logger) -> PollReport:
    """``upstream_poll``: a Cloud Scheduler tick (via Pub/Sub) polls every watched repo."""
    from rlpipe.control import services

    repo, branch = tick_filter(data)
    return run_poll(
        services.settings(),
        log,
        repo=repo,
        branch=branch,
        client=services.storage_client(),
        intake=services.intake(log),
    )


def on_webhook(
    headers: Mapping[str, str], body: BodyStream | bytes, log: Logger
) -> tuple[int, dict[str, Any]]:
    """``upstream_webhook``: verify (before ``body``, the request's unread stream, is read), then
    poll just the pushed repo/branch, without waiting out rate limits (the webhook must answer
    fast; the next tick catches anything left)."""
    from rlpipe.control import services

    def poll_one(repo: str, branch: str) -> list[dict[str, Any]]:
        report = run_poll(
            services.settings(),
            log,
            repo=repo,
            branch=branch,
            client=services.storage_client(),
            intake=services.intake(log),
            budget=RateLimitBudget(seconds=0, retries=0),
        )
        return [o.as_dict() for o in report.outcomes]

    status, answer = handle_webhook(headers, body, secret=webhook_secret(), poll_one=poll_one)
    log.info("webhook answered", status=status, answer=answer)
    return status, answer
