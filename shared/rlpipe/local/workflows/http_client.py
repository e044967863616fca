"""``http.get`` / ``http.post`` / ... : real HTTP requests with Workflows' request and error shapes.

Follows https://cloud.google.com/workflows/docs/reference/stdlib/http/post (and
its siblings) and https://cloud.google.com/workflows/docs/http-requests:

* ``body`` without a Content-Type header is JSON-encoded and sent as
  ``application/json; charset=utf-8`` (bytes go as ``application/octet-stream``);
* ``query`` values may be strings, ints, doubles, bools or lists of those;
* ``timeout`` defaults to 300 s, at most 1800 s, and raises ``TimeoutError``;
* the result is ``{"body", "code", "headers"}``, with a JSON body decoded;
* a status >= 400 raises an ``HttpError`` map with ``code``, ``message``,
  ``headers`` and ``body`` (https://cloud.google.com/workflows/docs/reference/syntax/catching-errors);
* a connection that is never established raises ``ConnectionFailedError``, one
  that breaks during the exchange ``ConnectionError``
  (https://cloud.google.com/workflows/docs/reference/syntax/error-types).

``auth`` is validated. With ``type: OIDC`` an ID token naming the workflow's
service account is attached (``Authorization: Bearer``, its ``aud`` the
``audience`` or else the URL), as Workflows does
(https://cloud.google.com/workflows/docs/authenticate-from-workflow), signed by
the stack's key (rlpipe/local/identities.py), which the stage function verifies.
A client made without an identity attaches none. ``type: OAuth2`` attaches
nothing: no local target takes access tokens.
"""

from __future__ import annotations

import json
import urllib.parse
from typing import Any

import requests
from urllib3.exceptions import MaxRetryError, NewConnectionError

from rlpipe.local.identities import played_id_token

from .errors import (
    CONNECTION_ERROR,
    CONNECTION_FAILED_ERROR,
    HTTP_ERROR,
    TIMEOUT_ERROR,
    TYPE_ERROR,
    VALUE_ERROR,
    WorkflowError,
    raise_error,
)
from .values import is_number, to_json, to_string, type_name

DEFAULT_TIMEOUT = 300.0
MAX_TIMEOUT = 1800.0
METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
USER_AGENT = "GoogleCloudWorkflows; (+https://cloud.google.com/workflows/docs) rlpipe-local"
_AUTH_KEYS = {"OIDC": {"type", "audience"}, "OAuth2": {"type", "scopes", "scope"}}


def auth_problem(auth: Any) -> str | None:
    """Why an ``auth`` value is invalid, or ``None`` when it is fine (also used at load time)."""
    if auth is None:
        return None
    if not isinstance(auth, dict):
        return f"auth must be a map, got {type_name(auth)}"
    kind = auth.get("type")
    if kind not in _AUTH_KEYS:
        return f'auth.type must be "OIDC" or "OAuth2", got {kind!r}'
    extra = set(auth) - _AUTH_KEYS[kind]
    if extra:
        return f"auth keys {sorted(extra)} are not valid for type {kind}"
    audience = auth.get("audience")
    if audience is not None and not isinstance(audience, str):
        return "auth.audience must be a string"
    for key in ("scopes", "scope"):
        scopes = auth.get(key)
        if scopes is not None and not (
            isinstance(scopes, str) or (isinstance(scopes, list) and all(isinstance(s, str) for s in scopes))
        ):
            return f"auth.{key} must be a string or a list of strings"
    return None


def _header(headers: dict[str, str], name: str) -> str | None:
    for key, value in headers.items():
        if key.lower() == name.lower():
            return value
    return None


def _encode_body(body: Any, headers: dict[str, str]) -> bytes | None:
    if body is None:
        return None
    content_type = _header(headers, "Content-Type")
    if content_type is None:
        if isinstance(body, bytes):
            headers["Content-Type"] = "application/octet-stream"
            return body
        headers["Content-Type"] = "application/json; charset=utf-8"
        return to_json(body).encode("utf-8")
    if isinstance(body, bytes):
        return body
    media = content_type.split(";")[0].strip().lower()
    if media == "application/json" or media.endswith("+json"):
        return to_json(body).encode("utf-8")
    if media == "application/x-www-form-urlencoded" and isinstance(body, dict):
        return urllib.parse.urlencode({k: _query_scalar(v) for k, v in body.items()}).encode("utf-8")
    if isinstance(body, str):
        return body.encode("utf-8")
    raise raise_error(TYPE_ERROR, f"cannot encode a {type_name(body)} body as {content_type}")


def _query_scalar(value: Any) -> str:
    if isinstance(value, (str, bool)) or is_number(value):
        return to_string(value)
    raise raise_error(TYPE_ERROR, f"query values must be strings, numbers or bools, got {type_name(value)}")


