"""rlpipe.cluster against the Kubernetes API double, through the real ``kubernetes`` client: building a ClusterClient from settings: a URL, a kubeconfig, GKE.

Shared documents: documents.py; fixtures and the RBAC check of every call: conftest.py.
"""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime
from typing import Any

import pytest

from rlpipe.cluster import ClusterClient, WorkloadStatus, kinds
from rlpipe.cluster import transport as cluster_client
from rlpipe.control.adapters.settings import Settings
from rlpipe.core.failures import FailureClass, PermanentFailure
from rlpipe.core.manifests import pathways
from rlpipe.local import kube_api
from rlpipe.local.kube_api import KubeApiServer
from tests.cluster.client.documents import NS, recorded, rendered

# --------------------------------------------------------------------------- construction


def test_from_settings_with_a_plain_kube_url(server: KubeApiServer) -> None:
    cc = ClusterClient.from_settings(Settings(kube_url=server.url + "/", namespace=NS), sleep=lambda _s: None)
    recorded(cc.api_client)
    created = cc.apply(rendered("convert"))
    assert cc.namespace == NS and cc.api_client.configuration.host == server.url
    assert cc.status(created["metadata"]["name"], kind="Job").uid == created["metadata"]["uid"]
    assert "authorization" not in {k.lower() for k in cc.api_client.default_headers}


def _kubeconfig(tmp_path: Any, server: str) -> tuple[Any, dict[str, Any]]:
    """A kubeconfig as the real control plane writes one for the pipeline's identity."""
    files = {name: tmp_path / name for name in ("ca.crt", "user.crt", "user.key")}
    for path in files.values():
        path.write_text(PEM)
    path = tmp_path / "stage.kubeconfig"
    cluster_entry = {"server": server, "certificate-authority": str(files["ca.crt"])}
    user = {"client-certificate": str(files["user.crt"]), "client-key": str(files["user.key"])}
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "local", "cluster": cluster_entry}],
                "users": [{"name": "stage", "user": user}],
                "contexts": [{"name": "local", "context": {"cluster": "local", "user": "stage"}}],
                "current-context": "local",
            }
        )
    )
    return path, files


def test_from_settings_with_a_kubeconfig_takes_its_server_ca_and_client_certificate(tmp_path: Any) -> None:
    """The local stack's real control plane: TLS with the plane's CA and the pipeline identity's
    client certificate, all from the kubeconfig, and no bearer token."""
    path, files = _kubeconfig(tmp_path, "https://127.0.0.1:6443")
    cc = ClusterClient.from_settings(Settings(kubeconfig=str(path), namespace=NS))
    config = cc.api_client.configuration
    assert config.host == "https://127.0.0.1:6443" and config.verify_ssl and cc.namespace == NS
    assert (config.ssl_ca_cert, config.cert_file, config.key_file) == tuple(str(p) for p in files.values())
    assert "authorization" not in {k.lower() for k in cc.api_client.default_headers}
    assert not config.api_key


def test_a_kubeconfig_wins_over_a_plain_url(server: KubeApiServer, tmp_path: Any) -> None:
    path, _files = _kubeconfig(tmp_path, server.url)
    settings = Settings(kubeconfig=str(path), kube_url="http://127.0.0.1:1", namespace=NS)
    cc = ClusterClient.from_settings(settings, sleep=lambda _s: None)
    assert cc.api_client.configuration.host == server.url
    created = cc.apply(rendered("convert"))
    assert cc.status(created["metadata"]["name"], kind="Job").uid == created["metadata"]["uid"]


