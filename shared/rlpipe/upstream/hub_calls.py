"""The Hugging Face calls the poller makes, with errors classified and rate limits waited out.

Every call goes through ``_call``, which turns the client's exceptions into the few cases the
poller acts on: no access (gated: accept the license), not found, rate limited, unavailable,
refused. ``GatedRepoError`` is tested before ``RepositoryNotFoundError`` because it is a
subclass of it and the fix differs.

Every call is one request with a timeout (``hub_timeout_seconds``), so that ``_call`` sees
every 429 and the per-cycle budget governs every wait. ``huggingface_hub`` 2.4.0 would retry
some of them itself, up to 5 times, sleeping until the rate-limit reset (up to the 300 s
window): ``list_repo_commits`` pages go through ``http_backoff`` (``utils/_pagination.py:41,50``)
and ``hf_hub_download`` with an empty cache repeats a failed HEAD with retries
(``file_download.py:1170-1188``); ``auth_check`` and ``list_repo_commits`` take no timeout at
all. So ``model_info`` (one request, ``hf_api.py:3214``) is called with a timeout, and the
commit log, the access check and the index are read with ``rlpipe.control.adapters.hub_client.hub_get``: one
GET on the client's session, errors raised by the client's ``hf_raise_for_status``.

Rate limits: the Hub answers 429 with ``RateLimit: "api";r=0;t=<seconds to reset>`` (and
``RateLimit-Policy``); the header is on every answer, so, as the client does
(``utils/_http.py:527-535`` and ``:969-972``), it is the reason for the 429 only when
``r=0``; otherwise ``Retry-After`` says how long to wait. ``_call`` waits that long (+1 s)
and tries again, within a per-cycle budget of sleep seconds and retries: a Cloud Function has
a deadline, and a repo still limited after the budget is reported and retried at the next tick.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Any, TypeVar
from urllib.parse import quote

from rlpipe.control.adapters.hub_client import MAX_ANSWER_BYTES, HubAnswer, hub_get, transport_errors
from rlpipe.core.http_answers import is_transient
from rlpipe.core.timestamps import parse_rfc3339
from rlpipe.upstream.release import INDEX, FileIds, file_ids

T = TypeVar("T")
MAX_INDEX_BYTES = 16 * 1024 * 1024
DEFAULT_RESET_SECONDS = 60  # a 429 without usable headers: wait a little, not a whole window
MAX_COMMIT_PAGES = 5  # pages of the commit log searched for a sha (each page is one API request)


class HubProblem(Exception):
    """Base of the classified failures; ``str()`` is a sentence for the report."""


class NoAccess(HubProblem):
    """Gated: the account that owns the pipeline's token must accept the license."""


class NotFound(HubProblem):
    pass


class Refused(HubProblem):
    """Any other 4xx: a request the Hub will keep refusing until someone fixes something."""


class Unavailable(HubProblem):
    """An answer ``core.http_answers`` calls transient (5xx, 408, 429, a raced write), a timeout
    or a connection error: try again at the next tick."""


class RateLimited(HubProblem):
    def __init__(self, message: str, until: datetime):
        super().__init__(message)
        self.until = until


@dataclass
class RateLimitBudget:
    """How long one poll cycle may sleep on 429s, in total, and how many retries per call."""

    seconds: float = 120.0
    retries: int = 3
    spent: float = 0.0

    def allows(self, wait: float) -> bool:
        return self.spent + wait <= self.seconds


@dataclass(frozen=True)
class Head:
    """A branch's head commit: its sha, when it was made, and the content id of every file."""

    sha: str
    last_modified: datetime | None
    files: FileIds


