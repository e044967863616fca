"""HTTP mapping of the ``stage`` operations: body → call, failure class → status code.

Transient problems answer 503 so the workflow's ``http.default_retry`` repeats the same call;
malformed calls 400; anything permanent 422, which the workflow turns into a failed run. A caller
that is not the run's execution gets 409 with the tag ``not_owner`` (or ``superseded`` for an
attempt older than the run's latest): the workflow then stops without cleaning up or finishing a
run that another execution drives. Storage errors are 503, never 500: a 500 is not retried.

Who may call what is decided first, before the body's fields are read (control/adapters/identities.py):
plan, launch, status, gate, select, finish and cleanup are the workflow's own and are accepted
from the workflow's identity only; cancel, retry and promote are an operator's, accepted from any
caller IAM let in and recorded with that caller; on a deployment with teams (core.teams), only
from an operator of the run's team. Any other identity is answered 403 (``forbidden``) and the
refusal is logged with the caller's identity, never its token.

The workflow (``workflows/pipeline.yaml``) sends ``execution_id`` with every operation; plan,
launch and status refuse a call without one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rlpipe.control import services
from rlpipe.control.adapters import blobstore, identities
from rlpipe.control.adapters.client_errors import classify_exception
from rlpipe.control.adapters.logs import Logger
from rlpipe.control.lifecycle.ledger import ConcurrentUpdate
from rlpipe.core import identity, operator_contract
from rlpipe.core import workflow_contract as contract
from rlpipe.core.failures import FailureClass, PipelineFailure
from rlpipe.core.identity import STAGES
from rlpipe.core.runs.ownership import NotOwner, SupersededAttempt
from rlpipe.core.runs.record import IllegalTransition

if TYPE_CHECKING:
    from rlpipe.control.stage.service import StageService

_CODES = {FailureClass.TRANSIENT: 503, FailureClass.PERMANENT: 422}
_STORE_ERRORS = (blobstore.PreconditionFailed, blobstore.NotFound, blobstore.TooLarge)


FORBIDDEN = "forbidden"  # the error tag of a 403: this caller may not call this operation


class BadCall(PipelineFailure):
    """The workflow sent a malformed call: a bug, never retried."""


class NotTheTeamsOperator(Exception):
    """The caller is not an operator of the run's team (control.operator_ops.operator_refusal): 403."""


_UNKNOWN_OP = (
    "op {op} is not an operation; send one of plan, launch, status, gate, select, finish, cleanup "
    "(the workflow's), cancel, retry, promote (an operator's), as a string"
)


def _shown(value: Any) -> str:
    """A caller's value in an answer: a short string as written, anything else by its type only
    (never echoed: it could be long, or hold what the caller should not see again in a log)."""
    if isinstance(value, str) and len(value) <= 32 and value.isprintable():
        return repr(value)
    return f"(a {type(value).__name__})"


def handle(body: Any, log: Logger, *, caller: str | None = None) -> tuple[dict[str, Any], int]:
    """``caller``: the identity Google verified on the call (control/adapters/callers.py), None locally."""
    if not isinstance(body, dict):
        return {"error": {"tag": "permanent", "message": "expected a JSON object body"}}, 400
    # Only a well-formed run id is logged or used; anything else is refused without echoing it.
    run_id = body.get("run_id")
    op = body.get("op")
    log = log.bind(
        run_id=run_id if identity.is_run_id(run_id) else "(malformed)",
        stage=body.get("stage") if body.get("stage") in STAGES else None,
        op=op if isinstance(op, str) and len(op) <= 32 else None,
    )
    if not isinstance(op, str) or op not in identities.WORKFLOW_OPS | identities.OPERATOR_OPS:
        return {"error": {"tag": "permanent", "message": _UNKNOWN_OP.format(op=_shown(op))}}, 400
    refusal = identities.caller_policy(local=services.settings().local).refusal(op, caller)
    if refusal is not None:
        log.warning("caller refused", caller=caller or "(no verified caller)", reason=refusal)
        return {"error": {"tag": FORBIDDEN, "message": refusal}}, 403
    try:
        if isinstance(op, str) and op in identities.OPERATOR_OPS:  # an operator's: control/operator_ops.py
            return operator_contract.answer(op, body, operate(op, body, log, caller)), 200
        return dispatch(services.stage_service(log), body), 200
    except NotTheTeamsOperator as exc:
        log.warning("caller refused", caller=caller or "(no verified caller)", reason=str(exc))
        return {"error": {"tag": FORBIDDEN, "message": str(exc)}}, 403
    except BadCall as exc:
        log.error("bad call", error=exc.reason)
        return {"error": {"tag": "permanent", "message": exc.reason}}, 400
    except (NotOwner, SupersededAttempt) as exc:
        log.warning("caller refused", error=exc.as_error())
        return {"error": exc.as_error()}, 409
    except PipelineFailure as exc:
        log.warning("operation failed", error=exc.as_error())
        return {"error": exc.as_error()}, _CODES.get(exc.failure_class, 409)
    except (ConcurrentUpdate, *_STORE_ERRORS) as exc:
        log.warning("storage contention", error=str(exc))
        return {"error": {"tag": "transient", "message": f"{type(exc).__name__}: {exc}"}}, 503
    except IllegalTransition as exc:
        return {"error": {"tag": "permanent", "message": str(exc)}}, 409
    except Exception as exc:
        failure = classify_exception(exc)
        if failure is None:
            raise
        log.warning("operation failed", error=failure.as_error())
        return {"error": failure.as_error()}, _CODES.get(failure.failure_class, 409)


