"""Each demo runs its own run: the example's request_id with the demo's time, so a second demo
never writes its pages over the first one's (the review found every demo with one run id)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml

from rlpipe.cli.demo import SCENARIOS, demo_request_id
from rlpipe.cli.exit_codes import CliError
from rlpipe.core import identity
from rlpipe.core.request import validate_request
from rlpipe.core.request.policy import Policy
from tests.conftest import ROOT

EXAMPLES = sorted(
    {ROOT / (path or "examples/gemma4-26b-v6e-32.yaml") for path, _ in SCENARIOS.values()}
    - {ROOT / "examples/teams/teams.yaml"}
)


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_two_demos_of_one_example_make_two_runs_whose_request_validates(example: Path) -> None:
    first = demo_request_id(example, time.gmtime(1_800_000_000))
    second = demo_request_id(example, time.gmtime(1_800_000_001))
    assert first != second
    runs = {identity.run_id_for(identity.key_for_request_id(name, "")) for name in (first, second)}
    assert len(runs) == 2, "two demos, two run ids: two pages"
    doc = yaml.safe_load(example.read_text())
    assert first.startswith(str(doc["request_id"])[:20])  # still says which example it ran
    # The request intake reads is valid as named (the local stack lets the examples bring code).
    validate_request({**doc, "request_id": first}, Policy(allow_user_code=True))


def test_a_long_request_id_is_cut_to_fit_with_its_time(tmp_path: Path) -> None:
    example = tmp_path / "long.yaml"
    example.write_text(yaml.safe_dump({"request_id": "a" * 39 + "b"}))
    name = demo_request_id(example, time.gmtime(0))
    assert len(name) <= 40 and name.endswith("-19700101-000000") and name.startswith("a")


def test_the_readme_lists_every_scenario_the_real_plane_takes() -> None:
    """The README's list of what `make demo CLUSTER=real` takes was narrower than what works: every
    scenario that injects no fault runs there (local/clusters.refuse_faults)."""
    from rlpipe.cli.demo import choose_scenario

    readme = " ".join((ROOT / "README.md").read_text().split())
    listed = readme.split("it takes every `SCENARIO=` that injects no fault:", 1)[1].split("(", 1)[0]
    for scenario in SCENARIOS:
        if not scenario:
            continue
        try:
            choose_scenario(scenario, "real", Path("examples/gemma4-26b-v6e-32.yaml"))
        except CliError:  # refused on the real plane: it injects faults
            assert f"`{scenario}`" not in listed, scenario
        else:
            assert f"`{scenario}`" in listed, scenario


def test_an_example_without_a_request_id_gets_one_intake_reads(tmp_path: Path) -> None:
    example = tmp_path / "My_Example.v2.yaml"
    example.write_text(yaml.safe_dump({"model": "gemma4-26b"}))
    name = demo_request_id(example, time.gmtime(0))
    assert name == "my-example-v2-19700101-000000"
