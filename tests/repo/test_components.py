"""The real components' versions are named once (components/versions.env) and the Go modules we
build them from agree with it; the release manifests are made to fit a process-only cluster."""

from __future__ import annotations

import base64
import contextlib
import os
import re
import shutil
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rlpipe.local.controlplane import addons, components
from tests.harness.patience import ceiling, wait_until

COMPONENTS = Path(__file__).resolve().parents[2] / "components"


def _requires(module_dir: str) -> dict[str, str]:
    text = (COMPONENTS / module_dir / "go.mod").read_text()
    return dict(
        re.findall(r"^(?:require)?\s*([\w./-]+) (v[\w.+-]+)(?: // indirect)?$", text, flags=re.MULTILINE)
    )


def _replaces(module_dir: str) -> dict[str, str]:
    text = (COMPONENTS / module_dir / "go.mod").read_text()
    return dict(re.findall(r"^\s*([\w./-]+) => [\w./-]+ (v[\w.+-]+)$", text, flags=re.MULTILINE))


@pytest.mark.parametrize(
    ("module_dir", "module", "key"),
    [
        ("kube", "k8s.io/kubernetes", "KUBERNETES_VERSION"),
        ("etcd", "go.etcd.io/etcd/server/v3", "ETCD_VERSION"),
        ("jobset", "sigs.k8s.io/jobset", "JOBSET_VERSION"),
        ("pstest", "cloud.google.com/go/pubsub/v2", "PUBSUB_PSTEST_VERSION"),
    ],
)
def test_each_module_builds_the_version_versions_env_names(module_dir: str, module: str, key: str) -> None:
    assert _requires(module_dir)[module] == components.versions()[key]


def test_every_kubernetes_staging_module_is_pinned_to_the_same_release() -> None:
    """k8s.io/kubernetes requires its staging modules at v0.0.0 with `replace => ./staging/...`;
    an importer must pin each one itself, all to v0.<minor>.<patch> of the same release."""
    staging = "v0." + components.versions()["KUBERNETES_VERSION"].removeprefix("v1.")
    replaces = _replaces("kube")
    assert len(replaces) >= 30
    assert {m for m, v in replaces.items() if v != staging} == set()
    assert {"k8s.io/api", "k8s.io/apimachinery", "k8s.io/client-go", "k8s.io/component-base"} <= set(replaces)


def test_the_release_is_cut_down_to_crds_and_webhooks_pointing_at_loopback() -> None:
    documents = [
        {"kind": "Namespace", "metadata": {"name": "kueue-system"}},
        {"kind": "Deployment", "metadata": {"name": "kueue-controller-manager"}},
        {"kind": "Service", "metadata": {"name": "kueue-webhook-service"}},
        {
            "kind": "CustomResourceDefinition",
            "metadata": {
                "name": "workloads.kueue.x-k8s.io",
                "annotations": {"cert-manager.io/inject-ca-from": "x"},
            },
            "spec": {
                "conversion": {
                    "strategy": "Webhook",
                    "webhook": {
                        "clientConfig": {"service": {"name": "kueue-webhook-service", "path": "/convert"}}
                    },
                }
            },
        },
        {
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": "kueue-validating-webhook-configuration"},
            "webhooks": [
                {"name": "vjob.kb.io", "clientConfig": {"service": {"path": "/validate-batch-v1-job"}}}
            ],
        },
    ]
    kept = addons.localize(documents, "https://127.0.0.1:9443", b"PEM")
    assert [d["kind"] for d in kept] == [
        "Namespace",
        "CustomResourceDefinition",
        "ValidatingWebhookConfiguration",
    ]
    conversion = kept[1]["spec"]["conversion"]["webhook"]["clientConfig"]
    assert conversion == {
        "url": "https://127.0.0.1:9443/convert",
        "caBundle": base64.b64encode(b"PEM").decode(),
    }
    assert kept[1]["metadata"]["annotations"] == {}
    assert kept[2]["webhooks"][0]["clientConfig"]["url"] == "https://127.0.0.1:9443/validate-batch-v1-job"


def test_the_provisioning_request_api_is_read_at_the_version_kueues_go_mod_requires() -> None:
    """The version is not named in versions.env: Kueue's go.mod names it, so it cannot drift from
    the API Kueue's client was built against."""
    go_mod = (
        "module sigs.k8s.io/kueue\n\nrequire (\n\tk8s.io/api v0.35.0\n"
        "\tk8s.io/autoscaler/cluster-autoscaler/apis v0.0.0-20240830133931-adfbe7e45277\n)\n\n"
        "require k8s.io/klog/v2 v2.130.1 // indirect\n"
    )
    module = addons.PROVISIONING_REQUEST_MODULE
    assert addons.required_version(go_mod, module) == "v0.0.0-20240830133931-adfbe7e45277"
    assert addons.required_version(go_mod, "k8s.io/klog/v2") == "v2.130.1"
    with pytest.raises(LookupError):
        addons.required_version(go_mod, "k8s.io/autoscaler")