@dataclass
class HubReader:
    token: str | None
    sleep: Callable[[float], None] = time.sleep
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    budget: RateLimitBudget = field(default_factory=RateLimitBudget)
    timeout: float = 10.0  # seconds per request; build_poller passes Settings.hub_timeout_seconds
    _api: Any = field(default=None, init=False, repr=False)

    @property
    def api(self) -> Any:
        if self._api is None:
            from huggingface_hub import HfApi

            # token=False: with no pipeline token, ask anonymously (never a token found on disk).
            self._api = HfApi(token=self.token or False)
        return self._api

    @property
    def endpoint(self) -> str:
        return str(self.api.endpoint).rstrip("/")

    def _get(self, url: str, max_bytes: int = MAX_ANSWER_BYTES) -> HubAnswer:
        """One GET, no retries inside the client: ``_call`` decides about every 429."""
        return hub_get(url, token=self.token or False, timeout=self.timeout, max_bytes=max_bytes)

    # ---- the calls ------------------------------------------------------------------------------

    def head(self, repo: str, branch: str) -> Head:
        info = self._call(
            f"{repo}@{branch}",
            lambda: self.api.model_info(repo, revision=branch, files_metadata=True, timeout=self.timeout),
        )
        if not info.sha:
            raise Unavailable(f"Hugging Face returned no commit sha for {repo}@{branch}")
        return Head(info.sha, info.last_modified, file_ids(info.siblings or []))

    def commit_time(self, repo: str, sha: str) -> datetime | None:
        """When ``sha`` was committed: the date of *its* entry in the commit log.

        The log (``/api/models/{repo}/commits/{sha}``) is sorted by date, newest first
        (``hf_api.py:4196``), so its first entry need not be ``sha`` itself; it comes in pages
        linked by ``Link: rel="next"`` (``utils/_pagination.py:36-39,68-69``). Pages are read one
        request at a time until the entry whose id is ``sha``, at most ``MAX_COMMIT_PAGES``;
        None when it is not there."""
        url: str | None = f"{self.endpoint}/api/models/{repo}/commits/{quote(sha, safe='')}"
        for _ in range(MAX_COMMIT_PAGES):
            if url is None:
                break
            page = self._call(f"{repo}@{sha[:7]} (commit log)", _bind(self._get, url))
            try:
                entries = page.json()
            except ValueError:
                raise Unavailable(f"{repo}@{sha[:7]}: the commit log is not JSON") from None
            for item in entries if isinstance(entries, list) else []:
                if isinstance(item, Mapping) and item.get("id") == sha:
                    return _parse_date(item.get("date"))
            url = page.next_url
        return None

    def check_access(self, repo: str) -> None:
        """Raises NoAccess unless the pipeline's token may read the repo's files (``auth_check``'s
        route, ``hf_api.py:12116``, as one request with a timeout)."""
        self._call(repo, _bind(self._get, f"{self.endpoint}/api/models/{repo}/auth-check"))

    def read_index(self, repo: str, sha: str, path: str = INDEX) -> Any:
        """The decoded safetensors index at ``sha``; ValueError when it is not a readable JSON file.

        One GET of the file's ``/resolve/`` URL (the shape of the client's
        ``HUGGINGFACE_CO_URL_TEMPLATE``, ``hf_hub_url``): nothing is cached, so nothing stale
        survives between polls, and a Cloud Function's only writable disk is memory anyway."""
        url = f"{self.endpoint}/{repo}/resolve/{quote(sha, safe='')}/{quote(path)}"
        answer = self._call(f"{repo}@{sha}:{path}", _bind(self._get, url, MAX_INDEX_BYTES))
        # ValueError (not a HubProblem): the Hub answered fine, the uploaded file is what is wrong.
        if len(answer.content) > MAX_INDEX_BYTES:
            raise ValueError(f"{path} at {sha[:7]} is larger than {MAX_INDEX_BYTES} bytes")
        try:
            return json.loads(answer.content.decode("utf-8"))
        except (ValueError, UnicodeDecodeError) as exc:
            raise ValueError(f"{path} at {sha[:7]} is not valid JSON ({exc})") from None

    # ---- errors and rate limits -----------------------------------------------------------------

    def _call(self, what: str, fn: Callable[[], T]) -> T:
        retries = 0
        while True:
            try:
                return fn()
            except Exception as exc:
                reset = rate_limit_reset(exc)
                if reset is None:
                    raise classify(exc, what) from exc
                wait = float(reset) + 1  # +1 s: the window has surely turned when we ask again
                if retries < self.budget.retries and self.budget.allows(wait):
                    retries += 1
                    self.budget.spent += wait
                    self.sleep(wait)
                    continue
                until = self.clock() + timedelta(seconds=reset)
                raise RateLimited(
                    f"rate limited by Hugging Face for {what}; the window resets at "
                    f"{until.strftime('%H:%M:%S UTC')}, retried at the next tick",
                    until,
                ) from exc


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def _status(exc: BaseException) -> int | None:
    response = getattr(exc, "response", None)
    return getattr(response, "status_code", None)


