"""JobSet's and Kueue's own release manifests, made to fit a control plane of processes, and the
ProvisioningRequest API that GKE serves.

Each project's ``config/default`` kustomization is what its release ``manifests.yaml`` is built
from; ``kubectl kustomize`` of the module's directory renders the same set. A process-only cluster
has no Service networking and runs each controller as a local process with its own credentials,
so of that set we keep the Namespaces, CRDs and webhook configurations, and point every webhook
(admission, and Kueue's CRD conversion) at the controller's loopback URL with our CA's bundle.
Nothing upstream is copied into the repository: the files are read from Go's module cache.
They are megabytes of YAML (Kueue's renders to 1.7 MB), read here and written for ``kubectl apply``
with libyaml, PyYAML's C loader and dumper: the same documents, ten times faster than pure Python
(2.0 s against 0.18 s of CPU for Kueue's), paid on every start of a plane.

GKE serves the cluster autoscaler's ProvisioningRequest API (``autoscaling.x-k8s.io``) on every
cluster; flex-start with queued provisioning is built on it. Kueue starts its ProvisioningRequest
admission-check controller only when that API is served at its own start (Kueue v0.17.1
``cmd/kueue/main.go:444-455``, ``pkg/controller/admissionchecks/provisioning/indexer.go:63-72``),
so the plane installs the CRD before Kueue, from the autoscaler ``apis`` module at the version
Kueue's own ``go.mod`` requires: the API Kueue's client was built against.
"""

from __future__ import annotations

import base64
import re
import subprocess
from typing import Any

import yaml

from rlpipe.local.controlplane import components

PROVISIONING_REQUEST_MODULE = "k8s.io/autoscaler/cluster-autoscaler/apis"
# The module's generated CRD (controller-gen), served as GKE serves it.
PROVISIONING_REQUEST_CRD = "config/crd/autoscaling.x-k8s.io_provisioningrequests.yaml"

KEEP = frozenset(
    {
        "Namespace",
        "CustomResourceDefinition",
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
    }
)


def release_documents(module: str, version: str) -> list[dict[str, Any]]:
    source = components.module_dir(module, version) / "config" / "default"
    out = subprocess.run(
        [str(components.binary("kubectl")), "kustomize", str(source)],
        capture_output=True,
        text=True,
        check=True,
    )
    return [d for d in yaml.load_all(out.stdout, Loader=yaml.CSafeLoader) if d]


def required_version(go_mod: str, module: str) -> str:
    """The version a ``go.mod`` requires ``module`` at (block or single-line ``require``)."""
    found = re.search(rf"^\s*(?:require\s+)?{re.escape(module)}\s+(v\S+)", go_mod, flags=re.MULTILINE)
    if not found:
        raise LookupError(f"go.mod requires no {module}")
    return found.group(1)


def provisioning_request_crd(kueue_version: str) -> list[dict[str, Any]]:
    """The ProvisioningRequest CRD at the version Kueue ``kueue_version`` is built against."""
    kueue = components.module_dir("sigs.k8s.io/kueue", kueue_version)
    version = required_version((kueue / "go.mod").read_text(), PROVISIONING_REQUEST_MODULE)
    crd = components.module_dir(PROVISIONING_REQUEST_MODULE, version) / PROVISIONING_REQUEST_CRD
    return [d for d in yaml.load_all(crd.read_text(), Loader=yaml.CSafeLoader) if d]


def localize(documents: list[dict[str, Any]], url: str, ca_pem: bytes) -> list[dict[str, Any]]:
    """Keep what a process-only cluster needs; every webhook's ``service`` becomes ``url``."""
    bundle = base64.b64encode(ca_pem).decode()

    def point(client_config: dict[str, Any]) -> None:
        service = client_config.pop("service", None) or {}
        client_config["url"] = url + service.get("path", "")
        client_config["caBundle"] = bundle

    kept = []
    for doc in documents:
        if doc.get("kind") not in KEEP:
            continue
        annotations = doc.get("metadata", {}).get("annotations") or {}
        annotations.pop("cert-manager.io/inject-ca-from", None)
        if doc["kind"] == "CustomResourceDefinition":
            conversion = doc["spec"].get("conversion") or {}
            if conversion.get("strategy") == "Webhook":
                point(conversion["webhook"]["clientConfig"])
        elif doc["kind"].endswith("WebhookConfiguration"):
            for webhook in doc.get("webhooks", []):
                point(webhook["clientConfig"])
        kept.append(doc)
    return kept