def dispatch(service: StageService, body: dict[str, Any]) -> dict[str, Any]:
    """Read the body as its operation's call (core.workflow_contract), call the operation, and
    hold its answer to the contract the workflow reads it by."""
    op = body.get("op")
    run_id = body.get("run_id")
    if not identity.is_run_id(run_id):
        raise BadCall("run_id is missing or not a run id (lowercase letters, digits and -)")
    if not isinstance(op, str) or op not in contract.WORKFLOW_OPERATIONS:
        raise BadCall(_UNKNOWN_OP.format(op=_shown(op)))
    try:
        call = contract.read_call(op, body)
    except contract.BadCallBody as exc:
        raise BadCall(f"{op}: {exc}") from None
    execution_id = call.execution_id or None
    if op in ("plan", "launch", "status", "gate", "select") and execution_id is None:
        raise BadCall(f"{op} needs the calling execution's execution_id")
    return contract.answer(op, _call(service, call, run_id, execution_id))


def _call(
    service: StageService, call: contract.WorkflowCall, run_id: str, execution_id: str | None
) -> dict[str, Any]:
    if isinstance(call, contract.PlanCall):
        return service.plan(run_id, execution_id)
    if isinstance(call, contract.LaunchCall):
        return service.launch(run_id, call.stage, call.attempt, call.callback_url or None, execution_id)
    if isinstance(call, contract.StatusCall):
        return service.status(run_id, call.stage, call.attempt, execution_id)
    if isinstance(call, contract.FinishCall):
        failure = call.failure.model_dump(exclude_unset=True) if call.failure is not None else None
        return service.finish(run_id, call.outcome, failure, execution_id)
    if isinstance(call, contract.CleanupCall):
        return service.cleanup(run_id, execution_id)
    if isinstance(call, contract.GateCall):
        return service.gate(run_id, execution_id)
    assert isinstance(call, contract.SelectCall)
    return service.select(run_id, execution_id)


def operate(op: str, body: dict[str, Any], log: Logger, caller: str | None) -> dict[str, Any]:
    """An operator's operation: its order read from the body (a malformed one is a bad call), then
    the operation with the verified caller. Promote and retry need no cluster, only the ledger
    and intake's start; cancel deletes the run's workloads and finishes it, through the stage
    service. The check of the caller reads the ledger and policies the operation then uses (the
    stage service's for cancel), so both read the same run."""
    from rlpipe.control import operator_ops

    try:
        service = services.stage_service(log) if op == "cancel" else None
        ledger = service.ledger if service is not None else services.ledger()
        policies = service.policies if service is not None else services.policies(log)
        run_id = body.get("run_id")  # a malformed one is refused by the operation's own reading
        refusal = (
            operator_ops.operator_refusal(policies, ledger, run_id, caller)
            if identity.is_run_id(run_id)
            else None
        )
        if refusal is not None:
            raise NotTheTeamsOperator(refusal)
        if op == "cancel" and body.get("check_only") is True:
            # The CLI asks first, before it cancels the run's Workflows executions with the
            # operator's own credentials: IAM lets any operator cancel any execution of the one
            # workflow, so whose run it is must be decided here, before anything is touched.
            return {"run_id": operator_ops.run_id_of(body), "allowed": True}
        if service is not None:
            return operator_ops.cancel(service, operator_ops.cancel_order(body), caller)
        if op == "retry":
            order = operator_ops.retry_order(body)
            return operator_ops.retry_run(
                ledger,
                policies,
                services.intake(log).start_claimed,
                order,
                caller,
                log,
            )
        promoted = operator_ops.promote_order(body)
        return operator_ops.promote(
            ledger,
            policies,
            services.intake(log).start_claimed,
            promoted,
            caller,
            log,
        )
    except operator_ops.BadOrder as exc:
        raise BadCall(str(exc)) from None
