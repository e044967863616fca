"""The real control plane for tests: started once per worker, with what a deploy installs.

Where the binaries are missing (no Go, or `make components` not run) the tests that need it skip
with a reason naming the make target; under CI=true a skip is a failure, since CI builds them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from rlpipe.local.controlplane import ControlPlane, components, missing_reason

ROOT = Path(__file__).resolve().parents[2]
K8S_DIR = ROOT / "infra" / "cluster" / "k8s"
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
}


def require_real_cluster() -> None:
    reason = missing_reason()
    if reason is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI builds the real control plane, but: {reason}")
    pytest.skip(reason)


def deploy_documents(directory: Path = K8S_DIR, params: dict[str, str] | None = None) -> list[dict[str, Any]]:
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
    return [d for d in yaml.safe_load_all(out.stdout) if d and d.get("kind") not in GKE_ONLY_KINDS]


@pytest.fixture(scope="session")
def real_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    require_real_cluster()
    plane = ControlPlane(tmp_path_factory.mktemp("control-plane"))
    plane.start()
    try:
        plane.apply(deploy_documents())
        plane.add_user(PARAMS["STAGE_GSA"])
        yield plane
    finally:
        plane.stop()
