"""Hugging Face Hub look-ups the pipeline needs, with errors classified for retries.

``plan`` pins every run to a commit sha, so a branch that moves mid-run cannot change what is
converted. ``GatedRepoError`` is checked before ``RepositoryNotFoundError`` because it is a
subclass of it, and the fix differs (accept the license vs. fix the name).
"""

from __future__ import annotations

import os
import re

from rlpipe.core.failures import PermanentFailure, TransientFailure

SHA = re.compile(r"^[0-9a-f]{40}$")
HF_TOKEN_ENV = "RLPIPE_HF_TOKEN"


def pipeline_token() -> str | None:
    """The pipeline's own Hub token (from Secret Manager in GCP); never logged."""
    return os.environ.get(HF_TOKEN_ENV) or None


def resolve_revision(repo: str, revision: str, token: str | None = None) -> str:
    """A branch or tag → the commit sha it points at now (a full sha is checked and kept), after
    checking that the pipeline's token may read the repository."""
    from huggingface_hub import HfApi
    from huggingface_hub import errors as hf

    api = HfApi(token=token or pipeline_token())
    try:
        info = api.model_info(repo, revision=revision, timeout=30)
        # The Hub serves model_info of a gated repo to anyone; only auth_check tells whether this
        # account accepted the license, and conversion would fail hours later without it.
        api.auth_check(repo)
    except hf.GatedRepoError as exc:
        raise PermanentFailure(
            f"{repo} is gated and the pipeline's token has no access: accept the license for this account"
        ) from exc
    except hf.RevisionNotFoundError as exc:
        raise PermanentFailure(f"{repo} has no revision {revision!r}") from exc
    except hf.RepositoryNotFoundError as exc:
        raise PermanentFailure(f"{repo} does not exist or is private to another account") from exc
    except hf.HfHubHTTPError as exc:
        status = exc.response.status_code if exc.response is not None else None
        if status is not None and (status == 429 or status >= 500):
            raise TransientFailure(f"Hugging Face answered {status} for {repo}@{revision}") from exc
        raise PermanentFailure(f"Hugging Face refused {repo}@{revision}: {exc}") from exc
    except OSError as exc:  # connection errors and timeouts
        raise TransientFailure(f"could not reach Hugging Face for {repo}@{revision}: {exc}") from exc
    if SHA.match(revision):
        return revision
    if not info.sha or not SHA.match(info.sha):
        raise TransientFailure(f"Hugging Face returned no commit sha for {repo}@{revision}")
    return info.sha
