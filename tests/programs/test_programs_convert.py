"""The real ``to_maxtext`` and ``to_huggingface`` on the tiny Gemma 4 fixture, with rlpipe's argv.

``make programs`` ran both MaxText 0.2.4 converters (``programs.parts``: convert, export) with the
canonical example's rendered argv, changed only as ``rlpipe.local.simulator.testbed`` says (the
bucket is a folder, the container's paths sit under the run's folder, the fixture's size). What
they wrote is judged here by rlpipe's own done rules (``core.layout``): the conversion as it lies
in the bucket; the export as the export script leaves it, i.e. after rlpipe's real manifest step
(``core/export_manifest.py``) uploaded the files to_huggingface wrote into its local directory to
fake-gcs-server, and by the publish program's own check of that manifest
(``publisher/exported.py``). The export is also held against the fixture it started from, tensor
by tensor. The simulator is held to both programs in ``tests/programs/test_programs_simulator.py``.
"""

from __future__ import annotations

import hashlib
import json
import math
import struct
from pathlib import Path
from typing import Any

import pytest

from programs import parts
from programs.cases import BUCKET, HF_REVISION, RUN_ID, cases, container
from programs.converters_part import KEPT_EXPORT
from rlpipe.control.lifecycle import stored_outputs
from rlpipe.core import export_manifest, layout
from rlpipe.core.manifests import RenderContext, render
from rlpipe.local.simulator import testbed
from rlpipe.publisher import exported as publisher
from tests.conftest import Buckets
from tests.harness.exported import run_step
from tests.harness.programs import kept, result

CASES = {c.name: c for c in cases()}
CONVERT = CASES[parts.CONVERT_CASE]
EXPORT = CASES[parts.EXPORT_CASE]
EMBEDDING = "model.language_model.embed_tokens.weight"
ATTEMPT_DIR = layout.parse_gs(testbed.value_of(CONVERT.args, "base_output_directory"))[1]


def _ran(part: str) -> dict[str, Any]:
    ran = result(part)
    assert ran["exit_code"] == 0, f"{part} exited {ran['exit_code']}:\n" + "\n".join(ran["log"][-25:])
    return ran


def _fixture_tensors() -> dict[str, Any]:
    """The fixture's own tensors, read from its safetensors header (a length, then JSON)."""
    data = (parts.FIXTURE / "model.safetensors").read_bytes()
    (size,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + size])
    header.pop("__metadata__", None)
    return header


# ---- to_maxtext ---------------------------------------------------------------------------------


def test_to_maxtext_converts_the_fixture_with_the_rendered_argv() -> None:
    """It says it saved where the argv told it to: the attempt directory, in the bucket's folder."""
    lines = _ran("convert")["log"]
    said = [
        line.split("Checkpoint saved to ", 1)[1]
        for line in lines
        if "Conversion complete. Checkpoint saved to " in line
    ]
    assert said and said[-1].endswith(f"/{testbed.BUCKET_DIR}/{ATTEMPT_DIR}"), lines[-10:]


def test_our_convert_done_rule_accepts_the_real_conversion() -> None:
    objects = _ran("convert")["objects"]
    assert layout.convert_complete(objects, ATTEMPT_DIR).complete
    # what train loads (load_parameters_path): step 0's items, with its tree metadata and marker
    items = layout.converted_items(ATTEMPT_DIR)
    assert {items + "_METADATA", items + layout.COMMIT_MARKER} <= set(objects)


def test_our_convert_done_rule_refuses_the_real_conversion_without_its_step_marker() -> None:
    objects = dict(_ran("convert")["objects"])
    objects.pop(layout.converted_step_commit(ATTEMPT_DIR))
    assert not layout.convert_complete(objects, ATTEMPT_DIR).complete


# ---- to_huggingface, and the export script's manifest step over what it wrote --------------------


def _export_env() -> dict[str, str]:
    """The export container's plain environment, as rendered."""
    ctx = RenderContext(run_id=RUN_ID, bucket=BUCKET, hf_revision=HF_REVISION)
    found = container(render(EXPORT.request, "export", 1, ctx))
    return {e["name"]: e["value"] for e in found.get("env", []) if "value" in e}


def test_to_huggingface_writes_into_the_directory_the_export_script_uploads() -> None:
    """The argv's base_output_directory is the directory the script's manifest step walks."""
    ran = _ran("export")
    output = testbed.value_of(EXPORT.args, "base_output_directory")
    assert output == _export_env()[export_manifest.ENV_DIR] == export_manifest.LOCAL_DIR
    assert {layout.HF_CONFIG, layout.HF_SINGLE} <= set(ran["exported"]), ran["exported"]
    said = [
        line.split("Using local directory: ", 1)[1]
        for line in ran["log"]
        if "Using local directory: " in line
    ]
    assert said and said[-1].endswith(f"/{testbed.FS_DIR}{output}"), said


def _uploaded(buckets: Buckets) -> None:
    """The export script's last step, run for real over the files the real to_huggingface wrote."""
    done = run_step(buckets.artifacts, RUN_ID, kept("export", KEPT_EXPORT))
    assert done.returncode == 0, done.stdout + done.stderr


def _sizes(buckets: Buckets) -> dict[str, int]:
    run = layout.RunLayout(buckets.artifacts, RUN_ID)
    return {b.name: int(b.size) for b in buckets.client.list_blobs(buckets.artifacts, prefix=run.hf_dir)}


