"""The real control plane for tests: started once per run of the real-plane package's tests on a
worker (``tests/cluster/real_plane/conftest.py``), with what a deploy installs.

Where the binaries are missing (no Go, or `make components` not run) the tests that need it skip
with a reason naming the make target; under CI=true a skip is a failure, since CI builds them.
What a deploy installs lives in ``rlpipe.local.controlplane.deploy``, shared with the local stack.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from rlpipe.local.controlplane import ControlPlane, missing_reason
from rlpipe.local.controlplane.deploy import GKE_ONLY_KINDS, K8S_DIR, PARAMS, deploy, deploy_documents

__all__ = ["GKE_ONLY_KINDS", "K8S_DIR", "PARAMS", "deploy_documents", "real_cluster", "require_real_cluster"]


def require_real_cluster() -> None:
    reason = missing_reason()
    if reason is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI builds the real control plane, but: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="package")
def real_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    require_real_cluster()
    plane = ControlPlane(tmp_path_factory.mktemp("control-plane"))
    plane.start()
    try:
        deploy(plane)
        yield plane
    finally:
        plane.stop()
