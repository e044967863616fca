"""What an HTTP answer's status means to the pipeline: one table, read by every client that turns
a Google API, GCS or Hugging Face error into a failure class.

Four places once decided this each on their own (the stage function's client errors, the Hub
look-ups at plan, the upstream watcher and the publisher), and disagreed on 429: the watcher read
a rate limit without a reset header as a refusal that needs a person, the others as a pause. The
rules, from RFC 9110 and the services' own documents:

* **again later** (``TRANSIENT``): 408 Request Timeout, 429 Too Many Requests, every 5xx, and the
  two answers of a write that lost a race to another writer, 409 Conflict (a Hub commit on a moved
  branch) and 412 Precondition Failed (a GCS generation precondition); asking again can succeed
  with nothing changed by a person;
* **no access** (``NO_ACCESS``): 401 and 403, the credentials or the grants must change;
* **not found** (``NOT_FOUND``): 404 and 410, the thing named does not exist for this caller;
* **refused** (``REFUSED``): every other 4xx, a request that will keep failing as it is written.

Each caller words its own failure from the meaning (the upstream watcher's ``Unavailable``, the
publisher's ``transient``, the stage function's ``TransientFailure``), so the sentence a user reads
stays the caller's and the class is the table's.
"""

from __future__ import annotations

from enum import StrEnum


class HttpMeaning(StrEnum):
    TRANSIENT = "transient"
    NO_ACCESS = "no-access"
    NOT_FOUND = "not-found"
    REFUSED = "refused"


RACED_WRITES = frozenset({409, 412})


def meaning_of(status: int) -> HttpMeaning:
    """The meaning of an HTTP error status (400-599); a status below 400 is not an error and
    raises ValueError, since no caller should be asking."""
    if not 400 <= status <= 599:
        raise ValueError(f"HTTP {status} is not an error status")
    if status in (408, 429) or status >= 500 or status in RACED_WRITES:
        return HttpMeaning.TRANSIENT
    if status in (401, 403):
        return HttpMeaning.NO_ACCESS
    if status in (404, 410):
        return HttpMeaning.NOT_FOUND
    return HttpMeaning.REFUSED


def meaning_of_answer(status: int | None) -> HttpMeaning | None:
    """The meaning of whatever status an error carried: None when it carried none, or one that is
    not an HTTP error (a client library's own code)."""
    return meaning_of(status) if status is not None and 400 <= status <= 599 else None


def is_transient(status: int | None) -> bool:
    """Whether an answer with this status is worth asking again unchanged (None: no answer)."""
    return meaning_of_answer(status) is HttpMeaning.TRANSIENT
