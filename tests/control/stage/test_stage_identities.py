"""Who may change a run through the stage function: the workflow's operations from the workflow's
identity only; an operator's (cancel, retry, promote) from any verified caller, who is recorded.

Over the functions-framework app (the real entry point, its ``caller_of`` reading the bearer token)
on real servers: fake-gcs-server for the ledger, the Kubernetes API double for the workloads. The
tokens are signed as the local stack signs its played ones (tests/harness/id_tokens.py), and the
function verifies them with the code it runs on Google Cloud.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from rlpipe.cli import charts as cli_charts
from rlpipe.cluster.status import WorkloadStatus
from rlpipe.control import services
from rlpipe.control.adapters.identities import OPERATOR_OPS, WORKFLOW_IDENTITY_ENV, WORKFLOW_OPS, CallerPolicy
from rlpipe.core.runs.record import Attempt, now
from rlpipe.local.identities import played_id_token
from rlpipe.report import render_report
from rlpipe.report.rows import attempt_rows, rounds
from rlpipe.report.sweep_page import sweep_facts
from tests.conftest import Buckets
from tests.control.stage.test_stage import _stage_app, env, hub, kube  # noqa: F401  (fixtures)
from tests.control.sweep.test_sweep_control import _claimed
from tests.harness.id_tokens import STAGE_URL

WORKFLOW = "rlpipe-workflow@my-project.iam.gserviceaccount.com"
OPERATOR = "rlpipe-operator@my-project.iam.gserviceaccount.com"
PERSON = "mallory@example.com"  # a person's own token: roles/run.invoker through var.stage_invokers
INVENTED = "TPU host 3 reported ECC errors"


def bearer(email: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {played_id_token(email, STAGE_URL)}"}


@pytest.fixture
def stage(env: dict[str, Any], monkeypatch: pytest.MonkeyPatch, signed_calls: Any) -> Any:
    """The stage function's app on this test's servers, in a deployment naming WORKFLOW."""
    monkeypatch.setenv(WORKFLOW_IDENTITY_ENV, WORKFLOW)
    monkeypatch.setattr(services, "stage_service", lambda log: env["service"])
    return _stage_app().test_client()


# ---- the rule, operation by operation ---------------------------------------------------------


@pytest.mark.parametrize("op", sorted(WORKFLOW_OPS))
def test_the_workflows_operations_are_the_workflow_identitys_alone(op: str) -> None:
    policy = CallerPolicy(workflow=WORKFLOW, local=False)
    assert policy.refusal(op, WORKFLOW) is None
    for other in (OPERATOR, PERSON, WORKFLOW.upper(), WORKFLOW + ".example.com", " " + WORKFLOW, None):
        assert policy.refusal(op, other) is not None, other


@pytest.mark.parametrize("op", sorted(OPERATOR_OPS))
def test_an_operators_operations_take_any_verified_caller_and_none_without_one(op: str) -> None:
    policy = CallerPolicy(workflow=WORKFLOW, local=False)
    assert all(policy.refusal(op, caller) is None for caller in (OPERATOR, PERSON, WORKFLOW))
    assert "verified caller" in str(policy.refusal(op, None))


def test_without_a_named_workflow_identity_only_a_local_deployment_lets_calls_in() -> None:
    """On Google Cloud a deployment that names no workflow identity refuses every operation (it
    cannot tell the workflow's calls); a local one that names none plays no identities at all."""
    unnamed = CallerPolicy(workflow=None, local=False)
    for op in sorted(WORKFLOW_OPS | OPERATOR_OPS):
        for caller in (WORKFLOW, OPERATOR, None):
            assert WORKFLOW_IDENTITY_ENV in str(unnamed.refusal(op, caller)), (op, caller)
    unplayed = CallerPolicy(workflow=None, local=True)
    assert all(unplayed.refusal(op, None) is None for op in WORKFLOW_OPS | OPERATOR_OPS)
    # A local stack that plays identities refuses a call that carries none, as Google Cloud would.
    assert CallerPolicy(workflow=WORKFLOW, local=True).refusal("finish", None) is not None


# ---- the reproduction: an invented failure from someone else ------------------------------------


def test_an_invented_failure_from_another_identity_is_refused_and_the_run_is_untouched(
    env: dict[str, Any],
    stage: Any,
    capsys: pytest.CaptureFixture[str],
) -> None:
    env["claim"]("rforged00001")
    before = env["ledger"].get("rforged00001")
    invented = {
        "op": "finish",
        "run_id": "rforged00001",
        "outcome": "failed",
        "failure": {"tag": "permanent", "message": INVENTED, "stage": "train", "attempt": 1},
        "execution_id": "rforged00001-exec",  # even the owner's execution id, copied
    }
    capsys.readouterr()
    tokens = {who: bearer(who) for who in (OPERATOR, PERSON)}
    for who, token in tokens.items():
        response = stage.post("/", json=invented, headers=token)
        assert response.status_code == 403, response.get_json()
        error = response.get_json()["error"]
        assert error["tag"] == "forbidden" and who in error["message"] and "workflow" in error["message"]
    after = env["ledger"].get("rforged00001")
    assert (after.state, after.failure, after.seq) == ("accepted", None, before.seq)
    assert env["published"] == []  # no status message claims the run failed
    logged = capsys.readouterr().out
    refusals = [line for line in logged.splitlines() if "caller refused" in line]
    assert len(refusals) == 2 and PERSON in refusals[1] and "rforged00001" in refusals[1]
    for token in tokens.values():  # the caller's identity is logged, never its token
        assert token["Authorization"].split()[1].split(".")[1] not in logged

    # The workflow's own finish of the same run is its to make.
    response = stage.post("/", json=invented, headers=bearer(WORKFLOW))
    assert response.status_code == 200, response.get_json()
    ended = env["ledger"].get("rforged00001")
    assert ended.state == "failed" and ended.failure.message == INVENTED and ended.failure.caller is None


def test_the_workflows_plan_with_its_own_identity_goes_through_and_without_one_is_refused(
    env: dict[str, Any],
    stage: Any,
) -> None:
    env["claim"]("rplanned0001")
    call = {"op": "plan", "run_id": "rplanned0001", "execution_id": "rplanned0001-exec"}
    unsigned = stage.post("/", json=call)  # no token: not a call Cloud Run would have let in
    assert unsigned.status_code == 403 and "verified caller" in unsigned.get_json()["error"]["message"]
    assert env["ledger"].get("rplanned0001").lineage.hf_sha is None
    planned = stage.post("/", json=call, headers=bearer(WORKFLOW))
    assert planned.status_code == 200 and planned.get_json()["stages"][0] == "convert"
    assert env["ledger"].get("rplanned0001").lineage.hf_sha is not None


# ---- cancel: an operator's operation, with who asked recorded --------------------------------------


def _launched(env: dict[str, Any], run_id: str) -> str:
    """A run whose conversion Job exists, driven by its execution."""
    env["claim"](run_id)
    env["service"].plan(run_id, f"{run_id}-exec")
    return str(env["service"].launch(run_id, "convert", 1, None, f"{run_id}-exec")["workload"])


def test_cancel_deletes_the_workloads_and_ends_the_run_with_the_verified_caller(
    env: dict[str, Any],
    stage: Any,
) -> None:
    workload = _launched(env, "rcancel00001")
    assert [j["metadata"]["name"] for j in env["kube"].list("jobs", namespace="rlpipe")] == [workload]
    response = stage.post("/", json={"op": "cancel", "run_id": "rcancel00001"}, headers=bearer(OPERATOR))
    assert response.status_code == 200, response.get_json()
    answer = response.get_json()
    assert answer["state"] == "cancelled" and workload in answer["deleted"]
    assert "cleanup_error" not in answer
    assert env["kube"].list("jobs", namespace="rlpipe") == []
    record = env["ledger"].get("rcancel00001")
    assert record.state == "cancelled" and record.failure.tag == "cancelled"
    assert record.failure.caller == OPERATOR
    ended = [e for e in env["ledger"].history("rcancel00001") if e["event"] == "cancelled"]
    assert ended and ended[-1]["failure"]["caller"] == OPERATOR  # in the event log too
    # The report says who: beside the run's failure, and in how its round ended.
    assert f'<span id="failure-caller">(verified caller {OPERATOR})</span>' in render_report(
        record, painter=cli_charts
    )
    [round_one] = rounds(record, attempt_rows(record, datetime.now(UTC)))
    assert round_one.ended.endswith(f"cancelled by rlpipe cancel (verified caller {OPERATOR})")
    # A second cancel of the ended run changes nothing and says its state.
    again = stage.post("/", json={"op": "cancel", "run_id": "rcancel00001"}, headers=bearer(PERSON))
    assert again.status_code == 200 and again.get_json()["state"] == "cancelled"
    assert env["ledger"].get("rcancel00001").failure.caller == OPERATOR
    unknown = stage.post("/", json={"op": "cancel", "run_id": "rnoledger001"}, headers=bearer(OPERATOR))
    assert unknown.status_code == 422 and "no ledger" in unknown.get_json()["error"]["message"]


def test_cancel_still_ends_the_run_when_the_cluster_refuses_the_cleanup(
    env: dict[str, Any],
    stage: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _launched(env, "rcancel00002")

    class Unreachable:
        def __getattr__(self, name: str) -> Any:
            def refuse(*args: Any, **kwargs: Any) -> Any:
                raise ConnectionError("the API server did not answer")

            return refuse

    broken = replace(env["service"], cluster=Unreachable())
    monkeypatch.setattr(services, "stage_service", lambda log: broken)
    response = stage.post("/", json={"op": "cancel", "run_id": "rcancel00002"}, headers=bearer(OPERATOR))
    assert response.status_code == 200, response.get_json()
    answer = response.get_json()
    assert answer["state"] == "cancelled" and answer["deleted"] == []
    assert "did not answer" in answer["cleanup_error"]
    assert env["ledger"].get("rcancel00002").failure.caller == OPERATOR


def test_cancel_of_a_sweep_records_the_caller_on_the_parent_and_every_child_it_ends(
    env: dict[str, Any],
    buckets: Buckets,
    stage: Any,
) -> None:
    ledger, parent, children = _claimed(buckets)
    ledger.edit(children[0].run_id, lambda r: (r.set_state("succeeded"), "succeeded")[1])
    response = stage.post("/", json={"op": "cancel", "run_id": parent.run_id}, headers=bearer(OPERATOR))
    assert response.status_code == 200 and response.get_json()["state"] == "cancelled"
    ended = ledger.get(parent.run_id)
    assert ended.state == "cancelled" and ended.sweep.cancelled_by == OPERATOR
    assert ended.failure.caller == OPERATOR
    kids = [ledger.get(c.run_id) for c in children]
    assert kids[0].state == "succeeded" and kids[0].failure is None  # it had ended: left as it was
    assert all(k.state == "cancelled" and k.failure.caller == OPERATOR for k in kids[1:])
    facts = sweep_facts(ended, kids)
    assert facts.nothing_published == f"the sweep was cancelled by {OPERATOR}"


class _PodsHeld:
    """The cluster as a cancel's last read sees it: each live training attempt's two TPU pods have
    held 0.5 chip-hours each; deleting its workloads is recorded."""

    def __init__(self) -> None:
        self.deleted: list[str] = []

    def in_namespace(self, namespace: str) -> _PodsHeld:
        return self

    def status(self, name: str, **kwargs: Any) -> WorkloadStatus:
        assert name not in self.deleted, "read after its workloads were deleted"
        return WorkloadStatus(
            kind="JobSet", name=name, phase="running", pod_chip_hours={f"{name}-w0": 0.5, f"{name}-w1": 0.5}
        )

    def delete_run(self, run_id: str) -> list[str]:
        self.deleted.append(f"{run_id}-train-a1")
        return [f"{run_id}-train-a1"]


def test_cancel_of_a_sweep_records_each_live_childs_chip_hours_before_deleting_its_workloads(
    env: dict[str, Any], buckets: Buckets, stage: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger, parent, children = _claimed(buckets)
    for child in children:
        ledger.edit(
            child.run_id,
            lambda r: (
                r.attempts.append(
                    Attempt(
                        stage="train",
                        attempt=1,
                        workload=f"{r.run_id}-train-a1",
                        launched_at=now(),
                        phase="running",
                    )
                ),
                "launched",
            )[1],
        )
    cluster = _PodsHeld()
    monkeypatch.setattr(services, "stage_service", lambda log: replace(env["service"], cluster=cluster))
    response = stage.post("/", json={"op": "cancel", "run_id": parent.run_id}, headers=bearer(OPERATOR))
    assert response.status_code == 200 and response.get_json()["state"] == "cancelled"
    for child in children:
        train = ledger.get(child.run_id).attempt_record("train", 1)
        assert train.chip_hours == 1.0 and len(train.pod_chip_hours) == 2, train
        # The last read changes the figure, never the phase: the cancel ends it (end_record.end),
        # as cancelled, not as the read's phase.
        assert train.phase == "cancelled"
    assert {f"{c.run_id}-train-a1" for c in children} <= set(cluster.deleted)


# ---- teams: an operator operates on its own team's runs only ------------------------------------

TEAMS = {
    "vision": {"operators": [f"serviceAccount:{OPERATOR}"]},
    "speech": {"operators": [f"user:{PERSON}"]},
}


@pytest.fixture
def teams_stage(env: dict[str, Any], stage: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The stage function of a deployment declaring two teams, ``vision`` run by OPERATOR and
    ``speech`` by PERSON."""
    import json

    from rlpipe.control.adapters.logs import Logger

    service = env["service"]
    verified = services.token_check()  # the issuer's, as the stage fixture set it
    declared = replace(
        service.settings,
        teams_json=json.dumps(TEAMS),
        stage_audiences=verified.audiences,
        id_token_certs_url=verified.certs_url,
    )
    policies = services.run_policies(declared, service.ledger, service.state, Logger("stage"))
    monkeypatch.setattr(
        services, "stage_service", lambda log: replace(service, settings=declared, policies=policies)
    )
    monkeypatch.setattr(services, "settings", lambda: declared)  # retry and promote: no stage service
    monkeypatch.setattr(services, "ledger", lambda: env["ledger"])
    return stage


def _of_team(env: dict[str, Any], run_id: str, team: str) -> None:
    from rlpipe.core.runs.record import Source

    env["claim"](run_id)

    def move(record: Any) -> tuple[str, None]:
        record.source = Source(
            kind="gcs", bucket="b", name=f"requests/{team}/r.json", generation="1", team=team
        )
        return "moved", None

    env["ledger"].update(run_id, move)


@pytest.mark.parametrize(
    "body",
    [
        {"op": "cancel"},
        {"op": "retry", "key": "retry-after-the-flaky-host", "reason": "flaky host", "by": "sam"},
        {"op": "promote", "by": "sam", "reason": "good enough"},
    ],
    ids=["cancel", "retry", "promote"],
)
def test_an_operator_of_another_team_is_refused_and_the_run_is_untouched(
    body: dict[str, Any], env: dict[str, Any], teams_stage: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    _of_team(env, "rvision0001", "vision")
    before = env["ledger"].get("rvision0001")
    response = teams_stage.post("/", json={**body, "run_id": "rvision0001"}, headers=bearer(PERSON))
    assert response.status_code == 403, response.get_json()
    error = response.get_json()["error"]
    assert error["tag"] == "forbidden"
    assert PERSON in error["message"] and "team vision" in error["message"]
    assert "teams.vision.operators" in error["message"]
    after = env["ledger"].get("rvision0001")
    assert (after.state, after.seq, after.rounds) == (before.state, before.seq, before.rounds)
    assert "caller refused" in capsys.readouterr().out


def test_the_teams_own_operator_cancels_its_run(env: dict[str, Any], teams_stage: Any) -> None:
    _of_team(env, "rvision0002", "vision")
    response = teams_stage.post("/", json={"op": "cancel", "run_id": "rvision0002"}, headers=bearer(OPERATOR))
    assert response.status_code == 200, response.get_json()
    record = env["ledger"].get("rvision0002")
    assert record.state == "cancelled" and record.failure.caller == OPERATOR


def test_the_clis_question_before_a_cancel_is_answered_by_the_team_rule_and_changes_nothing(
    env: dict[str, Any], teams_stage: Any
) -> None:
    """``rlpipe cancel`` asks first (``check_only``), before it cancels any Workflows execution."""
    _of_team(env, "rvision0003", "vision")
    before = env["ledger"].get("rvision0003")
    ask = {"op": "cancel", "run_id": "rvision0003", "check_only": True}
    refused = teams_stage.post("/", json=ask, headers=bearer(PERSON))
    assert refused.status_code == 403 and "team vision" in refused.get_json()["error"]["message"]
    allowed = teams_stage.post("/", json=ask, headers=bearer(OPERATOR))
    assert allowed.status_code == 200 and allowed.get_json() == {"run_id": "rvision0003", "allowed": True}
    after = env["ledger"].get("rvision0003")
    assert (after.state, after.seq, after.failure) == (before.state, before.seq, None)


def test_a_run_from_before_teams_is_operated_as_it_was_then(env: dict[str, Any], teams_stage: Any) -> None:
    """A run claimed before the deployment declared teams has no team (``default``): any caller IAM
    lets in may operate on it, as before, rather than no one."""
    env["claim"]("rbeforeteams")
    response = teams_stage.post("/", json={"op": "cancel", "run_id": "rbeforeteams"}, headers=bearer(PERSON))
    assert response.status_code == 200, response.get_json()
    assert env["ledger"].get("rbeforeteams").state == "cancelled"


# ---- the token is verified, not read ------------------------------------------------------------


def test_a_token_signed_by_another_key_for_another_audience_expired_or_unsigned_is_a_401(
    stage: Any, env: dict[str, Any], signed_calls: Any, tmp_path: Any
) -> None:
    """Each token names the workflow, so only its verification stands between it and the
    workflow's operations; each is refused before the call is read, and changes nothing."""
    import time

    from google.auth import crypt, jwt

    from rlpipe.local import identities

    claimed = env["claim"]("rtokens00001").state
    other_key = identities.ensure_signing_key(tmp_path / "other")
    issued = time.time()

    def unsigned() -> str:
        class NoKey(crypt.Signer):
            key_id = None

            def sign(self, message: Any) -> bytes:
                return b""

        claims = {
            "iss": identities.ISSUER,
            "aud": STAGE_URL,
            "email": WORKFLOW,
            "iat": int(issued),
            "exp": int(issued) + 600,
        }
        return jwt.encode(NoKey(), claims, header={"alg": "none"}).decode()

    forged = {
        "another key": identities.played_id_token(WORKFLOW, STAGE_URL, key_path=other_key),
        "another audience": signed_calls.token(WORKFLOW, "https://elsewhere.a.run.app"),
        "expired": signed_calls.token(WORKFLOW, now=issued - 2 * identities.TOKEN_SECONDS),
        "unsigned": unsigned(),
        "not a token": "hello",
    }
    call = {"op": "plan", "run_id": "rtokens00001", "execution_id": "rtokens00001-exec"}
    for what, token in forged.items():
        for header in ("Authorization", "X-Serverless-Authorization"):
            response = stage.post("/", json=call, headers={header: f"Bearer {token}"})
            assert response.status_code == 401, (what, header, response.get_json())
            assert response.get_json()["error"]["tag"] == "unauthenticated"
    assert env["ledger"].get("rtokens00001").state == claimed, "nothing was planned"
    planned = stage.post("/", json=call, headers=bearer(WORKFLOW))
    assert planned.status_code == 200, planned.get_json()


def test_a_token_from_an_issuer_that_is_not_google_is_a_401(stage: Any, signed_calls: Any) -> None:
    from google.auth import crypt, jwt

    from rlpipe.local import identities

    key_id = next(iter(__import__("json").loads(identities.published_certs(signed_calls.key_path))))
    signer = crypt.RSASigner.from_string(signed_calls.key_path.read_bytes(), key_id=key_id)
    import time

    now = int(time.time())
    claims = {
        "iss": "https://evil.example.com",
        "aud": STAGE_URL,
        "email": WORKFLOW,
        "iat": now,
        "exp": now + 600,
    }
    token = jwt.encode(signer, claims).decode()
    response = stage.post(
        "/", json={"op": "plan", "run_id": "rabc"}, headers={"Authorization": f"Bearer {token}"}
    )
    assert response.status_code == 401 and "issuer" in response.get_json()["error"]["message"]
