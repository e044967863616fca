"""Cloud Functions entry points: parse the event, call the library, return. Nothing else lives here."""

from __future__ import annotations

from typing import Any

import functions_framework

# Only what every entry point needs is imported here: every deployed function loads this whole
# module on each cold start. `rlpipe.control.services` (the ledger's pydantic models, ~150 ms; bench/
# RESULTS.md §2) is imported by the entries that use it, so `artifact_event`, the function that
# scales out during a checkpoint write, starts without it.
from rlpipe.control.adapters import json_body  # every CloudEvent's body check reads with it (json only)
from rlpipe.control.adapters.events import BadEvent, match_artifact, message_event, object_event
from rlpipe.control.adapters.logs import Logger, configure_stdlib_logging

configure_stdlib_logging()

# The framework answers a POST that is not a CloudEvent with a 400 whose page repeats the request's
# headers and body: a token in either would be echoed back. Replace that page (registered on the
# app while the framework loads this module; plain imports, e.g. in tests, have no app).
if callable(getattr(functions_framework, "errorhandler", None)):

    @functions_framework.errorhandler(400)
    def _bad_request(error: Any) -> tuple[dict[str, str], int]:
        return {"error": "bad request: the body is not an event this function accepts"}, 400


def _refuse_a_body_that_is_no_event() -> tuple[dict[str, str], int] | None:
    """A structured body that is JSON but not an object (``[1]``, ``"x"``) is no CloudEvent; the
    framework then tries it as a legacy background event and fails with a TypeError, a 500 that
    Eventarc and Pub/Sub redeliver forever. Refuse it with a 400 first. Binary-mode events carry
    their attributes in ``ce-*`` headers, and their data may be any JSON: they pass, unless it is
    nested deeper than a parser recurses (``control.adapters.json_body``), which the event SDK would raise on."""
    import flask

    request = flask.request
    if request.method != "POST":
        return None
    try:
        body = json_body.loads(request.get_data(cache=True) or b"null")
    except json_body.NestedTooDeeply as exc:  # the event SDK's parser would raise, a 500
        return {"error": f"bad request: {exc}"}, 400
    except json_body.UnreadableJson:
        return None  # not JSON: the framework's own 400, or a binary event's data as text
    if request.headers.get("ce-specversion") or body is None or isinstance(body, dict):
        return None
    return {"error": "bad request: the body is not an event this function accepts"}, 400


# The entry points that take CloudEvents, whose body the check above reads. Only these: an HTTP
# function decides itself when (and whether) to read its body, and the public webhook reads none
# before the caller proved the secret (upstream/webhook.py).
CLOUD_EVENT_ENTRY_POINTS = frozenset(
    {"intake_object", "intake_message", "artifact_event", "upstream_poll", "reconcile"}
)


def _register_request_checks() -> None:
    import flask

    # Loaded by the framework, which builds the app (named after its target) around this module.
    if flask.has_app_context() and flask.current_app.name in CLOUD_EVENT_ENTRY_POINTS:
        flask.current_app.before_request(_refuse_a_body_that_is_no_event)


_register_request_checks()


def _attributes(cloud_event: Any) -> dict[str, Any]:
    return dict(cloud_event.get_attributes())


def _intake(cloud_event: Any, component: str, parse: Any, submit: str) -> None:
    """Parse the event (a wrong type or shape is logged and acknowledged), then hand it to intake."""
    log = Logger(component)
    try:
        event = parse(_attributes(cloud_event), cloud_event.data)
    except BadEvent as exc:
        log.warning(
            "event ignored", reason=str(exc), event_type=cloud_event["type"], event_id=cloud_event["id"]
        )
        return
    from rlpipe.control import services

    getattr(services.intake(log), submit)(event)


@functions_framework.cloud_event
def intake_object(cloud_event: Any) -> None:
    """A request file landed in the requests bucket (Eventarc: storage object finalized)."""
    _intake(cloud_event, "intake_object", object_event, "from_object")


@functions_framework.cloud_event
def intake_message(cloud_event: Any) -> None:
    """A request document arrived as a Pub/Sub message on the requests topic."""
    _intake(cloud_event, "intake_message", message_event, "from_message")


@functions_framework.cloud_event
def artifact_event(cloud_event: Any) -> None:
    """An object was written in the artifacts bucket; wake the run's workflow on a completion signal."""
    data = cloud_event.data
    name = data.get("name") if isinstance(data, dict) else None
    signal = match_artifact(name) if isinstance(name, str) else None
    if signal is None:
        return  # the hot path: thousands of checkpoint objects, no I/O at all
    from rlpipe.control.completion_signals import wake

    wake(signal, name, Logger("artifact_event"))


@functions_framework.http
def stage(request: Any) -> tuple[dict[str, Any], int]:
    """The workflow's door into the pipeline (plan, launch, status, gate, select, finish, cleanup)
    and the operators' (cancel, retry, promote); which identity may call which: control/adapters/identities.py."""
    from rlpipe.control import services
    from rlpipe.control.adapters.callers import CertsUnavailable, TokenRefused, caller_of
    from rlpipe.control.stage_http import handle

    log = Logger("stage")
    try:
        caller = caller_of(request.headers, services.token_check())
    except TokenRefused as exc:
        log.warning("caller refused", reason=str(exc))
        return {"error": {"tag": "unauthenticated", "message": str(exc)}}, 401
    except CertsUnavailable as exc:
        log.warning("caller not verified", reason=str(exc))
        return {"error": {"tag": "transient", "message": str(exc)}}, 503
    try:
        body = json_body.loads(request.get_data() or b"null")
    except json_body.UnreadableJson as exc:
        return {"error": {"tag": "permanent", "message": str(exc)}}, 400
    return handle(body, log, caller=caller)


@functions_framework.cloud_event
def upstream_poll(cloud_event: Any) -> None:
    """Cloud Scheduler tick (via Pub/Sub): poll every watched Hugging Face repo once."""
    from rlpipe.upstream.service import on_tick

    on_tick(cloud_event.data, Logger("upstream_poll"))


@functions_framework.http
def upstream_webhook(request: Any) -> Any:
    """Hugging Face webhook: verify the secret, then poll just the pushed repo and branch.

    The body goes in unread (``request.stream``: the server's bounded WSGI input, a chunked one
    included): the handler checks the secret and the declared size before it reads a byte, and
    reads at most its cap after. The answer is a streamed response because functions-framework
    reads the whole request body after an HTTP function returns (``read_request``, its
    ``after_request`` hook) unless the response is streamed: a plain answer would have the
    framework read what the handler refused to, an endless chunked body without end."""
    import json

    import flask

    from rlpipe.upstream.service import on_webhook

    status, body = on_webhook(dict(request.headers), request.stream, Logger("upstream_webhook"))
    data = json.dumps(body).encode()
    return flask.Response(
        iter([data]), status=status, mimetype="application/json", headers={"Content-Length": str(len(data))}
    )


@functions_framework.cloud_event
def reconcile(cloud_event: Any) -> None:
    """Cloud Scheduler tick (via Pub/Sub, every 5 minutes): one reconcile pass."""
    from rlpipe.reconcile.runner import on_tick

    on_tick(cloud_event.data, Logger("reconcile"))
