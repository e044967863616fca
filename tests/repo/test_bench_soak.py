"""Every fault kind the simulator knows has a soak scenario, or is excluded with a reason.

`make bench` crashed in the soak ("no soak scenario for fault kind 'provision-fail'") because the
fault was added to the simulator and the benchmark never ran again. This reads the simulator's own
list, so a new kind fails here first. Cheap: nothing starts; the soak itself runs in `make bench`.
"""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from bench import soak
from bench.common import request_document
from rlpipe.core.request import validate_request
from rlpipe.local.simulator.scenario import FAULT_KINDS, Scenario

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("kind", FAULT_KINDS)
def test_every_fault_kind_is_soaked_or_excluded_with_a_reason(kind: str) -> None:
    if kind in soak.EXCLUDED:
        reason = soak.EXCLUDED[kind]
        named = re.findall(r"tests/[\w/]+\.py", reason)
        assert len(reason) > 40 and named, "say why, and which tests hold it instead"
        assert all((ROOT / path).is_file() for path in named), (
            f"{named}: a named test file that does not exist"
        )
        return
    drawn = soak.draw(kind, random.Random(7))
    assert drawn.kind == kind
    Scenario.from_document({"faults": drawn.faults})  # the simulator accepts what the soak deals
    validate_request(request_document("soak7-00", **drawn.request))  # and the pipeline the request
    assert any(kind in scenario for scenario, _ in soak.EXPECTED_TEXT), (
        "RESULTS.md's table of expected outcomes must name it"
    )


def test_the_exclusions_are_kinds_the_simulator_still_has_and_a_deal_covers_the_rest() -> None:
    assert set(soak.EXCLUDED) <= set(FAULT_KINDS)
    dealt = {s.kind for s in soak.deal(len(soak.soak_kinds()) * 2, seed=1)}
    assert dealt == set(FAULT_KINDS) - set(soak.EXCLUDED)
