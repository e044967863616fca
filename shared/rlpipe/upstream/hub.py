"""The Hugging Face calls the poller makes, with errors classified and rate limits waited out.

Every call goes through ``_call``, which turns the client's exceptions into the few cases the
poller acts on: no access (gated: accept the license), not found, rate limited, unavailable,
refused. ``GatedRepoError`` is tested before ``RepositoryNotFoundError`` because it is a
subclass of it and the fix differs.

Rate limits: the Hub answers 429 with ``RateLimit: "api";r=0;t=<seconds to reset>`` (and
``RateLimit-Policy``). ``model_info``, ``auth_check`` and ``list_repo_commits`` are single
requests the client does not retry, so ``_call`` waits for the advertised reset (+1 s) and
tries again, within a per-cycle budget of sleep seconds and retries: a Cloud Function has a
deadline, and a repo still limited after the budget is reported and retried at the next tick.
(``hf_hub_download`` retries its own GET on 429 inside the client; its HEAD is handled here.)
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

from rlpipe.upstream.release import INDEX, FileIds, file_ids

T = TypeVar("T")
MAX_INDEX_BYTES = 16 * 1024 * 1024
DEFAULT_RESET_SECONDS = 60  # a 429 without usable headers: wait a little, not a whole window


class HubProblem(Exception):
    """Base of the classified failures; ``str()`` is a sentence for the report."""


class NoAccess(HubProblem):
    """Gated: the account that owns the pipeline's token must accept the license."""


class NotFound(HubProblem):
    pass


class Refused(HubProblem):
    """Any other 4xx: a request the Hub will keep refusing until someone fixes something."""


class Unavailable(HubProblem):
    """5xx, timeouts, connection errors: try again at the next tick."""


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
    timeout: float = 30.0
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
        """When ``sha`` was committed, from the commit log (when model_info has no lastModified)."""
        commits = self._call(f"{repo}@{sha}", lambda: self.api.list_repo_commits(repo, revision=sha))
        return commits[0].created_at if commits else None

    def check_access(self, repo: str) -> None:
        """Raises NoAccess unless the pipeline's token may read the repo's files."""
        self._call(repo, lambda: self.api.auth_check(repo))

    def read_index(self, repo: str, sha: str, path: str = INDEX) -> Any:
        """The decoded safetensors index at ``sha``; ValueError when it is not a readable JSON file.

        Downloaded into a fresh temporary cache: nothing stale survives between polls, and a Cloud
        Function's only writable disk is memory anyway."""
        with tempfile.TemporaryDirectory(prefix="rlpipe-hf-") as cache:
            local = self._call(
                f"{repo}@{sha}:{path}",
                lambda: self.api.hf_hub_download(
                    repo, path, revision=sha, cache_dir=cache, tqdm_class=_quiet_tqdm()
                ),
            )
            file = Path(local)
            # ValueError (not a HubProblem): the Hub answered fine, the uploaded file is what is wrong.
            if file.stat().st_size > MAX_INDEX_BYTES:
                raise ValueError(f"{path} at {sha[:7]} is larger than {MAX_INDEX_BYTES} bytes")
            try:
                return json.loads(file.read_text(encoding="utf-8"))
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
    """Seconds until the rate-limit window resets, if ``exc`` (or its cause) is a 429; else None."""
    from huggingface_hub.utils import parse_ratelimit_headers

    for item in _chain(exc):
        if _status(item) != 429:
            continue
        headers = item.response.headers  # type: ignore[attr-defined]
        info = parse_ratelimit_headers(headers)
        if info is not None:
            return max(0, info.reset_in_seconds)
        retry_after = str(headers.get("Retry-After", "")).strip()
        return int(retry_after) if retry_after.isdigit() else DEFAULT_RESET_SECONDS
    return None


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
    if status == 401:
        return Refused(f"{what}: Hugging Face refused the pipeline's token (401); check RLPIPE_HF_TOKEN")
    if status is not None and status >= 500:
        return Unavailable(f"{what}: Hugging Face answered {status}")
    if status is not None:
        return Refused(f"{what}: Hugging Face answered {status}")
    if any(
        isinstance(e, (OSError, TimeoutError))
        or type(e).__module__.split(".")[0].startswith(("httpx", "httpcore"))
        for e in chain
    ):
        return Unavailable(f"{what}: could not reach Hugging Face ({type(exc).__name__})")
    return Refused(f"{what}: {type(exc).__name__}: {exc}")


def _quiet_tqdm() -> Any:
    """A progress-bar class that never draws: a function's log is no place for progress bars."""
    from huggingface_hub.utils import tqdm

    class Quiet(tqdm):
        def __init__(self, *args: Any, **kwargs: Any):
            kwargs["disable"] = True
            super().__init__(*args, **kwargs)

    return Quiet
