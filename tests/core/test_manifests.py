"""Structural checks of rendered workloads that do not depend on the goldens (docs/design.md#what-we-hand-kubernetes-kueue-and-jobset)."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rlpipe.control.lifecycle.publishing import publisher_program
from rlpipe.core import identity, tpu
from rlpipe.core.manifests import RenderContext, render, render_all, request_stages
from rlpipe.core.request import load_request, validate_request
from rlpipe.core.request.policy import Policy
from rlpipe.local.kube_api.validation import validate_object
from tests.conftest import EXAMPLES, minimal_request

PLANTED_TOKEN = "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0123"
CTX = RenderContext(
    run_id="rexample0001", bucket="art", model_card="# a card", publisher_program=publisher_program()
)


def _requests() -> list[tuple[str, Any]]:
    # The examples as the local stack takes them: it lets requests bring their own rewards.
    code = Policy(allow_user_code=True)
    reqs = [(p.name, load_request(p.read_bytes(), source=str(p), policy=code)) for p in EXAMPLES]
    reqs.append(("tpu-slice", validate_request(minimal_request(placement="tpu-slice"))))
    reqs.append(
        ("v6e-64-tpu-slice", validate_request(minimal_request(preset="v6e-64", placement="tpu-slice")))
    )
    return reqs


REQUESTS = _requests()
IDS = [name for name, _ in REQUESTS]


def _pods(obj: dict[str, Any]) -> list[tuple[dict[str, Any], int]]:
    """(pod spec, number of such pods) for a Job or a JobSet."""
    if obj["kind"] == "Job":
        return [(obj["spec"]["template"]["spec"], obj["spec"]["parallelism"])]
    out = []
    for rjob in obj["spec"]["replicatedJobs"]:
        spec = rjob["template"]["spec"]
        out.append((spec["template"]["spec"], rjob["replicas"] * spec["parallelism"]))
    return out


def _containers(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return pod.get("initContainers", []) + pod["containers"]


def _rjob(js: dict[str, Any], name: str) -> dict[str, Any]:
    return next(r for r in js["spec"]["replicatedJobs"] if r["name"] == name)


@pytest.mark.parametrize(("name", "req"), REQUESTS, ids=IDS)
def test_every_container_ends_with_its_last_log_lines_as_its_termination_message(name: str, req: Any) -> None:
    """A failed program's last words reach the attempt's reason (tests/local/test_termination_message.py)."""
    objs = render_all(req, CTX)
    pods = [t["spec"]["template"]["spec"] for obj in objs if obj["kind"] == "Job" for t in [obj]]
    pods += [
        r["template"]["spec"]["template"]["spec"]
        for obj in objs
        if obj["kind"] == "JobSet"
        for r in obj["spec"]["replicatedJobs"]
    ]
    policies = [(c["name"], c.get("terminationMessagePolicy")) for pod in pods for c in _containers(pod)]
    assert len(policies) >= 3 and {p for _, p in policies} == {"FallbackToLogsOnError"}, policies


@pytest.mark.parametrize(("name", "req"), REQUESTS, ids=IDS)
def test_every_object_passes_strict_schema_validation(name: str, req: Any) -> None:
    for obj in render_all(req, CTX):
        assert validate_object(obj) == [], f"{name} {obj['metadata']['name']}"


@pytest.mark.parametrize(("name", "req"), REQUESTS, ids=IDS)
def test_train_jobset_shape_matches_the_slices(name: str, req: Any) -> None:
    js = render(req, "train", 1, CTX)
    shape = tpu.SHAPES[req.tpu.type]
    worker = _rjob(js, "worker")
    wspec = worker["template"]["spec"]
    assert worker["replicas"] == req.tpu.slices
    assert wspec["parallelism"] == wspec["completions"] == shape.chips // 4
    assert wspec["backoffLimit"] == 4 * wspec["parallelism"]
    pod = wspec["template"]["spec"]
    assert pod["nodeSelector"]["cloud.google.com/gke-tpu-topology"] == req.tpu.topology
    assert pod["nodeSelector"]["cloud.google.com/gke-tpu-accelerator"] == "tpu-v6e-slice"
    assert {"key": "google.com/tpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    assert worker["template"]["metadata"]["annotations"]["alpha.jobset.sigs.k8s.io/exclusive-topology"] == (
        "cloud.google.com/gke-nodepool"
    )
    # The resource manager must expect exactly the worker shape, or it waits for slices forever.
    rm = next(
        c
        for c in _rjob(js, "pathways-head")["template"]["spec"]["template"]["spec"]["initContainers"]
        if c["name"] == "pathways-rm"
    )
    x, y = (int(v) for v in pod["nodeSelector"]["cloud.google.com/gke-tpu-topology"].split("x"))
    assert f"--instance_type=tpuv6e:{x}x{y}" in rm["args"]
    assert f"--instance_count={worker['replicas']}" in rm["args"]
    assert x * y == wspec["parallelism"] * 4


@pytest.mark.parametrize(("name", "req"), REQUESTS, ids=IDS)
def test_pathways_essentials(name: str, req: Any) -> None:
    spec = render(req, "train", 1, CTX)["spec"]
    assert spec["coordinator"] == {"replicatedJob": "pathways-head"}
    assert spec["startupPolicy"] == {"startupPolicyOrder": "InOrder"}
    assert spec["successPolicy"] == {"operator": "All", "targetReplicatedJobs": ["pathways-head"]}
    assert spec["network"] == {
        "enableDNSHostnames": True,
        "publishNotReadyAddresses": True,
        "subdomain": f"{CTX.run_id}-a1",  # short: the coordinator label must fit 63 characters
    }
    head = _rjob({"spec": spec}, "pathways-head")["template"]["spec"]["template"]["spec"]
    assert head["hostNetwork"] is True and head["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert all(c["restartPolicy"] == "Always" for c in head["initContainers"]), "native sidecars"
    assert {c["name"] for c in head["initContainers"]} == {"pathways-proxy", "pathways-rm"}
    assert head["nodeSelector"] == {"cloud.google.com/gke-nodepool": req.pathways.head_node_pool}
    for pod, _ in _pods({"kind": "JobSet", "spec": spec}):
        for c in _containers(pod):
            env = {e["name"]: e for e in c.get("env", [])}
            uses_head = any("$(PATHWAYS_HEAD)" in a for a in c.get("args", [])) or any(
                "$(PATHWAYS_HEAD)" in str(e.get("value", "")) for e in env.values()
            )
            if uses_head:  # $(VAR) only expands when VAR is defined in that container
                assert env["PATHWAYS_HEAD"]["valueFrom"]["fieldRef"]["fieldPath"] == (
                    "metadata.labels['jobset.sigs.k8s.io/coordinator']"
                )
    scratch = {
        a
        for pod, _ in _pods({"kind": "JobSet", "spec": spec})
        for c in _containers(pod)
        for a in c.get("args", [])
        if a.startswith("--gcs_scratch_location=")
    }
    assert scratch == {"--gcs_scratch_location=gs://art/pathways/"}


@pytest.mark.parametrize(("name", "req"), REQUESTS, ids=IDS)
def test_labels_names_and_queue_on_every_object(name: str, req: Any) -> None:
    for stage, obj in zip(request_stages(req), render_all(req, CTX, attempt=3), strict=True):
        meta = obj["metadata"]
        assert meta["name"] == f"rexample0001-{stage}-a3" and len(meta["name"]) <= 28
        assert meta["labels"][identity.LABEL_RUN] == "rexample0001"
        assert meta["labels"][identity.LABEL_STAGE] == stage
        assert meta["labels"][identity.LABEL_ATTEMPT] == "3"
        assert meta["labels"]["kueue.x-k8s.io/queue-name"] == req.tpu.queue
        for pod_template in _pod_templates(obj):
            assert pod_template["metadata"]["labels"][identity.LABEL_RUN] == "rexample0001"


def obj_stage(obj: dict[str, Any]) -> str:
    return str(obj["metadata"]["labels"][identity.LABEL_STAGE])


def _pod_templates(obj: dict[str, Any]) -> list[dict[str, Any]]:
    if obj["kind"] == "Job":
        return [obj["spec"]["template"]]
    return [r["template"]["spec"]["template"] for r in obj["spec"]["replicatedJobs"]]


@pytest.mark.parametrize(("name", "req"), REQUESTS, ids=IDS)
def test_chips_outside_training_depend_on_placement(name: str, req: Any) -> None:
    for stage in ("convert", "export"):
        job = render(req, stage, 1, CTX)
        chips = sum(
            int(c.get("resources", {}).get("limits", {}).get("google.com/tpu", 0)) * n
            for pod, n in _pods(job)
            for c in _containers(pod)
        )
        container = job["spec"]["template"]["spec"]["containers"][0]
        if req.placement == "cpu":
            assert chips == 0 and job["spec"]["parallelism"] == 1
            assert job["spec"]["template"]["spec"]["nodeSelector"] == {
                "cloud.google.com/gke-nodepool": "cpu-np"
            }
            assert container["resources"]["requests"]["memory"] == req.cpu_job.memory
        else:
            assert chips == tpu.SHAPES[req.tpu.type].chips
            assert job["spec"]["completionMode"] == "Indexed"
            assert 'JOB_COMPLETION_INDEX:-0}" != "0"' in container["command"][2]


@pytest.mark.parametrize(("name", "req"), REQUESTS, ids=IDS)
def test_no_latest_tag_anywhere(name: str, req: Any) -> None:
    for obj in render_all(req, CTX):
        for pod, _ in _pods(obj):
            for c in _containers(pod):
                image = c["image"]
                assert not image.endswith(":latest") and (
                    ":" in image.rsplit("/", 1)[-1] or "@sha256:" in image
                )


def test_no_secret_value_in_any_manifest(monkeypatch: pytest.MonkeyPatch) -> None:
    # A token present in the renderer's own environment must not leak into what it renders...
    monkeypatch.setenv("HF_TOKEN", PLANTED_TOKEN)
    # ...a request that tries to smuggle a token is rejected before anything renders...
    with pytest.raises(ValueError):
        validate_request(minimal_request(labels={"t": PLANTED_TOKEN}))
    # ...and every rendered object only *references* the Secret.
    for _, req in REQUESTS:
        for obj in render_all(req, CTX):
            text = json.dumps(obj)
            assert PLANTED_TOKEN not in text
            assert not re.search(r"hf_[A-Za-z0-9]{30,}", text)
            for pod, _ in _pods(obj):
                for c in _containers(pod):
                    for e in c.get("env", []):
                        if e["name"] == "HF_TOKEN":
                            assert set(e) == {"name", "valueFrom"}
                            # The publish Job alone holds the write token, from its own Secret.
                            secret = (
                                req.publish.token_secret
                                if obj_stage(obj) == "publish"
                                else req.hf_token_secret
                            )
                            assert req.publish is None or req.publish.token_secret != req.hf_token_secret
                            assert e["valueFrom"]["secretKeyRef"] == {"name": secret.name, "key": secret.key}
                    assert not any("HF_TOKEN" in a or "hf_access_token" in a for a in c.get("args", []))


@pytest.mark.parametrize(("name", "req"), REQUESTS, ids=IDS)
def test_no_token_in_any_command_line(name: str, req: Any) -> None:
    """MaxText reads HF_TOKEN from the environment; no argv carries it, not even as $(HF_TOKEN)."""
    for obj in render_all(req, CTX):
        for pod, _ in _pods(obj):
            for c in _containers(pod):
                argv = [*c.get("command", []), *c.get("args", [])]
                assert not [a for a in argv if "hf_access_token" in a or "$(HF_TOKEN)" in a], c["name"]
                if c["name"] == "workload-container":
                    token = [e for e in c["env"] if e["name"] == "HF_TOKEN"]
                    assert len(token) == 1 and "secretKeyRef" in token[0]["valueFrom"]


def test_token_reference_only_where_the_secret_is_mounted() -> None:
    for _, req in REQUESTS:
        for obj in render_all(req, CTX):
            for pod, _ in _pods(obj):
                for c in _containers(pod):
                    if any("$(HF_TOKEN)" in a for a in c.get("args", [])):
                        assert any(e["name"] == "HF_TOKEN" for e in c.get("env", []))


def test_user_strings_never_reach_a_shell_line() -> None:
    """Shell scripts are fixed templates: arguments follow as "$@", never inside the script."""
    req = validate_request(minimal_request(maxtext_overrides={"eval_interval": 7}, placement="tpu-slice"))
    for obj in render_all(req, CTX):
        for pod, _ in _pods(obj):
            for c in _containers(pod):
                if c.get("command", [""])[0] == "/bin/bash":
                    script = c["command"][2]
                    assert '"$@"' in script
                    for arg in c.get("args", []):
                        assert arg not in script
                    assert "eval_interval" not in script and "gs://" not in script
                    assert req.hf_repo not in script and "gemma" not in script
                    for program in re.findall(r"python3 -c ('(?:[^']|'\"'\"')*')", script):
                        compile(shlex.split(program)[0], "script", "exec")  # fixed, valid Python


def test_reservation_pins_tpu_pods() -> None:
    req = validate_request(minimal_request(tpu={"reservation": "my-res"}), Policy(reservations=("my-res",)))
    pod = _rjob(render(req, "train", 1, CTX), "worker")["template"]["spec"]["template"]["spec"]
    assert pod["nodeSelector"]["cloud.google.com/reservation-name"] == "my-res"


def test_output_paths_are_run_scoped_and_chain_between_stages() -> None:
    req = validate_request(minimal_request(training={"num_batches": 120}))
    objs = {o["metadata"]["labels"][identity.LABEL_STAGE]: o for o in render_all(req, CTX)}

    def argmap(obj: dict[str, Any], container: str = "workload-container") -> dict[str, str]:
        for pod, _ in _pods(obj):
            for c in _containers(pod):
                if c["name"] == container:
                    return dict(a.split("=", 1) for a in c["args"] if "=" in a)
        raise AssertionError(container)

    convert, train, export = argmap(objs["convert"]), argmap(objs["train"]), argmap(objs["export"])
    assert convert["base_output_directory"].startswith("gs://art/cache/maxtext/")
    assert convert["base_output_directory"].endswith("/rexample0001-a1/")
    assert train["load_parameters_path"] == convert["base_output_directory"] + "0/items/"
    assert train["base_output_directory"] == "gs://art/runs/rexample0001/trained/"
    assert export["load_parameters_path"] == (
        "gs://art/runs/rexample0001/trained/rl/checkpoints/actor/120/model_params/"
    )
    # to_huggingface writes into the pod's volume; the script's last step uploads exactly that
    # directory to the run's export prefix, its manifest last, which publish then reads.
    step = _env(_main(objs["export"]))
    (mount,) = _main(objs["export"])["volumeMounts"]
    assert export["base_output_directory"] == step["RLPIPE_EXPORT_DIR"]
    assert step["RLPIPE_EXPORT_DIR"].startswith(mount["mountPath"] + "/")
    assert step["RLPIPE_EXPORT_URI"] == "gs://art/runs/rexample0001/hf/"
    assert step["RLPIPE_EXPORT_MANIFEST"] == "gs://art/runs/rexample0001/hf/rlpipe-export.json"
    with_publish = validate_request(minimal_request(publish={"repo": "rlpipe-demo/m"}))
    (job,) = [
        o for o in render_all(with_publish, CTX) if o["metadata"]["labels"][identity.LABEL_STAGE] == "publish"
    ]
    args = _main(job)["args"]
    assert args[args.index("--source") + 1] == step["RLPIPE_EXPORT_URI"]
    assert args[args.index("--manifest") + 1] == step["RLPIPE_EXPORT_MANIFEST"]


def test_cache_hit_loads_another_runs_conversion() -> None:
    req = validate_request(minimal_request())
    other = "cache/maxtext/ckey/rother000001-a2/"
    ctx = RenderContext(run_id="rexample0001", bucket="art", converted_dir=other)
    args = _rjob(render(req, "train", 1, ctx), "pathways-head")["template"]["spec"]["template"]["spec"][
        "containers"
    ][0]["args"]
    assert f"load_parameters_path=gs://art/{other}0/items/" in args


def _main(obj: dict[str, Any]) -> dict[str, Any]:
    if obj["kind"] == "Job":
        return obj["spec"]["template"]["spec"]["containers"][0]
    return _rjob(obj, "pathways-head")["template"]["spec"]["template"]["spec"]["containers"][0]


def _env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in container["env"]}


@pytest.mark.parametrize("placement", ["cpu", "tpu-slice"])
def test_every_read_of_the_repo_uses_the_pinned_sha(placement: str) -> None:
    """Weights, listing and both tokenizers: the convert Job downloads the repo at the sha and
    copies its source files beside the checkpoint; train and export read that copy."""
    sha = "0123456789abcdef0123456789abcdef01234567"
    req = validate_request(minimal_request(placement=placement))
    ctx = RenderContext(run_id="r1", bucket="b", hf_revision=sha)
    convert, train, export = (_main(render(req, s, 1, ctx)) for s in identity.MAXTEXT_STAGES)
    env = _env(convert)
    assert (env["RLPIPE_HF_REPO"], env["RLPIPE_HF_REVISION"]) == (req.hf_repo, sha)
    out = next(a for a in convert["args"] if a.startswith("base_output_directory=")).split("=", 1)[1]
    assert env["RLPIPE_PINNED_URI"] == out + "hf-source/"
    assert f"--hf_model_path={env['RLPIPE_SNAPSHOT_DIR']}" in convert["args"]  # the local snapshot
    assert not any(a.startswith("--revision") or req.hf_repo in a for a in convert["args"])
    assert "snapshot_download(" in convert["command"][2] and "revision=rev" in convert["command"][2]
    load = next(a for a in train["args"] if a.startswith("load_parameters_path=")).split("=", 1)[1]
    for container in (train, export):
        assert _env(container)["RLPIPE_PINNED_URI"] == load.removesuffix("0/items/") + "hf-source/"
        assert "rlpipe-fetch" in container["command"][2]
    assert f"tokenizer_path={_env(train)['RLPIPE_PINNED_DIR']}" in train["args"]
    assert f"--hf_model_path={_env(export)['RLPIPE_PINNED_DIR']}" in export["args"]
    assert not any(req.hf_repo in a for a in train["args"] + export["args"])


def test_a_request_tokenizer_path_is_used_as_given_and_not_fetched() -> None:
    req = validate_request(minimal_request(training={"tokenizer_path": "org/other-tokenizer"}))
    train = _main(render(req, "train", 1, CTX))
    assert "tokenizer_path=org/other-tokenizer" in train["args"]
    assert "rlpipe-fetch" not in train["command"][2] and "RLPIPE_PINNED_URI" not in _env(train)


def test_cache_hit_reads_the_pinned_files_of_the_conversion_it_loads() -> None:
    other = "cache/maxtext/ckey/rother000001-a2/"
    req = validate_request(minimal_request())
    ctx = RenderContext(run_id="rexample0001", bucket="art", converted_dir=other)
    for stage in ("train", "export"):
        assert _env(_main(render(req, stage, 1, ctx)))["RLPIPE_PINNED_URI"] == f"gs://art/{other}hf-source/"


@pytest.mark.parametrize("placement", ["cpu", "tpu-slice"])
@pytest.mark.parametrize(("stage", "size"), [("convert", "300Gi"), ("export", "40Gi")])
@pytest.mark.parametrize("with_request", [False, True])
def test_convert_and_export_get_a_sized_volume_for_their_disk(
    placement: str, stage: str, size: str, with_request: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rlpipe.core.manifests import jobs

    monkeypatch.setattr(jobs, "REQUEST_EPHEMERAL_STORAGE", with_request)
    req = validate_request(minimal_request(placement=placement, scratch={stage: size}))
    job = render(req, stage, 1, CTX)  # type: ignore[arg-type]
    pod = job["spec"]["template"]["spec"]
    (volume,) = pod["volumes"]
    assert volume["emptyDir"] == {"sizeLimit": size}
    container = pod["containers"][0]
    (mount,) = container["volumeMounts"]
    assert mount["name"] == volume["name"]
    requested = container["resources"].get("requests", {}).get("ephemeral-storage")
    # On cpu-np only: the ClusterQueue covers ephemeral-storage in the cpu-np resource group, and a
    # TPU-placed pod asking for it would need that group's cpu-np flavor (kueue.yaml).
    assert requested == (size if with_request and placement == "cpu" else None)
    env = _env(container)
    assert env["TMPDIR"].startswith(mount["mountPath"] + "/")
    if stage == "convert":
        assert env["HF_HOME"].startswith(mount["mountPath"] + "/")
        assert env["RLPIPE_SNAPSHOT_DIR"].startswith(mount["mountPath"] + "/")
    else:
        assert env["RLPIPE_PINNED_DIR"].startswith(mount["mountPath"] + "/")


def test_preset_disks_hold_the_tutorial_model() -> None:
    """Gemma 4 26B A4B's safetensors are about 52 GB: convert downloads them, and export writes the
    whole exported model to its volume before the script's last step uploads it."""
    units = {"Gi": 2**30, "G": 10**9, "Ti": 2**40}
    for preset in ("v6e-32", "v6e-64"):
        req = validate_request(minimal_request(preset=preset))
        convert, export = (int(q[:-2]) * units[q[-2:]] for q in (req.scratch.convert, req.scratch.export))
        assert convert >= 52 * 10**9 * 1.5 and export >= 52 * 10**9 * 1.5