def rate_limit_reset(exc: BaseException) -> int | None:
    """Seconds until the Hub accepts requests again, if ``exc`` (or its cause) is a 429; else None.

    ``RateLimit`` counts only when it is the reason (``r=0``): the Hub sends it on every answer
    (client comment at ``utils/_http.py:971``), so a 429 with requests remaining is about
    something else, and then ``Retry-After`` (RFC 9110: seconds or an HTTP date) is the wait."""
    from huggingface_hub.utils import parse_ratelimit_headers

    for item in _chain(exc):
        if _status(item) != 429:
            continue
        headers = item.response.headers  # type: ignore[attr-defined]
        info = parse_ratelimit_headers(headers)
        if info is not None and info.remaining == 0:
            return max(0, info.reset_in_seconds)
        after = retry_after(headers.get("Retry-After"))
        return after if after is not None else DEFAULT_RESET_SECONDS
    return None


def retry_after(value: str | None, now: datetime | None = None) -> int | None:
    """``Retry-After`` in whole seconds (delay-seconds or HTTP-date), None when absent or unreadable."""
    text = (value or "").strip()
    if text.isdigit():
        return int(text)
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0, int((when - (now or datetime.now(UTC))).total_seconds() + 0.999))


def _bind(fn: Callable[..., T], *args: Any) -> Callable[[], T]:
    return lambda: fn(*args)


_parse_date = parse_rfc3339


def classify(exc: BaseException, what: str) -> HubProblem:
    from huggingface_hub import errors as hf

    chain = _chain(exc)

    def find(kind: type[BaseException]) -> BaseException | None:
        return next((e for e in chain if isinstance(e, kind)), None)

    # Order matters: GatedRepoError is a RepositoryNotFoundError.
    if find(hf.GatedRepoError):
        return NoAccess(f"{what}: the repo is gated and the pipeline's token has no access")
    if find(hf.RevisionNotFoundError):
        return NotFound(f"{what}: no such branch or commit")
    if find(hf.RepositoryNotFoundError):
        return NotFound(
            f"{what}: the repo does not exist, or is private and the pipeline's token cannot see it"
        )
    if find(hf.RemoteEntryNotFoundError):
        return NotFound(f"{what}: no such file")
    http = find(hf.HfHubHTTPError)
    status = _status(http) if http is not None else None
    if is_transient(status):  # a 429 without a reset header too: a pause, not a refusal
        return Unavailable(f"{what}: Hugging Face answered {status}")
    if status == 401:
        return Refused(f"{what}: Hugging Face refused the pipeline's token (401); check RLPIPE_HF_TOKEN")
    if status is not None:
        return Refused(f"{what}: Hugging Face answered {status}")
    # The client's HTTP library (httpx2) raises its own connection errors and timeouts, which
    # are not OSError (transport_errors documents which).
    if any(isinstance(e, (OSError, TimeoutError, *transport_errors())) for e in chain):
        return Unavailable(f"{what}: could not reach Hugging Face ({type(exc).__name__})")
    return Refused(f"{what}: {type(exc).__name__}: {exc}")
