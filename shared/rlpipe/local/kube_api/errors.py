"""API failures as the apiserver reports them: ``Status`` bodies with the right code and reason."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from .resources import Obj, Resource


class KubeApiError(Exception):
    """An API failure, carried as the apiserver's ``Status`` object (HTTP and Python API alike)."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        details: Obj | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(f"{code} {reason}: {message}")
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.headers = dict(headers or {})

    def status(self) -> Obj:
        body: Obj = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details is not None:
            body["details"] = self.details
        return body


def _details(res: Resource, name: str, **extra: Any) -> Obj:
    return {"name": name, "group": res.group, "kind": res.plural, **extra}


def not_found(res: Resource, name: str) -> KubeApiError:
    return KubeApiError(404, "NotFound", f'{res.qualified} "{name}" not found', _details(res, name))


def already_exists(res: Resource, name: str) -> KubeApiError:
    return KubeApiError(409, "AlreadyExists", f'{res.qualified} "{name}" already exists', _details(res, name))


def conflict(
    res: Resource,
    name: str,
    why: str = "the object has been modified; please apply your changes to the latest version and try again",
) -> KubeApiError:
    return KubeApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {res.qualified} "{name}": {why}',
        _details(res, name),
    )


# A problem that starts with a field path (``$.spec.x[0]["a/b"]: ...`` or ``spec.x: ...``).
_CAUSE_FIELD = re.compile(r'^\s*((?:\$|[A-Za-z_])(?:[\w.$-]|\[(?:\d+|"[^"]*")\])*)\s*:\s')


def invalid(res: Resource, name: str, problems: list[str]) -> KubeApiError:
    """422 Invalid, one cause per problem; ``field`` is the problem's leading path, written as
    the apiserver writes it (``spec.template...``, no ``$.``)."""
    causes = []
    for problem in problems:
        m = _CAUSE_FIELD.match(problem)
        cause = {"reason": "FieldValueInvalid", "message": problem}
        if m and m.group(1) != "$":
            cause["field"] = m.group(1).removeprefix("$.").removeprefix("$")
        causes.append(cause)
    message = f'{res.group_kind} "{name}" is invalid: ' + (
        problems[0] if len(problems) == 1 else "[" + ", ".join(problems) + "]"
    )
    details = {"name": name, "group": res.group, "kind": res.kind, "causes": causes}
    return KubeApiError(422, "Invalid", message, details)


def bad_request(message: str) -> KubeApiError:
    return KubeApiError(400, "BadRequest", message)


_REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


def reason_for(code: int) -> str:
    return _REASONS.get(code, "InternalError" if code >= 500 else "BadRequest")
