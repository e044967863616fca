"""Golden manifests for every example × stage, reviewed by eye against docs/design.md#what-we-hand-kubernetes-kueue-and-jobset when (re)generated.

Regenerate deliberately with `UPDATE_GOLDENS=1 make test` and review the diff before committing.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from rlpipe.cli.main import dump_yaml
from rlpipe.core import identity
from rlpipe.core.manifests import RenderContext, render
from rlpipe.core.request import load_request
from rlpipe.core.request.policy import Policy
from tests.conftest import EXAMPLES

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
BUCKET = "demo-artifacts"


SWEEPS = [p for p in EXAMPLES if "sweep:" in p.read_text()]
RUNS = [p for p in EXAMPLES if p not in SWEEPS]


@pytest.mark.parametrize("stage", identity.MAXTEXT_STAGES)
@pytest.mark.parametrize("example", RUNS, ids=[p.stem for p in RUNS])
def test_rendered_manifest_matches_golden(example: Path, stage: str) -> None:
    req = load_request(example.read_bytes(), source=str(example), policy=Policy(allow_user_code=True))
    assert req.request_id, "examples carry a request_id so their run id is stable"
    ctx = RenderContext(
        run_id=identity.run_id_for(identity.key_for_request_id(req.request_id)), bucket=BUCKET
    )
    text = dump_yaml([render(req, stage, 1, ctx)])  # type: ignore[arg-type]
    _match(GOLDEN / example.stem / f"{stage}.yaml", text)


@pytest.mark.parametrize("example", SWEEPS, ids=[p.stem for p in SWEEPS])
def test_each_sweep_childs_training_matches_golden(example: Path) -> None:
    """A sweep's children, as intake makes them: each child's JobSet under its own run id, with
    its point's values in train_rl's arguments (the rest is the parent's request)."""
    from rlpipe.core import sweep

    req = load_request(example.read_bytes(), source=str(example), policy=Policy(allow_user_code=True))
    assert req.request_id
    parent_key = identity.key_for_request_id(req.request_id)
    for child in sweep.children(req):
        run_id = identity.run_id_for(sweep.child_key(parent_key, child.index))
        text = dump_yaml([render(child.request, "train", 1, RenderContext(run_id=run_id, bucket=BUCKET))])
        _match(GOLDEN / example.stem / f"child-{child.index}-train.yaml", text)


def _match(golden: Path, text: str) -> None:
    if os.environ.get("UPDATE_GOLDENS") == "1":
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(text)
    assert golden.exists(), f"missing golden {golden}; run with UPDATE_GOLDENS=1 and review it"
    assert text == golden.read_text(), f"{golden} differs; if intended, regenerate and review the diff"


MANIFEST_SHA256 = "5" * 64


def test_the_publish_job_matches_its_golden() -> None:
    """The publish Job of the publish example: CPU pool, its own write-token Secret, the program
    shipped in the manifest, LFS uploads (no Xet), the card in an env value."""
    from rlpipe.control.lifecycle.publishing import UNRENDERED_CARD, publisher_program

    example = next(p for p in EXAMPLES if p.stem.endswith("-publish"))
    req = load_request(example.read_bytes(), source=str(example), policy=Policy(allow_user_code=True))
    assert req.request_id and req.publish is not None
    ctx = RenderContext(
        run_id=identity.run_id_for(identity.key_for_request_id(req.request_id)),
        bucket=BUCKET,
        model_card=UNRENDERED_CARD,
        publisher_program=publisher_program(),
        export_manifest_sha256=MANIFEST_SHA256,  # what the ledger recorded when export ended
    )
    obj = render(req, "publish", 1, ctx)
    container = obj["spec"]["template"]["spec"]["containers"][0]
    args = container["args"]
    assert args[args.index("--manifest-sha256") + 1] == MANIFEST_SHA256, (
        "publish is held to export's manifest"
    )
    token = next(e for e in container["env"] if e["name"] == "HF_TOKEN")
    assert (
        token["valueFrom"]["secretKeyRef"]["name"]
        == req.publish.token_secret.name
        != req.hf_token_secret.name
    )
    assert container["command"][:2] == ["python3", "-c"] and container["command"][2] == publisher_program()
    text = dump_yaml([obj])
    golden = GOLDEN / example.stem / "publish.yaml"
    if os.environ.get("UPDATE_GOLDENS") == "1":
        golden.write_text(text)
    assert text == golden.read_text(), f"{golden} differs; if intended, regenerate and review the diff"


@pytest.mark.parametrize("mode", ["reservation", "on-demand", "spot", "flex-start"])
def test_each_provisioning_mode_matches_its_golden(mode: str) -> None:
    """The training JobSet of the v6e-32 example in each tpu.provisioning mode (docs/provisioning.md
    cites what each renders: reservation selectors, the gke-spot label and taint, the gke-queued
    taint and the flex-start queue, and the spot checkpoint period rule)."""
    from rlpipe.core.request import validate_request

    example = next(p for p in EXAMPLES if p.stem == "gemma4-26b-v6e-32")
    doc = yaml.safe_load(example.read_text())
    doc["tpu"] = {"provisioning": mode, **({"reservation": "tpu-v6e-res"} if mode == "reservation" else {})}
    req = validate_request(doc, Policy(reservations=("tpu-v6e-res",)))  # a reservation the deployment lists
    assert req.request_id
    ctx = RenderContext(
        run_id=identity.run_id_for(identity.key_for_request_id(req.request_id)), bucket=BUCKET
    )
    text = dump_yaml([render(req, "train", 1, ctx)])
    golden = GOLDEN / "provisioning" / mode / "train.yaml"
    if os.environ.get("UPDATE_GOLDENS") == "1":
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(text)
    assert text == golden.read_text(), f"{golden} differs; if intended, regenerate and review the diff"