def test_pathways_workers_mount_the_hosts_tmp_like_both_tools() -> None:
    req = validate_request(minimal_request())
    js = render(req, "train", 1, CTX)
    worker = _rjob(js, "worker")["template"]["spec"]["template"]["spec"]
    assert worker["volumes"] == [
        {"name": "shared-tmp", "hostPath": {"path": "/tmp", "type": "DirectoryOrCreate"}}
    ]
    assert worker["containers"][0]["volumeMounts"] == [{"name": "shared-tmp", "mountPath": "/tmp"}]
    head = _rjob(js, "pathways-head")["template"]["spec"]["template"]["spec"]
    assert "volumes" not in head  # no hostPath on the shared CPU pool (docs/differences.md)
    assert all("securityContext" not in c for c in _containers(head))


def test_the_pin_and_fetch_programs_copy_the_repo_at_the_sha(buckets: Any, tmp_path: Path) -> None:
    """The fixed programs run for real against fake-gcs-server; snapshot_download is a stand-in
    that records its call (the Hub double does not serve the tree route it lists files with)."""
    fake = tmp_path / "fake" / "huggingface_hub"
    fake.mkdir(parents=True)
    fake.joinpath("__init__.py").write_text(
        "import json, os, pathlib\n"
        "def snapshot_download(repo_id, revision, local_dir, ignore_patterns):\n"
        "    root = pathlib.Path(local_dir)\n"
        "    files = {'config.json': '{}', 'tokenizer.json': 'tok', 'chat_template.jinja': 'x',\n"
        "             'model.safetensors': 'weights', '.cache/huggingface/download/x.lock': ''}\n"
        "    for name, text in files.items():\n"
        "        (root / name).parent.mkdir(parents=True, exist_ok=True)\n"
        "        (root / name).write_text(text)\n"
        "    pathlib.Path(os.environ['CALLS']).write_text(json.dumps([repo_id, revision, ignore_patterns]))\n"
        "    return str(root)\n"
    )
    sha = "0123456789abcdef0123456789abcdef01234567"
    req = validate_request(minimal_request(hf_revision=sha))
    ctx = RenderContext(run_id="rpin00000001", bucket=buckets.artifacts, hf_revision=sha)
    convert, _, export = (_main(render(req, s, 1, ctx)) for s in identity.MAXTEXT_STAGES)
    base = {
        **os.environ,
        "STORAGE_EMULATOR_HOST": buckets.emulator,
        "GOOGLE_CLOUD_PROJECT": "rlpipe-test",
        "PYTHONPATH": str(fake.parent),
        "CALLS": str(tmp_path / "calls.json"),
    }

    def run(container: dict[str, Any], **paths: str) -> str:
        script = container["command"][2]
        program = shlex.split(re.search(r"python3 -c ('(?:[^']|'\"'\"')*')", script)[1])[0]  # type: ignore[index]
        env = {**base, **_env(container), **paths}
        proc = subprocess.run(
            [sys.executable, "-c", program], env=env, capture_output=True, text=True, timeout=60
        )
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    out = run(convert, RLPIPE_SNAPSHOT_DIR=str(tmp_path / "snap"))
    assert json.loads((tmp_path / "calls.json").read_text())[:2] == [req.hf_repo, sha]
    prefix = _env(convert)["RLPIPE_PINNED_URI"].split("/", 3)[3]
    names = {b.name[len(prefix) :] for b in buckets.client.list_blobs(buckets.artifacts, prefix=prefix)}
    assert names == {"config.json", "tokenizer.json", "chat_template.jinja", "rlpipe-pinned.json"}
    manifest = json.loads(
        buckets.client.bucket(buckets.artifacts).blob(prefix + "rlpipe-pinned.json").download_as_bytes()
    )
    assert (manifest["hf_repo"], manifest["revision"]) == (req.hf_repo, sha)
    assert {f["path"] for f in manifest["files"]} == names - {"rlpipe-pinned.json"} | {"model.safetensors"}
    assert "rlpipe-pin: copied 3 files" in out

    out = run(export, RLPIPE_PINNED_DIR=str(tmp_path / "fetched"))
    assert sorted(p.name for p in (tmp_path / "fetched").iterdir()) == sorted(names)
    assert (tmp_path / "fetched" / "tokenizer.json").read_text() == "tok"
    assert "rlpipe-fetch: 4 files" in out


