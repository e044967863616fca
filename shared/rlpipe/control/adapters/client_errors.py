"""Client-library errors (GCS, Google APIs, HTTP) mapped onto the failure taxonomy.

Why here and not in ``core.failures``: the taxonomy is pure, but recognising a library's exception
means importing that library, which only the control plane may do.
"""

from __future__ import annotations

import sys

from rlpipe.core.failures import PermanentFailure, PipelineFailure, TransientFailure
from rlpipe.core.http_answers import HttpMeaning, meaning_of_answer


def classify_exception(exc: BaseException) -> PipelineFailure | None:
    """Map client-library errors (GCS, HTTP) to the taxonomy; None when it is not ours to classify."""
    if isinstance(exc, PipelineFailure):
        return exc
    try:
        from google.api_core import exceptions as gexc
    except ImportError:  # pragma: no cover - google-api-core is a dependency
        gexc = None  # type: ignore[assignment]
    if gexc is not None:
        if isinstance(exc, gexc.RetryError):  # the client's own retries ran out
            return TransientFailure(f"Google API: {exc}")
        code = exc.code if isinstance(exc, gexc.GoogleAPICallError) else None
        meaning = meaning_of_answer(code if isinstance(code, int) else None)  # core.http_answers
        if meaning is HttpMeaning.TRANSIENT:
            return TransientFailure(f"Google API: {exc}")
        if meaning is HttpMeaning.NO_ACCESS:
            return PermanentFailure(f"permission denied: {exc}")
    import requests

    if isinstance(exc, (requests.ConnectionError, requests.Timeout, ConnectionError, TimeoutError)):
        return TransientFailure(f"connection failed: {exc}")
    # The Hugging Face client's HTTP library (httpx2 in huggingface_hub 2.4.0) has its own
    # connection and timeout errors, which are not OSError. Only a process that imported the
    # client can raise them, so a process that never did pays no import here.
    if "huggingface_hub" in sys.modules:
        from rlpipe.control.adapters.hub_client import transport_errors

        if isinstance(exc, transport_errors()):
            return TransientFailure(f"could not reach Hugging Face: {type(exc).__name__}: {exc}")
    return None
