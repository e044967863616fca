"""Hugging Face Hub look-ups the pipeline needs, with errors classified for retries.

``plan`` pins every run to a commit sha, so a branch that moves mid-run cannot change what is
converted. ``GatedRepoError`` is checked before ``RepositoryNotFoundError`` because it is a
subclass of it, and the fix differs (accept the license vs. fix the name).

Every request here is one request with a timeout, never the client's retry loop: the pipeline
owns retries (the workflow's ``http.default_retry`` for ``plan``, the poller's rate-limit budget
upstream), and a loop inside the client would spend a function's deadline where nobody sees it.
What ``huggingface_hub`` 2.4.0 does by itself, for the record:

- ``model_info`` is one ``get_session().get`` with the caller's timeout, default none
  (``hf_api.py:3214``); ``auth_check`` is the same without any timeout parameter
  (``hf_api.py:12119``); the shared session itself has ``timeout=None`` (``utils/_http.py:348``).
- ``list_repo_commits`` fetches every page through ``http_backoff`` (``utils/_pagination.py:41,50``),
  which retries 408/429/5xx up to 5 times (``utils/_http.py:466,473``) and sleeps until the
  ``RateLimit`` reset, uncapped (``:527-535,560``).
- ``hf_hub_download`` with an empty cache repeats a failed HEAD with retries on (``file_download.py:1170-1188``).

So upstream reads go through :func:`hub_get` (one GET on the client's own session, the client's
error mapping ``hf_raise_for_status``), and :func:`check_access` replaces ``auth_check``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urljoin

from rlpipe.control.adapters.settings import Settings
from rlpipe.core.failures import PermanentFailure, TransientFailure
from rlpipe.core.http_answers import is_transient

if TYPE_CHECKING:  # the teams model (pydantic) is loaded by the one caller that has teams: plan
    from rlpipe.core.teams import Teams

SHA = re.compile(r"^[0-9a-f]{40}$")
HF_TOKEN_ENV = "RLPIPE_HF_TOKEN"
MAX_ANSWER_BYTES = 32 * 1024 * 1024  # a metadata answer or a small file; never a weight shard


def pipeline_token() -> str | None:
    """The pipeline's own Hub token (from Secret Manager in GCP); never logged."""
    return os.environ.get(HF_TOKEN_ENV) or None


TEAM_TOKEN_ENV_PREFIX = "RLPIPE_HF_TOKEN_"  # + the team's name, upper case, "-" as "_"


def team_token_env(team: str) -> str:
    """Where a team's own Hub token reaches the functions (its Secret Manager secret, mounted by
    Terraform: ``teams.<team>.hf_token_secret``)."""
    return TEAM_TOKEN_ENV_PREFIX + team.upper().replace("-", "_")


def plan_hub(team: str, teams: Teams) -> dict[str, Any]:
    """The keyword arguments plan reads the Hub with for a run of ``team``: a declared team's own
    token or none (``plan_token``); ``{}`` (the deployment's token, as before) for a deployment
    without teams, or a run claimed before teams were declared."""
    from rlpipe.core.teams import DEFAULT_TEAM

    if team == DEFAULT_TEAM or not teams.declared:
        return {}
    return {"token": plan_token(team)}


def plan_token(team: str) -> str | bool:
    """The Hub token plan resolves a declared team's model revision and datasets with: the team's
    own, else none at all (False: anonymous, public repositories only), never the deployment's. With
    the deployment's, a team naming a private repository only that token can read would get its
    files, hashes and row counts in its own ledger."""
    return os.environ.get(team_token_env(team), "").strip() or False


def hub_timeout() -> float:
    """Seconds every Hub request may take to connect and between bytes (``RLPIPE_HUB_TIMEOUT_SECONDS``)."""
    return Settings.from_env().hub_timeout_seconds


def transport_errors() -> tuple[type[BaseException], ...]:
    """The Hub client's network failures: the server was not reached, or did not answer in time.

    They come from the client's HTTP library, which ``huggingface_hub.utils.httpx`` names whatever
    it is (``httpx2`` in 2.4.0: ``utils/__init__.py:224-225``), and none of them is an ``OSError``.
    These are the ones the client itself treats as worth retrying (``utils/_http.py:461-465``), plus
    a failing proxy."""
    from huggingface_hub.utils import httpx

    return (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError, httpx.ProxyError)


@dataclass(frozen=True)
class HubAnswer:
    """One successful answer: its headers, its body (at most ``max_bytes`` + 1 bytes), the next page."""

    status: int
    headers: Mapping[str, str]
    content: bytes
    next_url: str | None  # ``Link: <…>; rel="next"``, as ``utils/_pagination.py:68-69`` reads it

    def json(self) -> Any:
        import json

        return json.loads(self.content)