def test_examples_exist() -> None:
    names = {Path(p).name for p in EXAMPLES}
    assert {"gemma4-26b-v6e-32.yaml", "gemma4-26b-v6e-64.yaml"} <= names
    assert any(req.tpu.slices > 1 for _, req in REQUESTS)


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_every_example_is_accepted_by_the_local_stacks_intake(example: Path) -> None:
    """The demos submit these to the local stack, whose intake holds them to its own project's
    allowlists (a `notify` topic of another project was refused, and `make demo SCENARIO=preempt`
    ended "never accepted")."""
    from rlpipe.cli.request_files import read_request
    from rlpipe.core.request.policy import Policy
    from rlpipe.local.stack import LOCAL_ALLOWS_USER_CODE, StackConfig

    stack = StackConfig(root=Path("unused"))  # its intake lists its status topic (RLPIPE_STATUS_TOPIC)
    policy = Policy(
        project=stack.project, status_topic=stack.status_topic, allow_user_code=LOCAL_ALLOWS_USER_CODE
    )
    load_request(example.read_bytes(), policy=policy)
    with pytest.MonkeyPatch.context() as env:  # and its own files, beside it, as intake checks them
        env.setenv("RLPIPE_ALLOW_USER_CODE", "true" if LOCAL_ALLOWS_USER_CODE else "false")
        env.setenv("RLPIPE_STATUS_TOPIC", stack.status_topic)
        read_request(str(example))


