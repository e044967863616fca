"""Who called the stage function: the identity in a verified ID token, recorded beside the name a
person gave.

The token is verified here, not only read: its signature against the keys its issuer publishes,
its audience against this function's own URL (``RLPIPE_STAGE_AUDIENCE``), its expiry and its
issuer (Google's). Cloud Run's IAM checks the same before the request arrives, but only while the
stage service requires it; a deployment whose ingress or invoker binding is ever opened wider
would otherwise take any well-formed token's ``email`` as the caller. A request can carry the
token in ``X-Serverless-Authorization`` (which Cloud Run checks first when present) or
``Authorization``. Locally there is no Google: the stack signs the tokens of the callers it plays
with a key of its own and publishes that key's certificate as Google publishes its own
(rlpipe/local/identities.py), and this same code verifies them. A call without a token has no
caller (``None``); a call with a token that does not verify is refused (401).

What a caller may call is decided from this identity (control/adapters/identities.py): the workflow's
operations from the workflow's identity only. ``by`` (what the CLI sends, a user name by
default) stays what a person says; ``caller`` is what Google says. Both are recorded on a round
or a promotion, and the caller on a cancelled run, so an audit never rests on ``by`` alone.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from google.auth import transport

MAX_CALLER_CHARS = 254  # an e-mail address's limit (RFC 5321 path length)
TOKEN_HEADERS = ("X-Serverless-Authorization", "Authorization")
GOOGLE_ISSUERS = ("accounts.google.com", "https://accounts.google.com")  # google.oauth2.id_token's
CLOCK_SKEW_SECONDS = 10
CERTS_CACHE_SECONDS = 300.0  # Google rotates its signing keys over days; a new kid is fetched anew


class TokenRefused(Exception):
    """The call carries a token that does not verify (the message says which check failed)."""


class CertsUnavailable(Exception):
    """The issuer's published keys could not be fetched: nobody's fault here, try again (503)."""


@dataclass(frozen=True)
class TokenCheck:
    """What a token must satisfy in this deployment: one of ``audiences``, signed by a key
    published at ``certs_url``, by one of Google's issuers."""

    audiences: tuple[str, ...]
    certs_url: str


class _CachedCerts(transport.Request):
    """A google-auth transport that keeps the issuer's published certificates for a few minutes:
    ``id_token.verify_token`` fetches them on every call otherwise (one HTTP round trip per
    stage call). An unknown key id fetches them again, once the copy is a minute old."""

    def __init__(self) -> None:
        from google.auth.transport.requests import Request

        self._inner = Request()
        self._held: dict[str, tuple[float, Any]] = {}
        self._lock = threading.Lock()

    def __call__(
        self,
        url: str,
        method: str = "GET",
        body: Any = None,
        headers: Any = None,
        timeout: Any = None,
        **kwargs: Any,
    ) -> Any:
        def ask() -> Any:
            return self._inner(url, method=method, body=body, headers=headers, timeout=timeout, **kwargs)

        if method != "GET":
            return ask()
        with self._lock:
            held = self._held.get(url)
        if held is not None and time.monotonic() - held[0] < CERTS_CACHE_SECONDS:
            return held[1]
        response = ask()
        if response.status == 200:
            with self._lock:
                self._held[url] = (time.monotonic(), response)
        return response

    def forget(self, url: str, older_than: float) -> bool:
        """Drop the copy of ``url`` if it is older than ``older_than`` seconds (True if dropped)."""
        with self._lock:
            held = self._held.get(url)
            if held is not None and time.monotonic() - held[0] >= older_than:
                del self._held[url]
                return True
        return False


_CERTS: _CachedCerts | None = None


def _certs() -> _CachedCerts:
    global _CERTS
    if _CERTS is None:
        _CERTS = _CachedCerts()
    return _CERTS


def _bearer(headers: Mapping[str, str]) -> str | None:
    for header in TOKEN_HEADERS:
        value = headers.get(header) or ""
        scheme, _, token = value.partition(" ")
        if scheme.lower() == "bearer" and token.strip():
            return token.strip()
    return None


def caller_of(headers: Mapping[str, str], check: TokenCheck) -> str | None:
    """The ``email`` (else ``sub``) claim of the caller's verified ID token; None without a token.
    Raises :class:`TokenRefused` for a token that does not verify, :class:`CertsUnavailable` when
    the keys to verify it with cannot be fetched."""
    token = _bearer(headers)
    if token is None:
        return None
    claims = verified_claims(token, check)
    who = claims.get("email") or claims.get("sub")
    if not isinstance(who, str) or not who:
        raise TokenRefused("the ID token names no caller (no email or sub claim)")
    return who[:MAX_CALLER_CHARS]


def verified_claims(token: str, check: TokenCheck) -> Mapping[str, Any]:
    """The token's claims once google-auth verified its signature, audience and expiry, and its
    issuer is Google's."""
    from google.auth import exceptions
    from google.oauth2 import id_token

    if not check.audiences:
        raise TokenRefused(
            "this deployment names no audience for ID tokens (RLPIPE_STAGE_AUDIENCE), so none can "
            "be verified; set it to the stage function's URL"
        )
    for fetch in (1, 2):
        try:
            claims: Mapping[str, Any] = id_token.verify_token(
                token,
                _certs(),
                audience=list(check.audiences),
                certs_url=check.certs_url,
                clock_skew_in_seconds=CLOCK_SKEW_SECONDS,
            )
            break
        except exceptions.TransportError as exc:
            raise CertsUnavailable(f"the ID token's signing keys could not be fetched: {exc}") from None
        except (ValueError, exceptions.GoogleAuthError) as exc:
            # An unknown key id may be a key published since our copy: fetch once more.
            if fetch == 1 and "certificate" in str(exc).lower() and _certs().forget(check.certs_url, 60.0):
                continue
            raise TokenRefused(f"the ID token does not verify: {_short(exc)}") from None
    if claims.get("iss") not in GOOGLE_ISSUERS:
        raise TokenRefused(f"the ID token's issuer {_short(claims.get('iss'))} is not Google's")
    return claims


def _short(value: object) -> str:
    return str(value)[:160]