def test_the_manifest_step_uploads_exactly_the_real_exports_files(buckets: Buckets) -> None:
    _uploaded(buckets)
    wrote = _ran("export")["exported"]
    run = layout.RunLayout(buckets.artifacts, RUN_ID)
    manifest = json.loads(
        buckets.client.bucket(buckets.artifacts).blob(run.export_manifest).download_as_bytes()
    )
    local = kept("export", KEPT_EXPORT)
    digests = {n: hashlib.sha256((local / n).read_bytes()).hexdigest() for n in wrote}
    assert {f["path"]: (f["size"], f["sha256"]) for f in manifest["files"]} == {
        n: (size, digests[n]) for n, size in wrote.items()
    }
    sizes = _sizes(buckets)
    assert set(sizes) == {run.hf_dir + n for n in wrote} | {run.export_manifest}
    assert {n: sizes[run.hf_dir + n] for n in wrote} == wrote


def test_our_export_done_rule_accepts_the_real_export_as_the_script_leaves_it(buckets: Buckets) -> None:
    _uploaded(buckets)
    verdict = stored_outputs.export_completeness(buckets.store("artifacts"), RUN_ID)
    assert verdict.complete, verdict.reason


def test_the_publish_programs_check_accepts_the_real_export(buckets: Buckets, tmp_path: Path) -> None:
    """What the publish Job asks before it pushes: the manifest readable, the prefix holding exactly
    its files at their sizes, each downloaded file of the sha256 export wrote."""
    _uploaded(buckets)
    run = layout.RunLayout(buckets.artifacts, RUN_ID)
    bucket = buckets.client.bucket(buckets.artifacts)
    files = publisher.read_manifest(bucket.get_blob(run.export_manifest), run.uri(run.export_manifest))
    objects = {n[len(run.hf_dir) :]: s for n, s in _sizes(buckets).items() if n != run.export_manifest}
    publisher.check_listing(files, objects, run.uri(run.hf_dir))
    for path, (_, digest) in files.items():
        bucket.blob(run.hf_dir + path).download_to_filename(str(tmp_path / "copy"))
        publisher.check_sha256(str(tmp_path / "copy"), path, digest)


def test_both_checks_refuse_the_real_export_with_its_weights_missing(buckets: Buckets) -> None:
    _uploaded(buckets)
    run = layout.RunLayout(buckets.artifacts, RUN_ID)
    buckets.client.bucket(buckets.artifacts).blob(run.hf_dir + layout.HF_SINGLE).delete()
    verdict = stored_outputs.export_completeness(buckets.store("artifacts"), RUN_ID)
    assert not verdict.complete and verdict.missing == (run.hf_dir + layout.HF_SINGLE,)
    bucket = buckets.client.bucket(buckets.artifacts)
    files = publisher.read_manifest(bucket.get_blob(run.export_manifest), run.uri(run.export_manifest))
    objects = {n[len(run.hf_dir) :]: s for n, s in _sizes(buckets).items() if n != run.export_manifest}
    with pytest.raises(publisher.NotExported, match=f"{layout.HF_SINGLE} is gone"):
        publisher.check_listing(files, objects, run.uri(run.hf_dir))


# ---- the export against the fixture it started from ------------------------------------------------


def test_the_export_has_the_fixtures_tensors_names_shapes_and_dtypes() -> None:
    tensors = _ran("export")["tensors"]
    given = {name: (meta["shape"], meta["dtype"]) for name, meta in _fixture_tensors().items()}
    made = {name: (meta["shape"], meta["dtype"]) for name, meta in tensors["output"].items()}
    assert sorted(made) == sorted(given), (
        f"only exported: {sorted(set(made) - set(given))[:5]}; only in the fixture: {sorted(set(given) - set(made))[:5]}"
    )
    safetensors_dtype = {"bfloat16": "BF16"}
    wrong = {
        n: (made[n], given[n])
        for n in given
        if (made[n][0], safetensors_dtype.get(made[n][1], made[n][1])) != given[n]
    }
    assert not wrong, list(wrong.items())[:5]


def test_the_round_trip_keeps_every_tensor_but_the_embedding() -> None:
    """bf16 in, bf16 out: every value comes back exactly, except the embedding."""
    diffs = _ran("export")["tensors"]["diffs"]
    changed = sorted(n for n, d in diffs.items() if d["max_abs_diff"] > 0)
    assert changed == [EMBEDDING], changed[:5]


def test_the_embedding_comes_back_scaled_by_the_hard_coded_hidden_size() -> None:
    """The upstream limit (docs/programs.md): MaxText scales the embedding by √(hidden) of the
    model name's hard-coded config (2816, the 26B's) on the way in and divides by the fixture's (32)
    on the way out, so it comes back ×√(2816/32)."""
    embedding = _ran("export")["tensors"]["diffs"][EMBEDDING]
    ratio = embedding["max_abs_out"] / embedding["max_abs"]
    assert ratio == pytest.approx(math.sqrt(2816 / 32), rel=2**-7)  # bf16's precision


def test_the_exported_config_has_the_fixtures_size() -> None:
    config = _ran("export")["config.json"]
    text = config.get("text_config", config)
    assert text["num_hidden_layers"] == len(text["layer_types"]) == 30
    assert text["hidden_size"] == 32


def test_the_exported_config_keeps_the_hard_coded_experts_and_window() -> None:
    """The upstream limit: --override_model_architecture leaves top_k_experts and sliding_window at
    the 26B's (8, 1024) whatever the checkpoint's; a fix upstream fails this, and the docs change."""
    config = _ran("export")["config.json"]
    text = config.get("text_config", config)
    assert (text["top_k_experts"], text["sliding_window"]) == (8, 1024)
    assert text["num_experts"] == 4  # overridden, as the size keys say
