"""One table turns an HTTP error status into what it means (core.http_answers), and every client
that classifies errors reads it: the stage function's Google API errors, the Hub look-ups at plan,
the upstream watcher and the publisher (which is shipped without rlpipe, so it keeps its own words
and this test holds them to the table). They once disagreed on 429."""

from __future__ import annotations

import pytest
from google.api_core import exceptions as gexc
from huggingface_hub.errors import HfHubHTTPError
from huggingface_hub.utils import httpx

from rlpipe.control.adapters.client_errors import classify_exception
from rlpipe.control.adapters.hub_client import classified_errors
from rlpipe.core.failures import PermanentFailure, TransientFailure
from rlpipe.core.http_answers import HttpMeaning, is_transient, meaning_of
from rlpipe.publisher import program
from rlpipe.upstream import hub_calls

ERRORS = range(400, 600)


@pytest.mark.parametrize(
    ("status", "meaning"),
    [
        # RFC 9110: the client may repeat the request (408, 429 with Retry-After, 503) ...
        (408, HttpMeaning.TRANSIENT),
        (429, HttpMeaning.TRANSIENT),
        (500, HttpMeaning.TRANSIENT),
        (503, HttpMeaning.TRANSIENT),
        # ... a write that lost a race to another (a moved Hub branch, a GCS generation) ...
        (409, HttpMeaning.TRANSIENT),
        (412, HttpMeaning.TRANSIENT),
        # ... the credentials or grants must change ...
        (401, HttpMeaning.NO_ACCESS),
        (403, HttpMeaning.NO_ACCESS),
        # ... nothing by that name for this caller ...
        (404, HttpMeaning.NOT_FOUND),
        (410, HttpMeaning.NOT_FOUND),
        # ... and the request itself is wrong: it fails again as written.
        (400, HttpMeaning.REFUSED),
        (413, HttpMeaning.REFUSED),
        (422, HttpMeaning.REFUSED),
    ],
)
def test_each_status_means_what_the_http_rules_say(status: int, meaning: HttpMeaning) -> None:
    assert meaning_of(status) is meaning


def test_a_status_that_is_not_an_error_is_not_classified() -> None:
    for status in (200, 304, 399, 600):
        with pytest.raises(ValueError, match=str(status)):
            meaning_of(status)
    assert not is_transient(None) and not is_transient(200)


def _hub_error(status: int) -> HfHubHTTPError:
    answer = httpx.Response(status, request=httpx.Request("GET", "https://hub.example/api/models/org/m"))
    return HfHubHTTPError(f"{status} from the Hub", response=answer)


def test_the_hub_look_ups_at_plan_read_the_table() -> None:
    for status in ERRORS:
        with (
            pytest.raises((TransientFailure, PermanentFailure)) as caught,
            classified_errors("org/m", "main", 5.0),
        ):
            raise _hub_error(status)
        assert isinstance(caught.value, TransientFailure) == is_transient(status), status


def test_the_upstream_watcher_reads_the_table_a_429_without_a_reset_is_a_pause() -> None:
    for status in ERRORS:
        problem = hub_calls.classify(_hub_error(status), "org/m")
        assert isinstance(problem, hub_calls.Unavailable) == is_transient(status), (status, problem)
    assert isinstance(hub_calls.classify(_hub_error(429), "org/m"), hub_calls.Unavailable)


def test_the_stage_functions_google_api_errors_read_the_table() -> None:
    for status in ERRORS:
        failure = classify_exception(gexc.from_http_status(status, f"GCS answered {status}"))
        assert isinstance(failure, TransientFailure) == is_transient(status), status
        no_access = meaning_of(status) is HttpMeaning.NO_ACCESS
        assert isinstance(failure, PermanentFailure) == no_access, status


def test_the_shipped_publisher_keeps_its_own_words_for_the_same_table() -> None:
    for status in ERRORS:
        kind, _ = program.classify(_hub_error(status))
        assert (kind == "transient") == is_transient(status), status
        assert (kind == "permanent") == (meaning_of(status) is HttpMeaning.NO_ACCESS), status