def hub_get(
    url: str,
    *,
    token: str | bool | None,
    timeout: float,
    params: Mapping[str, str] | None = None,
    max_bytes: int = MAX_ANSWER_BYTES,
) -> HubAnswer:
    """One GET on the client's shared session, no retries, errors raised as the client raises them.

    ``token``: a string, False (anonymous) or None (the machine's token), as ``build_hf_headers``
    takes it. The body is read up to ``max_bytes`` + 1 bytes, so a caller can tell "too large"
    without holding more than that. Network failures raise one of :func:`transport_errors`."""
    from huggingface_hub import get_session, hf_raise_for_status
    from huggingface_hub.utils import build_hf_headers

    headers = build_hf_headers(token=token)
    query = dict(params) if params else None  # None keeps a next-page URL's own query as it is
    with get_session().stream("GET", url, headers=headers, params=query, timeout=timeout) as response:
        if response.is_error:
            response.read()  # hf_raise_for_status reads the body for the server's message
            hf_raise_for_status(response)
        chunks: list[bytes] = []
        size = 0
        for chunk in response.iter_bytes():
            chunks.append(chunk)
            size += len(chunk)
            if size > max_bytes:
                break
        link = response.links.get("next", {}).get("url")
        return HubAnswer(
            status=response.status_code,
            headers=dict(response.headers),
            content=b"".join(chunks)[: max_bytes + 1],
            next_url=urljoin(str(response.url), link) if link else None,
        )


REPO_TYPES = ("model", "dataset", "space")  # ``/api/{repo_type}s/…``, as the client spells them


def check_access(
    endpoint: str, repo: str, *, token: str | bool | None, timeout: float, repo_type: str = "model"
) -> None:
    """``auth_check`` as one request with a timeout: the same route, ``/api/{repo_type}s/{repo}/
    auth-check`` (``hf_api.py:12112-12116``), and the same errors (``GatedRepoError`` without
    access, ``RepositoryNotFoundError``)."""
    if repo_type not in REPO_TYPES:
        raise ValueError(f"repo_type must be one of {REPO_TYPES}, not {repo_type!r}")
    hub_get(f"{endpoint.rstrip('/')}/api/{repo_type}s/{repo}/auth-check", token=token, timeout=timeout)


def _named(field: str | None, message: str) -> str:
    return f"{field}: {message}" if field else message


@contextmanager
def classified_errors(
    repo: str,
    revision: str,
    seconds: float,
    *,
    repo_field: str | None = None,
    revision_field: str | None = None,
) -> Iterator[None]:
    """The Hub client's errors inside the block, raised as the pipeline's failures, one mapping for
    every look-up: no access to a gated repo, a missing revision or repo, any other refusal →
    ``PermanentFailure``; the answers ``core.http_answers`` calls transient (408, 409, 412, 429, 5xx)
    and transport errors → ``TransientFailure``.

    ``repo_field``/``revision_field`` name the request fields a permanent message starts with
    (``"dataset.repo: …"``); without them the messages are the model look-up's, unprefixed."""
    from huggingface_hub import errors as hf

    try:
        yield
    except hf.GatedRepoError as exc:
        raise PermanentFailure(
            _named(
                repo_field,
                f"{repo} is gated and the pipeline's token has no access: accept the license for this account",
            )
        ) from exc
    except hf.RevisionNotFoundError as exc:
        raise PermanentFailure(_named(revision_field, f"{repo} has no revision {revision!r}")) from exc
    except hf.RepositoryNotFoundError as exc:
        raise PermanentFailure(
            _named(repo_field, f"{repo} does not exist or is private to another account")
        ) from exc
    except hf.HfHubHTTPError as exc:
        status = exc.response.status_code if exc.response is not None else None
        if is_transient(status):
            raise TransientFailure(f"Hugging Face answered {status} for {repo}@{revision}") from exc
        raise PermanentFailure(_named(repo_field, f"Hugging Face refused {repo}@{revision}: {exc}")) from exc
    except transport_errors() as exc:  # not OSError: the client's HTTP library has its own
        raise TransientFailure(
            f"could not reach Hugging Face for {repo}@{revision} within {seconds:g} s: {type(exc).__name__}"
        ) from exc
    except OSError as exc:  # socket-level errors that escape the HTTP library
        raise TransientFailure(f"could not reach Hugging Face for {repo}@{revision}: {exc}") from exc


def resolve_revision(
    repo: str, revision: str, token: str | bool | None = None, *, timeout: float | None = None
) -> str:
    """A branch or tag → the commit sha it points at now (a full sha is checked and kept), after
    checking that the pipeline's token may read the repository.

    Two requests, each bounded by ``timeout`` (default: the ``hub_timeout_seconds`` setting) and
    neither retried here: a transient answer is a ``TransientFailure``, which ``stage`` turns
    into a 503 the workflow retries."""
    from huggingface_hub import HfApi

    token = pipeline_token() if token is None else token  # False: anonymous (plan_token)
    seconds = timeout if timeout is not None else hub_timeout()
    api = HfApi(token=token)
    with classified_errors(repo, revision, seconds):
        info = api.model_info(repo, revision=revision, timeout=seconds)
        # The Hub serves model_info of a gated repo to anyone; only auth_check tells whether this
        # account accepted the license, and conversion would fail hours later without it.
        check_access(str(api.endpoint), repo, token=token, timeout=seconds)
    if SHA.match(revision):
        return revision
    if not info.sha or not SHA.match(info.sha):
        raise TransientFailure(f"Hugging Face returned no commit sha for {repo}@{revision}")
    return info.sha