# The coordinator endpoint JobSet stamps into a label on every child Job and pod
# (v0.10.1 pkg/controllers/jobset_controller.go coordinatorEndpoint, GetSubdomain).
def _coordinator_endpoint(js: dict[str, Any]) -> str:
    subdomain = js["spec"].get("network", {}).get("subdomain") or js["metadata"]["name"]
    return f"{js['metadata']['name']}-{js['spec']['coordinator']['replicatedJob']}-0-0.{subdomain}"


@pytest.mark.parametrize("attempt", [*range(1, 100), 100, 1000, 99_999])
def test_the_coordinator_label_fits_63_characters_at_every_attempt(attempt: int) -> None:
    """Attempt numbers go on across retry rounds; from attempt 100 a JobSet named after itself
    would stamp a 65-character coordinator label, and every child Job create would fail."""
    (train,) = (o for o in render_all(REQUESTS[0][1], CTX, attempt=attempt) if o["kind"] == "JobSet")
    endpoint = _coordinator_endpoint(train)
    assert len(endpoint) <= 63, endpoint
    assert validate_object(train) == []


def test_a_jobset_named_after_itself_past_attempt_99_is_refused_offline() -> None:
    """The reproduction: the default subdomain (the JobSet's name) at attempt 100."""
    (train,) = (o for o in render_all(REQUESTS[0][1], CTX, attempt=100) if o["kind"] == "JobSet")
    del train["spec"]["network"]["subdomain"]
    assert len(_coordinator_endpoint(train)) == 65
    (problem,) = validate_object(train)
    assert problem.startswith("$.spec.coordinator: the coordinator endpoint") and "63" in problem