def test_the_kubeconfig_comes_from_rlpipe_kubeconfig(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLPIPE_KUBECONFIG", "/stack/controlplane/stage.kubeconfig")
    assert Settings.from_env().kubeconfig == "/stack/controlplane/stage.kubeconfig"


class FakeCredentials:
    """google.auth credentials that count refreshes instead of calling Google."""

    def __init__(self) -> None:
        self.refreshes = 0
        self.token: str | None = None
        self.expired = True

    @property
    def valid(self) -> bool:
        return self.token is not None and not self.expired

    def refresh(self, request: Any) -> None:
        self.refreshes += 1
        self.token = f"ya29.token-{self.refreshes}"
        self.expired = False


def _authorization(cc: ClusterClient) -> str:
    """The Authorization header the client computes for a request, through its real auth path."""
    _method, _url, headers, _body, _post = cc.api_client.param_serialize(
        method="GET",
        resource_path="/api/v1/namespaces/{namespace}/pods",
        path_params={"namespace": NS},
        auth_settings=["BearerToken"],
    )
    return headers["authorization"]


PEM = "-----BEGIN CERTIFICATE-----\nMIIBfake\n-----END CERTIFICATE-----\n"


@pytest.mark.parametrize("ca_form", ["path", "pem", "base64"])
def test_from_settings_for_gke_uses_the_ca_and_refreshes_the_token(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any, ca_form: str
) -> None:
    import google.auth

    creds = FakeCredentials()
    scopes_seen: list[Any] = []

    def fake_default(scopes: Any = None, **_: Any) -> tuple[FakeCredentials, str]:
        scopes_seen.append(scopes)
        return creds, "proj"

    monkeypatch.setattr(google.auth, "default", fake_default)
    ca_file = tmp_path / "ca.pem"
    ca_file.write_text(PEM)
    ca = {"path": str(ca_file), "pem": PEM, "base64": base64.b64encode(PEM.encode()).decode()}[ca_form]

    cc = ClusterClient.from_settings(Settings(gke_endpoint="34.118.0.10", gke_ca_cert=ca, namespace=NS))
    config = cc.api_client.configuration

    assert scopes_seen == [[cluster_client.CLOUD_PLATFORM_SCOPE]]
    assert config.host == "https://34.118.0.10" and config.verify_ssl
    if ca_form == "path":
        assert config.ssl_ca_cert == str(ca_file)
    else:
        assert config.ca_cert_data.strip() == PEM.strip()
    assert _authorization(cc) == "Bearer ya29.token-1"
    assert _authorization(cc) == "Bearer ya29.token-1" and creds.refreshes == 1  # valid: no refresh
    creds.expired = True  # an hour later, in a warm function instance
    assert _authorization(cc) == "Bearer ya29.token-2"


def test_from_settings_without_any_cluster_is_a_clear_error() -> None:
    with pytest.raises(PermanentFailure, match="RLPIPE_KUBE_URL"):
        ClusterClient.from_settings(Settings())


def test_importing_the_module_does_not_import_kubernetes() -> None:
    import subprocess
    import sys

    code = "import sys, rlpipe.cluster; print('kubernetes' in sys.modules, 'google.auth' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_constants_match_the_manifests_and_the_controllers() -> None:
    assert kinds.HEAD_REPLICATED_JOB == pathways.HEAD
    assert kinds.JOB_NAME_LABELS == kube_api.JOB_NAME_LABELS
    assert kinds.JOB_UID_LABELS == kube_api.JOB_UID_LABELS
    assert (kinds.JOBSET_NAME_LABEL, kinds.JOBSET_UID_LABEL) == (
        kube_api.JOBSET_NAME_LABEL,
        kube_api.JOBSET_UID_LABEL,
    )


def test_workload_status_failure_and_json() -> None:
    running_ = WorkloadStatus(kind="Job", name="j", phase="running")
    assert running_.failure() is None and not running_.done
    failed = WorkloadStatus(
        kind="Job",
        name="j",
        phase="failed",
        failure_class=FailureClass.RESOURCES,
        reason="pod p container c was OOMKilled",
        created_at=datetime(2026, 1, 1, tzinfo=UTC),
    )
    failure = failed.failure()
    assert (
        failed.done
        and failure is not None
        and failure.as_error() == {"tag": "resources", "message": "pod p container c was OOMKilled"}
    )
    assert json.loads(json.dumps(failed.to_dict()))["created_at"] == "2026-01-01T00:00:00+00:00"
