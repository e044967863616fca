"""Every workload of a run carries its team (``rlpipe.dev/team``): on the Job or JobSet, and on each pod
template, so the pods GKE's cost allocation reads are labelled too. A deployment without teams
labels ``default``: one spelling for every run, so a view grouped by team never has a hole.

``label_problems`` reads manifests as the cluster gets them; the goldens (tests/golden) hold it,
a render for a team names that team, and a golden copy with one label line removed is reported.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from rlpipe.control.lifecycle.publishing import publisher_program
from rlpipe.core import identity
from rlpipe.core.manifests import RenderContext, render
from rlpipe.core.request import validate_request
from tests.conftest import minimal_request

GOLDEN = Path(__file__).resolve().parents[1] / "golden"


def _pod_templates(node: Any, path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    if isinstance(node, dict):
        spec = node.get("spec")
        if isinstance(spec, dict) and "containers" in spec:
            yield path, node
        for key, value in node.items():
            yield from _pod_templates(value, f"{path}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _pod_templates(value, f"{path}[{i}]")


def label_problems(objects: list[dict[str, Any]], team: str, where: str) -> list[str]:
    """Each object and pod template of ``objects`` that does not carry ``team``."""
    problems = []
    for obj in objects:
        name = f"{where} {obj.get('kind')} {(obj.get('metadata') or {}).get('name')}"
        if ((obj.get("metadata") or {}).get("labels") or {}).get(identity.LABEL_TEAM) != team:
            problems.append(f"{name}: metadata.labels has no {identity.LABEL_TEAM}={team}")
        templates = list(_pod_templates(obj.get("spec"), "spec"))
        if not templates:
            problems.append(f"{name}: no pod template found")
        for path, template in templates:
            if ((template.get("metadata") or {}).get("labels") or {}).get(identity.LABEL_TEAM) != team:
                problems.append(f"{name}: {path}.metadata.labels has no {identity.LABEL_TEAM}={team}")
    return problems


def _golden_problems(folder: Path) -> list[str]:
    problems = []
    for path in sorted(folder.rglob("*.yaml")):
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
        problems += label_problems(docs, "default", str(path.relative_to(folder)))
    return problems


def test_every_golden_workload_is_labelled_with_the_default_team() -> None:
    assert sorted(GOLDEN.rglob("*.yaml")), "no goldens found"
    assert _golden_problems(GOLDEN) == []


def test_a_golden_without_the_label_on_one_pod_template_is_reported(tmp_path: Path) -> None:
    original = GOLDEN / "gemma4-26b-v6e-32" / "train.yaml"
    lines = original.read_text().splitlines(keepends=True)
    labelled = [i for i, line in enumerate(lines) if f"{identity.LABEL_TEAM}:" in line]
    assert len(labelled) >= 2, "the JobSet and its pod templates are labelled"
    del lines[labelled[-1]]  # the last pod template's
    (tmp_path / "train.yaml").write_text("".join(lines))
    problems = _golden_problems(tmp_path)
    assert len(problems) == 1 and "template.metadata.labels has no rlpipe.dev/team=default" in problems[0], (
        problems
    )


def test_a_teams_run_is_labelled_with_its_team_on_every_stage() -> None:
    req = validate_request(minimal_request(publish={"repo": "rlpipe-demo/model"}))
    ctx = RenderContext(
        run_id="rteamlabel01",
        bucket="b",
        namespace="rlpipe-vision",
        team="vision",
        model_card="# a card",
        publisher_program=publisher_program(),
    )
    for stage in identity.STAGES:
        objects = [render(req, stage, 1, ctx)]
        assert label_problems(objects, "vision", stage) == []
