"""workflows/pipeline.yaml and the local engine, held to Google's published schema of the Workflows syntax.

The schema comes out of the pinned workflows-emulator wheel (tests/harness/workflow_schema_fetch.py),
widened only where the Workflows reference allows an expression or a float (the loosenings in
tests/harness/workflow_schema.py). Every definition the engine's tests load is checked by the
fixture in conftest.py; this file checks the pipeline, the loosenings, the pin, and that each
check bites.
"""

from __future__ import annotations

import textwrap
import zipfile
from pathlib import Path

import pytest
from test_workflows_engine_load import REFUSED_SHAPES

from rlpipe.local.workflows import Engine, LoadError, LocalWorkflows, load_workflow
from rlpipe.local.workflows.yaml_source import load_yaml
from tests.harness import workflow_schema_fetch as fetched
from tests.harness.workflow_clock import FakeClock
from tests.harness.workflow_schema import (
    LOOSENINGS,
    Loosening,
    LooseningDoesNotApply,
    WorkflowSchema,
    drift,
    loosened,
    published_schema,
    require_schemas,
)
from tests.harness.workflow_snippets import disagreement

PIPELINE = fetched.ROOT / "workflows" / "pipeline.yaml"


@pytest.fixture(scope="module")
def published() -> WorkflowSchema:
    return require_schemas()[0]


@pytest.fixture(scope="module")
def schema() -> WorkflowSchema:
    return require_schemas()[1]


def _pipeline() -> object:
    return load_yaml(PIPELINE.read_text())


# ---- the pin ------------------------------------------------------------------------------------


def test_the_cached_schema_is_the_one_reviewed(schema: WorkflowSchema) -> None:
    wheel = fetched.cached_wheel()
    assert wheel is not None
    problem = drift(wheel)
    assert problem is None, problem


def test_a_changed_schema_is_reported_naming_the_version_and_what_to_update(
    schema: WorkflowSchema, tmp_path: Path
) -> None:
    wheel = fetched.cached_wheel()
    assert wheel is not None
    changed = tmp_path / wheel.name
    data = fetched.schema_bytes(wheel).replace(b'"maxItems": 50', b'"maxItems": 60', 1)
    with zipfile.ZipFile(changed, "w") as copy:
        copy.writestr(fetched.SCHEMA_MEMBER, data)
    problem = drift(changed)
    assert problem is not None
    assert wheel.name in problem
    assert "EMULATOR_VERSION and SCHEMA_SHA256" in problem


# ---- the pipeline -------------------------------------------------------------------------------


def test_the_pipeline_is_valid_workflows_syntax(schema: WorkflowSchema) -> None:
    assert schema.errors(_pipeline()) == []


def test_as_published_the_schema_refuses_the_pipeline_only_where_a_loosening_widens_it(
    published: WorkflowSchema,
) -> None:
    errors = published.errors(_pipeline())
    assert errors, "the published schema accepts the pipeline: drop the loosenings it no longer needs"
    widened = {f"{loosening.pointer}/type" for loosening in LOOSENINGS}
    assert [str(e) for e in errors if e.rule not in widened] == []


@pytest.mark.parametrize("dropped", LOOSENINGS, ids=[loosening.pointer for loosening in LOOSENINGS])
def test_each_loosening_is_needed_by_the_pipeline(dropped: Loosening, published: WorkflowSchema) -> None:
    others = tuple(loosening for loosening in LOOSENINGS if loosening is not dropped)
    without = WorkflowSchema(loosened(published.schema, others))
    assert f"{dropped.pointer}/type" in {error.rule for error in without.errors(_pipeline())}


def test_a_loosening_is_refused_when_the_schema_no_longer_has_what_it_widens(
    published: WorkflowSchema,
) -> None:
    retyped = loosened(published.schema, ())  # a copy
    retyped["definitions"]["retry"]["oneOf"][0]["properties"]["max_retries"]["type"] = "number"
    with pytest.raises(LooseningDoesNotApply, match="/definitions/retry/oneOf/0/properties/max_retries"):
        loosened(retyped)
    moved = loosened(published.schema, ())
    del moved["definitions"]["args"]["properties"]["timeout"]
    with pytest.raises(LooseningDoesNotApply, match="/definitions/args/properties/timeout"):
        loosened(moved)


def test_the_schema_is_read_from_the_wheel_without_installing_it() -> None:
    wheel = fetched.cached_wheel()
    if wheel is None:
        require_schemas()
    assert wheel is not None
    assert published_schema(wheel)["$id"] == "https://json.schemastore.org/workflows.json"
    with pytest.raises(ModuleNotFoundError):
        __import__("workflows_emulator")


# ---- mutations of the pipeline are caught ---------------------------------------------------------

MUTATIONS = {
    "a misspelled step key": (
        "    - init:\n        assign:\n          - run_id: ${args.run_id}",
        "    - init:\n        asign:\n          - run_id: ${args.run_id}",
        "main/steps/0/init",
    ),
    "max_retries that is not a number": (
        "max_retries: ${plan.max_retries}",
        'max_retries: "x"',
        "run_stage/steps/1/attempts/try/steps/0/attempt_with_retries/retry/max_retries",
    ),
    "an unknown key in a step": (
        "    - wait_for_turn:\n        call: sys.sleep\n",
        "    - wait_for_turn:\n        call: sys.sleep\n        timeout: 5\n",
        "main/steps/4/wait_for_turn",
    ),
}


@pytest.mark.parametrize(("original", "mutated", "where"), MUTATIONS.values(), ids=list(MUTATIONS))
def test_a_mutated_pipeline_is_refused_by_the_schema_and_by_the_engine(
    original: str, mutated: str, where: str, schema: WorkflowSchema, tmp_path: Path
) -> None:
    text = PIPELINE.read_text()
    assert text.count(original) == 1, "the mutation no longer finds its place in pipeline.yaml"
    copy = tmp_path / "pipeline.yaml"
    copy.write_text(text.replace(original, mutated))
    errors = schema.errors(load_yaml(copy.read_text()))
    assert [error.where for error in errors] == [where]
    with pytest.raises(LoadError):
        load_workflow(copy.read_text())


# ---- the engine refuses what the schema refuses --------------------------------------------------


@pytest.mark.parametrize(("definition", "named"), REFUSED_SHAPES.values(), ids=list(REFUSED_SHAPES))
def test_each_shape_the_engine_refuses_for_the_syntax_is_refused_by_the_schema(
    definition: str, named: str, schema: WorkflowSchema
) -> None:
    assert schema.errors(load_yaml(textwrap.dedent(definition))) != []


COMPUTED_AUTH = """
- fetch:
    call: http.get
    args:
      url: http://localhost/
      auth: ${credentials}
"""


def test_an_engine_that_loads_what_the_schema_refuses_is_reported(schema: WorkflowSchema) -> None:
    assert disagreement(COMPUTED_AUTH, schema) is None  # the engine refuses it, as the schema does
    reported = disagreement(COMPUTED_AUTH, schema, refuses=lambda text: False)
    assert reported is not None
    assert "0/fetch/args/auth" in reported
    assert "loader.py" in reported


def test_every_door_into_the_engine_is_recorded(loaded_definitions_hold_to_the_schema: list[str]) -> None:
    seen = loaded_definitions_hold_to_the_schema
    texts = [f"- {door}:\n    return: 1\n" for door in ("loaded", "engine", "service")]
    load_workflow(texts[0])
    Engine(texts[1], clock=FakeClock()).shutdown()
    with LocalWorkflows(texts[2], clock=FakeClock()):
        pass
    assert [text for text in texts if text not in seen] == []
