"""JobSet's and Kueue's own release manifests, made to fit a control plane of processes.

Each project's ``config/default`` kustomization is what its release ``manifests.yaml`` is built
from; ``kubectl kustomize`` of the module's directory renders the same set. A process-only cluster
has no Service networking and runs each controller as a local process with its own credentials,
so of that set we keep the Namespaces, CRDs and webhook configurations, and point every webhook
(admission, and Kueue's CRD conversion) at the controller's loopback URL with our CA's bundle.
Nothing upstream is copied into the repository: the files are read from Go's module cache.
"""

from __future__ import annotations

import base64
import subprocess
from typing import Any

import yaml

from rlpipe.local.controlplane import components

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
    return [d for d in yaml.safe_load_all(out.stdout) if d]


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
