"""HTTP mapping of the ``stage`` operations: failure class → status code the workflow can act on.

Transient problems answer 503 so the workflow's ``http.default_retry`` repeats the same call;
malformed calls 400; anything permanent 422, which the workflow turns into a failed run.
"""

from __future__ import annotations

from typing import Any

from rlpipe.control import services
from rlpipe.control.client_errors import classify_exception
from rlpipe.control.ledger import ConcurrentUpdate, IllegalTransition
from rlpipe.control.logs import Logger
from rlpipe.core.failures import FailureClass, PipelineFailure

_CODES = {FailureClass.TRANSIENT: 503, FailureClass.PERMANENT: 422}


def handle(body: Any, log: Logger) -> tuple[dict[str, Any], int]:
    from rlpipe.control.stage import BadCall

    if not isinstance(body, dict):
        return {"error": {"tag": "permanent", "message": "expected a JSON object body"}}, 400
    log = log.bind(
        run_id=body.get("run_id"), stage=body.get("stage"), attempt=body.get("attempt"), op=body.get("op")
    )
    try:
        return services.stage_service(log).handle(body), 200
    except BadCall as exc:
        log.error("bad call", error=exc.reason)
        return {"error": {"tag": "permanent", "message": exc.reason}}, 400
    except PipelineFailure as exc:
        log.warning("operation failed", error=exc.as_error())
        return {"error": exc.as_error()}, _CODES.get(exc.failure_class, 409)
    except ConcurrentUpdate as exc:
        return {"error": {"tag": "transient", "message": str(exc)}}, 503
    except IllegalTransition as exc:
        return {"error": {"tag": "permanent", "message": str(exc)}}, 409
    except Exception as exc:
        failure = classify_exception(exc)
        if failure is None:
            raise
        log.warning("operation failed", error=failure.as_error())
        return {"error": failure.as_error()}, _CODES.get(failure.failure_class, 409)
