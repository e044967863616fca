"""The RBAC rule an API server checks for a request, read from its method and URL."""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urlsplit

from rlpipe.cluster import RbacRule

_API_PATH = re.compile(
    r"^/(?:api/v1|apis/(?P<group>[^/]+)/[^/]+)/namespaces/[^/]+/(?P<resource>[^/]+)"
    r"(?:/(?P<name>[^/]+)(?:/(?P<sub>[^/]+))?)?$"
)


def rule_for(method: str, url: str) -> RbacRule:
    """The RBAC rule an apiserver would check for this request."""
    split = urlsplit(url)
    m = _API_PATH.match(split.path)
    assert m, f"not a namespaced resource request: {method} {url}"
    resource = m["resource"] + (f"/{m['sub']}" if m["sub"] else "")
    query = parse_qs(split.query)
    if method == "GET":
        verb = "get" if m["name"] else ("watch" if query.get("watch") == ["true"] else "list")
    elif method == "DELETE":
        verb = "delete" if m["name"] else "deletecollection"
    else:
        verb = {"POST": "create", "PUT": "update", "PATCH": "patch"}[method]
    return RbacRule(m["group"] or "", resource, verb)
