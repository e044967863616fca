"""What a deploy installs in the cluster, installed on the real control plane.

One place for it, so the tests' plane and the local stack's plane hold the same objects a real
deployment holds: ``infra/cluster/k8s`` exactly as ``kubectl apply -k`` renders it with a
params.env (docs/deploy.md), less the GKE-only Secret Manager sync objects, which no upstream
module provides; the Secrets that sync (and the operator, for the publish token) would create;
and the pipeline's identity (``STAGE_GSA``), a client certificate named as the Google account
the Role is bound to on GKE.
"""

from __future__ import annotations

import base64
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from rlpipe.local.controlplane import components
from rlpipe.local.controlplane.cluster import ControlPlane

K8S_DIR = components.ROOT / "infra" / "cluster" / "k8s"
# GKE add-ons with no upstream module to build here: the Secret Manager sync (SecretProviderClass,
# SecretSync). Everything else in infra/cluster/k8s is applied as a deploy applies it.
GKE_ONLY_KINDS = frozenset({"SecretProviderClass", "SecretSync"})
PARAMS = {
    "WORKLOAD_GSA": "rlpipe-workload@rlpipe-test.iam.gserviceaccount.com",
    "STAGE_GSA": "rlpipe-stage@rlpipe-test.iam.gserviceaccount.com",
    "RECONCILE_GSA": "rlpipe-reconcile@rlpipe-test.iam.gserviceaccount.com",
    "HF_TOKEN_SECRET_VERSION": "projects/rlpipe-test/secrets/rlpipe-hf-token/versions/latest",
    "TPU_CHIPS": "64",
    "CPU_NP_CPU": "180",
    "CPU_NP_MEMORY": "640Gi",
    "CPU_NP_EPHEMERAL_STORAGE": "800Gi",
}
NAMESPACE = "rlpipe"
SECRET_KEY = "token"  # the key the workloads' secretKeyRef names (rlpipe.core.presets)


def deploy_documents(
    directory: Path = K8S_DIR, params: Mapping[str, str] | None = None
) -> list[dict[str, Any]]:
    """``kubectl kustomize`` of a copy of the directory with a params.env, as docs/deploy.md does."""
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / directory.name
        shutil.copytree(directory, work)
        (work / "params.env").write_text("".join(f"{k}={v}\n" for k, v in (params or PARAMS).items()))
        out = subprocess.run(
            [str(components.binary("kubectl")), "kustomize", str(work)],
            capture_output=True,
            text=True,
            check=True,
        )
    return [
        d
        for d in yaml.load_all(out.stdout, Loader=yaml.CSafeLoader)
        if d and d.get("kind") not in GKE_ONLY_KINDS
    ]


def secret_documents(tokens: Mapping[str, str], namespace: str = NAMESPACE) -> list[dict[str, Any]]:
    """Opaque Secrets holding one token each under ``token``: what GKE's secret sync makes of
    ``hf-token``, and what the operator creates for the publish stage's write token."""
    return [
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": {"app.kubernetes.io/part-of": "rlpipe"},
            },
            "type": "Opaque",
            "data": {SECRET_KEY: base64.b64encode(value.encode()).decode()},
        }
        for name, value in tokens.items()
    ]


def deploy(
    plane: ControlPlane, *, params: Mapping[str, str] | None = None, secrets: Mapping[str, str] | None = None
) -> Path:
    """Install what a deploy installs, plus ``secrets`` (name → token); the kubeconfig of the
    pipeline's identity, which holds exactly the deployed Role."""
    values = dict(params or PARAMS)
    plane.apply(deploy_documents(params=values))
    if secrets:
        plane.apply(secret_documents(secrets))
    return plane.add_user(values["STAGE_GSA"])
