"""Who called the stage function: the identity GCP verified, recorded beside the name a person gave.

Why the token is read without checking its signature: the stage function is deployed with IAM
required (``roles/run.invoker`` for the workflow, the operators' service account and
``var.stage_invokers``; never public, infra/terraform/variables.tf), so Cloud Run has verified the
Google-signed ID token before the request reaches us. What is left is to read whose it is: the
``email`` claim (a service account, or a person's own account when they call with their own
token). A request can carry the token in ``X-Serverless-Authorization`` (which Cloud Run checks
first when present) or ``Authorization``. Locally there is no Cloud Run: the stack plays the
callers with unsigned tokens of the same shape (rlpipe/local/identities.py), read here the same
way; a call without a token has no caller (``None``).

What a caller may call is decided from this identity (control/adapters/identities.py): the workflow's
operations from the workflow's identity only. ``by`` (what the CLI sends, a user name by
default) stays what a person says; ``caller`` is what Google says. Both are recorded on a round
or a promotion, and the caller on a cancelled run, so an audit never rests on ``by`` alone.
"""

from __future__ import annotations

from collections.abc import Mapping

MAX_CALLER_CHARS = 254  # an e-mail address's limit (RFC 5321 path length)
TOKEN_HEADERS = ("X-Serverless-Authorization", "Authorization")


def caller_of(headers: Mapping[str, str]) -> str | None:
    """The ``email`` (else ``sub``) claim of the caller's bearer token; None without one."""
    from google.auth import jwt

    for header in TOKEN_HEADERS:
        value = headers.get(header) or ""
        scheme, _, token = value.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            continue
        try:
            claims = jwt.decode(token.strip(), verify=False)
        except (ValueError, TypeError):
            return None  # not a JWT: Cloud Run would not have let it through; record nobody
        who = claims.get("email") or claims.get("sub")
        return who[:MAX_CALLER_CHARS] if isinstance(who, str) and who else None
    return None
