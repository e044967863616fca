"""Sweeps are a coordinator the services are wired with (control.lifecycle.coordinator for intake,
control.lifecycle.policies for the stage operations): the deployment's intake and stage operations
coordinate a sweep's runs, a service wired without it treats every run alone, and the sweep's
coordinator leaves a run that is in no sweep exactly as if it did not exist."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
import yaml

from rlpipe.control import services
from rlpipe.control.adapters.events import ObjectEvent
from rlpipe.control.adapters.logs import Logger
from rlpipe.control.lifecycle.coordinator import RunCoordinator
from rlpipe.control.lifecycle.policies import RunPolicies
from rlpipe.control.sweep.coordinator import SweepCoordinator
from rlpipe.core import identity
from rlpipe.core.failures import PermanentFailure
from rlpipe.core.request import validate_request
from rlpipe.core.runs.record import RunRecord, Source
from tests.conftest import Buckets, minimal_request, real_intake
from tests.control.sweep.test_sweep_control import _claimed

SWEEP = {"grid": {"training.num_generations": [2, 4]}, "max_parallel": 1}


def _drop(buckets: Buckets, name: str, doc: dict[str, Any]) -> ObjectEvent:
    blob = buckets.client.bucket(buckets.requests).blob(name)
    blob.upload_from_string(yaml.safe_dump(doc, sort_keys=False))
    return ObjectEvent(buckets.requests, name, str(blob.generation), blob.size, "e1")


@pytest.fixture
def deployment(buckets: Buckets, executions: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """``control.services`` reading this test's buckets and Executions server, as a function does."""
    env = buckets.env(RLPIPE_WORKFLOWS_ENDPOINT=executions.target, RLPIPE_KUBE_URL="http://127.0.0.1:9")
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    services.reset()
    yield
    services.reset()


def test_the_deployments_intake_claims_a_sweep_and_one_wired_alone_rejects_it_naming_why(
    buckets: Buckets, executions: Any, deployment: None
) -> None:
    doc = minimal_request(request_id="coord-sweep", sweep=SWEEP)
    wired = services.intake(Logger("test")).from_object(_drop(buckets, "requests/sweep.yaml", doc))
    assert wired.outcome == "started", wired
    parent = buckets.ledger().get(wired.run_id)
    assert parent is not None and parent.sweep is not None and len(parent.sweep.children) == 2
    assert all(buckets.ledger().get(c) is not None for c in parent.sweep.children)

    alone = real_intake(buckets, executions, coordinator=RunCoordinator())
    other = minimal_request(request_id="coord-alone", sweep=SWEEP)
    refused = alone.from_object(_drop(buckets, "requests/alone.yaml", other))
    assert refused.outcome == "rejected"
    assert "coordinates no sweeps" in refused.detail and "submit the request without sweep" in refused.detail
    assert buckets.ledger().get(identity.run_id_for(identity.key_for_request_id("coord-alone"))) is None


def test_the_deployments_stage_operations_select_a_sweeps_child_and_one_wired_alone_refuses(
    buckets: Buckets, deployment: None
) -> None:
    ledger, parent, children = _claimed(buckets, select={"metric": "post_mean_reward"})
    service = services.stage_service(Logger("test"))
    answer = service.select(children[0].run_id)
    assert answer["wait"] is True and answer["selected"] is None  # its siblings have not arrived
    assert "waiting for children 1, 2, 3" in answer["reason"]

    alone = replace(service, policies=RunPolicies())
    with pytest.raises(PermanentFailure, match="not part of a sweep"):
        alone.select(children[1].run_id)
    assert ledger.get(parent.run_id).state == "accepted"  # type: ignore[union-attr]


def test_the_sweep_coordinator_leaves_a_run_in_no_sweep_as_if_there_were_none(buckets: Buckets) -> None:
    ledger = buckets.ledger()
    req = validate_request(minimal_request())
    record = RunRecord(
        run_id="rcoordalone1", key="k", source=Source(kind="cli"), request=req.model_dump(mode="json")
    )
    assert ledger.claim(record)
    sweeps, alone = RunPolicies((SweepCoordinator(ledger, Logger("test")),)), RunPolicies()
    resolved: list[str] = []

    def resolve() -> tuple[str, dict[str, Any]]:
        resolved.append("once")
        return "a" * 40, {"train": {"repo": "r"}}

    for policies in (sweeps, alone):
        assert policies.pins(record, resolve) == ("a" * 40, {"train": {"repo": "r"}})
        assert policies.admission(record, conversion_ready=False) is None
        assert policies.steps(record, ["convert", "train", "publish"]) == [
            "convert",
            "train",
            "publish",
        ]
        assert policies.ended(record) is None
        assert policies.evaluated(record) is None
        with pytest.raises(PermanentFailure, match="not part of a sweep"):
            policies.select(record)
    assert resolved == ["once", "once"]  # its own pins, resolved for it alone
    after = ledger.get("rcoordalone1")
    assert after is not None and after.seq == record.seq  # nothing written for a run in no sweep


def test_the_deployments_reconcilers_give_a_finished_childs_slot_back_to_its_sweep(
    buckets: Buckets, deployment: None
) -> None:
    """The function's reconciler and the CLI's are wired with the sweep's coordinator: a child they
    finish gives back its slot (tests/control/sweep/test_sweep_control.py follows the whole repair)."""
    from rlpipe.reconcile import runner

    ledger, parent, children = _claimed(buckets)
    held = children[0].run_id
    ended = ledger.edit(held, lambda r: (r.set_state("failed"), "failed")[1])
    for reconciler in (
        runner.from_services(Logger("test")),
        runner.build(services.settings(), Logger("test")),
    ):
        ledger.edit(parent.run_id, lambda r: (setattr(r.sweep, "slots", [held]), "held")[1])
        assert reconciler.repairs.coordinator.member_ended(ended) is None  # the sweep goes on
        after = ledger.get(parent.run_id)
        assert after is not None and after.sweep is not None and after.sweep.slots == []