def _encode_query(query: Any) -> list[tuple[str, str]]:
    if query is None:
        return []
    if not isinstance(query, dict):
        raise raise_error(TYPE_ERROR, f"query must be a map, got {type_name(query)}")
    pairs: list[tuple[str, str]] = []
    for key, value in query.items():
        values = value if isinstance(value, list) else [value]
        pairs.extend((key, _query_scalar(v)) for v in values)
    return pairs


def _decode_body(response: requests.Response) -> Any:
    content_type = response.headers.get("Content-Type", "")
    media = content_type.split(";")[0].strip().lower()
    if media == "application/json" or media.endswith("+json"):
        try:
            return json.loads(response.content.decode(response.encoding or "utf-8"))
        except (ValueError, UnicodeDecodeError):
            return response.text
    if media.startswith("text/") or not response.content:
        return response.text
    return response.content


def _validate_headers(headers: Any) -> dict[str, str]:
    if headers is None:
        return {}
    if not isinstance(headers, dict) or not all(isinstance(v, str) for v in headers.values()):
        raise raise_error(TYPE_ERROR, "headers must be a map of strings")
    return dict(headers)


def _validate_timeout(timeout: Any) -> float:
    if timeout is None:
        return DEFAULT_TIMEOUT
    if not is_number(timeout):
        raise raise_error(TYPE_ERROR, f"timeout must be a number, got {type_name(timeout)}")
    if timeout <= 0 or timeout > MAX_TIMEOUT:
        raise raise_error(VALUE_ERROR, f"timeout must be in (0, {MAX_TIMEOUT:g}] seconds, got {timeout}")
    return float(timeout)


def _connection_error(exc: requests.ConnectionError) -> WorkflowError:
    reason = exc.args[0] if exc.args else None
    if isinstance(reason, MaxRetryError):
        reason = reason.reason
    if isinstance(reason, (NewConnectionError, ConnectionRefusedError)):
        return raise_error(CONNECTION_FAILED_ERROR, f"connection could not be established: {exc}")
    return raise_error(CONNECTION_ERROR, f"connection problem during the request: {exc}")


class HttpClient:
    """Performs the requests of ``http.*`` calls."""

    def __init__(self, session: requests.Session | None = None, *, identity: str | None = None) -> None:
        """``identity``: the service account whose ID token an ``auth: {type: OIDC}`` call carries."""
        self._session = session or requests.Session()
        self.identity = identity

    def close(self) -> None:
        self._session.close()

    def request(self, method: str, args: dict[str, Any]) -> dict[str, Any]:
        method = method.upper()
        if method not in METHODS:
            raise raise_error(VALUE_ERROR, f"unsupported HTTP method {method!r}")
        url = args.get("url")
        if not isinstance(url, str):
            raise raise_error(TYPE_ERROR, f"url must be a string, got {type_name(url)}")
        if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
            raise raise_error(VALUE_ERROR, f"url must be http or https: {url!r}")
        problem = auth_problem(args.get("auth"))
        if problem:
            raise raise_error(VALUE_ERROR, problem)
        headers = _validate_headers(args.get("headers"))
        timeout = _validate_timeout(args.get("timeout"))
        data = _encode_body(args.get("body"), headers)
        headers.setdefault("User-Agent", USER_AGENT)
        auth = args.get("auth")
        if isinstance(auth, dict) and auth.get("type") == "OIDC" and self.identity:
            token = played_id_token(self.identity, auth.get("audience") or url)
            headers = {k: v for k, v in headers.items() if k.lower() != "authorization"}
            headers["Authorization"] = f"Bearer {token}"
        try:
            response = self._session.request(
                method,
                url,
                params=_encode_query(args.get("query")),
                data=data,
                headers=headers,
                timeout=timeout,
            )
        except requests.Timeout as exc:
            raise raise_error(TIMEOUT_ERROR, f"HTTP request timed out after {timeout:g} s: {exc}") from None
        except requests.ConnectionError as exc:
            raise _connection_error(exc) from None
        except (requests.exceptions.ChunkedEncodingError, requests.exceptions.ContentDecodingError) as exc:
            raise raise_error(CONNECTION_ERROR, f"response was cut short: {exc}") from None
        except requests.RequestException as exc:
            raise raise_error(VALUE_ERROR, f"invalid HTTP request: {exc}") from None
        result = {
            "body": _decode_body(response),
            "code": response.status_code,
            "headers": dict(response.headers),
        }
        if response.status_code >= 400:
            raise WorkflowError(
                {
                    "message": f"HTTP server responded with error code {response.status_code}",
                    "code": response.status_code,
                    "tags": [HTTP_ERROR],
                    "headers": result["headers"],
                    "body": result["body"],
                }
            )
        return result