@pytest.mark.skipif(shutil.which("go") is None, reason="reads Go's module cache: needs Go (make components)")
def test_the_plane_serves_the_provisioning_request_crd_kueue_is_built_against() -> None:
    """GKE serves the ProvisioningRequest API; Kueue runs its provisioning admission check only
    when the API is there at its start (addons module docstring)."""
    (crd,) = addons.provisioning_request_crd(components.versions()["KUEUE_VERSION"])
    assert crd["metadata"]["name"] == "provisioningrequests.autoscaling.x-k8s.io"
    served = {v["name"]: v["storage"] for v in crd["spec"]["versions"] if v["served"]}
    assert served["v1"] is True  # the version Kueue's client uses (autoscaling.x-k8s.io/v1)


def test_a_missing_binary_names_the_make_target(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("COMPONENTS_BIN", str(tmp_path))
    reason = components.missing_reason()
    assert reason is not None and "make components" in reason and "kube-apiserver" in reason


# Stand-in for the Go toolchain: records each call, holds it until $GO_STUB_DIR/release exists
# (the test decides when the build ends), then writes the `-o` binary as `go build` would.
STUB_GO = """#!/bin/bash
echo "$*" >> "$GO_STUB_DIR/calls"
while [ ! -e "$GO_STUB_DIR/release" ]; do sleep 0.05; done
out=
while [ $# -gt 0 ]; do if [ "$1" = -o ]; then out=$2; fi; shift; done
printf '#!/bin/sh\\n' > "$out"
chmod +x "$out"
"""


@contextlib.contextmanager
def _builds(tmp_path: Path) -> Iterator[tuple[Path, Callable[[str], subprocess.Popen[bytes]]]]:
    """build.sh runs with a stub `go` first on PATH, into a bin folder of the test's own; whatever
    a test leaves running is released and ended on the way out."""
    stub_dir, bin_dir = tmp_path / "stub", tmp_path / "bin"
    stub_dir.mkdir()
    (stub_dir / "go").write_text(STUB_GO)
    (stub_dir / "go").chmod(0o755)
    env = {
        **os.environ,
        "PATH": f"{stub_dir}:{os.environ['PATH']}",
        "COMPONENTS_BIN": str(bin_dir),
        "GO_STUB_DIR": str(tmp_path),
    }
    started: list[subprocess.Popen[bytes]] = []

    def build(name: str) -> subprocess.Popen[bytes]:
        with (tmp_path / f"{name}.err").open("w") as err:
            proc = subprocess.Popen(
                ["bash", str(COMPONENTS / "build.sh"), "pstest"],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=err,
                start_new_session=True,
            )
        started.append(proc)
        return proc

    try:
        yield bin_dir, build
    finally:
        (tmp_path / "release").touch()
        for proc in started:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.mark.skipif(shutil.which("flock") is None, reason="build.sh takes its lock with flock (util-linux)")
def test_a_second_build_waits_for_the_first_and_finds_its_result_up_to_date(tmp_path: Path) -> None:
    """Two builds at once (a `make test` beside a `make components`) once doubled a 28-minute cold
    build. The second must wait on the first's lock, then find the binary built and up to date."""
    calls = tmp_path / "calls"
    with _builds(tmp_path) as (bin_dir, build):
        first = build("first")
        wait_until(calls.exists, 10, what="the first build calls go")  # it holds the lock now
        second = build("second")
        wait_until(
            lambda: (
                "waiting" in (tmp_path / "second.err").read_text() or len(calls.read_text().splitlines()) > 1
            ),
            10,
            what="the second build waits or builds",
        )
        (tmp_path / "release").touch()
        assert first.wait(timeout=ceiling(10)) == 0
        assert second.wait(timeout=ceiling(10)) == 0
    assert calls.read_text().splitlines() == [f"build -ldflags -s -w -o {bin_dir}/pstest ."]  # built once
    second_err = (tmp_path / "second.err").read_text()
    assert second_err == f"components: another build into {bin_dir} is running; waiting for it to end\n"
    assert "components: building pstest" in (tmp_path / "first.err").read_text()
    assert len((bin_dir / "build-times.tsv").read_text().splitlines()) == 1
