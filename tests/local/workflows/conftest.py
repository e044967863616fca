"""Every definition an engine test loads is checked against the published Workflows schema.

See tests/harness/workflow_snippets.py: what the schema refuses, the engine must refuse at load
time. A definition that breaks this fails the test that loaded it, at teardown, with the schema's
errors. Without the cached schema (``make workflows-schema``) nothing is checked here, and
tests/local/workflows/test_workflow_schema.py reports it.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.harness.workflow_schema import cached_schemas
from tests.harness.workflow_snippets import disagreement, record_definitions

# Verdicts by text, for this process: workflows/pipeline.yaml alone is loaded by dozens of tests.
_VERDICTS: dict[str, str | None] = {}


@pytest.fixture(autouse=True)
def loaded_definitions_hold_to_the_schema() -> Iterator[list[str]]:
    with pytest.MonkeyPatch.context() as patch:
        seen = record_definitions(patch)
        yield seen
    schemas = cached_schemas()
    if schemas is None:
        return
    loosened = schemas[1]
    problems = []
    for text in dict.fromkeys(seen):
        if text not in _VERDICTS:
            _VERDICTS[text] = disagreement(text, loosened)
        if _VERDICTS[text]:
            problems.append(_VERDICTS[text])
    if problems:
        pytest.fail("\n\n".join(p for p in problems if p), pytrace=False)
