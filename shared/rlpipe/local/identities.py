"""The identities the local stack plays: the workflow's and the operator's, as ID tokens.

On Google Cloud, Workflows attaches a Google-signed ID token naming the workflow's service
account to an ``http.post`` with ``auth: {type: OIDC}``, the CLI one naming the operators'
service account (``RLPIPE_IMPERSONATE_SERVICE_ACCOUNT``), and Cloud Run checks the signature
before the stage function sees the call, which then only reads whose token it is
(control/adapters/callers.py). Locally there is no Cloud Run and nothing to sign with, so the stack plays
both callers: the local Workflows engine and the CLI attach a token of the same shape and claims,
**unsigned** (``alg: none``). Nothing verifies it locally, just as the function does not re-verify
on Google Cloud; what it makes testable is which operation each identity may call
(control/adapters/identities.py), on the same code path as in production.

The names mirror the deployment's service accounts (infra/terraform/main.tf ``sa_ids``): the
stack's settings name the workflow's (``RLPIPE_WORKFLOW_IDENTITY``, read by the stage function)
and the operator's (``RLPIPE_LOCAL_OPERATOR_IDENTITY``, read by the CLI when the stack is up).
"""

from __future__ import annotations

import os
import time
from typing import Any

from google.auth import crypt, jwt

from rlpipe.control.adapters.identities import WORKFLOW_IDENTITY_ENV

OPERATOR_IDENTITY_ENV = "RLPIPE_LOCAL_OPERATOR_IDENTITY"
TOKEN_SECONDS = 3600  # an ID token Google issues lives an hour
ISSUER = "https://accounts.google.com"


def workflow_account(project: str) -> str:
    """The local workflow's service account (the deployment's ``rlpipe-workflow``)."""
    return f"rlpipe-workflow@{project}.iam.gserviceaccount.com"


def operator_account(project: str) -> str:
    """The local operator's service account (the deployment's ``rlpipe-operator``, which the CLI
    impersonates on Google Cloud)."""
    return f"rlpipe-operator@{project}.iam.gserviceaccount.com"


def played(project: str) -> dict[str, str]:
    """The stack's settings naming both: the stage function takes the workflow's operations from
    the first only (control/adapters/identities.py), the local Workflows engine calls as it (local/core.py),
    and the CLI calls as the second."""
    return {
        WORKFLOW_IDENTITY_ENV: workflow_account(project),
        OPERATOR_IDENTITY_ENV: operator_account(project),
    }


def local_operator() -> str | None:
    """The operator the CLI plays against the local stack; None when the stack names none."""
    return os.environ.get(OPERATOR_IDENTITY_ENV, "").strip() or None


class _Unsigned(crypt.Signer):
    """No key: the played token carries an empty signature (``alg: none``)."""

    @property
    def key_id(self) -> str | None:
        return None

    def sign(self, message: Any) -> bytes:
        return b""


def played_id_token(email: str, audience: str, *, now: float | None = None) -> str:
    """An unsigned ID token with the claims of Google's for a service account: ``email``, ``aud``."""
    issued = int(time.time() if now is None else now)
    claims = {
        "iss": ISSUER,
        "aud": audience,
        "azp": email,
        "sub": email,
        "email": email,
        "email_verified": True,
        "iat": issued,
        "exp": issued + TOKEN_SECONDS,
    }
    token: bytes = jwt.encode(_Unsigned(), claims, header={"alg": "none"})
    return token.decode("ascii")
