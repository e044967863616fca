"""Every definition the engine's tests load, held to the published Workflows schema.

The engine's tests hand definitions to the loader in many forms (YAML text, ``json.dumps`` of a
dict, templates filled in per case, ``workflows/pipeline.yaml``) and through three doors
(``load_workflow``, ``Engine``, ``LocalWorkflows``). All of them pass the text to the loader's
``load_yaml``, so a fixture (tests/local/workflows/conftest.py) records what reaches it, during
every engine test: a test added tomorrow is covered without being listed anywhere.

The rule held for each recorded definition: what the schema refuses, the engine refuses too, at
load time (a YAML error counts: the schema never sees such text). The other direction is not an
error: the engine refuses much that the schema cannot express (a ``next`` to a missing step, an
unknown function, a loop variable used after its loop) and what it does not implement ("not
supported by the local engine").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import yaml

from rlpipe.local.workflows import LoadError, load_workflow
from rlpipe.local.workflows import loader as engine_loader
from rlpipe.local.workflows.yaml_source import load_yaml
from tests.harness.workflow_schema import WorkflowSchema


def record_definitions(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Until the test ends, each text the engine's loader parses is appended to the list returned."""
    seen: list[str] = []
    parse = engine_loader.load_yaml

    def recording(text: str) -> Any:
        seen.append(text)
        return parse(text)

    monkeypatch.setattr(engine_loader, "load_yaml", recording)
    return seen


def engine_refuses(text: str) -> bool:
    try:
        load_workflow(text)
    except LoadError:
        return True
    return False


def disagreement(
    text: str, schema: WorkflowSchema, refuses: Callable[[str], bool] = engine_refuses
) -> str | None:
    """Why ``text`` breaks the rule (the schema refuses it, the engine loads it), or ``None``."""
    try:
        document = load_yaml(text)
    except yaml.YAMLError:
        return None
    errors = schema.errors(document)
    if not errors or refuses(text):
        return None
    listed = "\n".join(f"  - {error}" for error in errors)
    return (
        "the published Workflows schema (with the loosenings in tests/harness/workflow_schema.py) "
        f"refuses this definition, but the local engine loads it:\n{listed}\n"
        "Make shared/rlpipe/local/workflows/loader.py refuse it at load time, naming the field and "
        "the fix; or, if the Workflows reference allows it, add a loosening citing the page.\n"
        f"The definition:\n{text}"
    )
