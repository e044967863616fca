"""Discovery documents (``/version``, ``/api``, ``/apis``...) for clients that look first."""

from __future__ import annotations

import functools

from .resources import EVENTS, JOBS, JOBSETS, PODS, Obj, Resource

SERVER_VERSION = {
    "major": "1",
    "minor": "32",
    "gitVersion": "v1.32.4-rlpipe-double",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2025-01-01T00:00:00Z",
    "goVersion": "go1.23.0",
    "compiler": "gc",
    "platform": "linux/amd64",
}


def _api_resource_list(group_version: str, resources: list[Resource]) -> Obj:
    out = []
    for res in resources:
        verbs = (
            ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
            if res.http_writable
            else ["get", "list", "watch"]
        )
        out.append(
            {
                "name": res.plural,
                "singularName": res.singular,
                "namespaced": True,
                "kind": res.kind,
                "verbs": verbs,
            }
        )
        if res.has_status:
            out.append(
                {
                    "name": f"{res.plural}/status",
                    "singularName": "",
                    "namespaced": True,
                    "kind": res.kind,
                    "verbs": ["get", "patch", "update"] if res.http_writable else ["get"],
                }
            )
        if res is PODS:
            out.append(
                {"name": "pods/log", "singularName": "", "namespaced": True, "kind": "Pod", "verbs": ["get"]}
            )
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": out}


def _api_group(group: str, version: str) -> Obj:
    gv = {"groupVersion": f"{group}/{version}", "version": version}
    return {"name": group, "versions": [gv], "preferredVersion": gv}


@functools.cache
def _discovery_paths() -> dict[str, Obj | str]:
    """Enough discovery for clients that look before they leap (kubectl, dynamic clients)."""
    groups = [_api_group("batch", "v1"), _api_group("jobset.x-k8s.io", "v1alpha2")]
    return {
        "/version": SERVER_VERSION,
        "/healthz": "ok",
        "/livez": "ok",
        "/readyz": "ok",
        "/api": {
            "kind": "APIVersions",
            "apiVersion": "v1",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}],
        },
        "/apis": {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups},
        "/apis/batch": {"kind": "APIGroup", "apiVersion": "v1", **groups[0]},
        "/apis/jobset.x-k8s.io": {"kind": "APIGroup", "apiVersion": "v1", **groups[1]},
        "/api/v1": _api_resource_list("v1", [PODS, EVENTS]),
        "/apis/batch/v1": _api_resource_list("batch/v1", [JOBS]),
        "/apis/jobset.x-k8s.io/v1alpha2": _api_resource_list("jobset.x-k8s.io/v1alpha2", [JOBSETS]),
    }