def test_each_attempt_has_its_own_network_subdomain() -> None:
    """The JobSet creates a headless Service named after the subdomain and deletes it with
    itself: two attempts sharing one would lose each other's DNS."""
    subdomains = {
        o["spec"]["network"]["subdomain"]
        for attempt in (1, 2, 3)
        for o in render_all(REQUESTS[0][1], CTX, attempt=attempt)
        if o["kind"] == "JobSet"
    }
    assert len(subdomains) == 3


def test_the_pipelines_own_variables_come_after_the_requests_so_none_can_be_overridden() -> None:
    """Of two env entries with one name the later wins (kubernetes/kubernetes#58477): whatever an
    allowlist lets through, a request's entry comes first in every container."""
    req = validate_request(minimal_request())
    train = render(req, "train", 1, CTX)
    asked = {
        *req.training.command_env,
        *req.pathways.env.workload,
        *req.pathways.env.proxy,
        *req.pathways.env.resource_manager,
        *req.pathways.env.worker,
    }
    checked = 0
    for rjob in train["spec"]["replicatedJobs"]:
        pod = rjob["template"]["spec"]["template"]["spec"]
        for container in [*pod.get("initContainers", []), *pod["containers"]]:
            names = [e["name"] for e in container.get("env", [])]
            requested = [i for i, n in enumerate(names) if n in asked]
            owned = [i for i, n in enumerate(names) if n not in asked]
            if requested and owned:
                checked += 1
                assert max(requested) < min(owned), (container["name"], names)
    assert checked >= 4  # the head, its two sidecars and the TPU worker
