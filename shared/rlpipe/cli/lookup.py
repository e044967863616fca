"""What an id a user typed names: a run, or a delivery (``rlpipe submit`` prints its id when it
cannot say more) that intake rejected or sent to a run; and the answer for an id nothing names,
which for a shape no delivery makes is given at once (a typo is not waited for)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from rlpipe.cli.exit_codes import CliError, ExitCode
from rlpipe.core import identity

T = TypeVar("T")

if TYPE_CHECKING:  # the records' module loads the storage client: only once a ledger is read
    from rlpipe.control.lifecycle.ledger import Ledger
    from rlpipe.core.runs.record import RunRecord


@dataclass(frozen=True)
class Found:
    """What the ledger holds under an id a user typed: a run, or a delivery's record: its
    rejection, or which run it went to (``went_to``, with that run's record)."""

    record: RunRecord | None = None
    rejection: dict[str, Any] | None = None
    went_to: dict[str, Any] | None = None


def find(ledger: Ledger, given: str) -> Found:
    """A run id, or a delivery id (``rlpipe submit`` prints it) that names a rejection or a run."""
    record = ledger.get(given)
    if record is not None:
        return Found(record)
    rejection = ledger.rejection(given)
    if rejection is not None:
        return Found(rejection=rejection)
    went_to = ledger.delivery(given)
    if went_to is not None:
        return Found(ledger.get(str(went_to.get("run_id"))), went_to=went_to)
    return Found()


def poll(read: Callable[[], T], done: Callable[[T], bool], *, timeout: float, interval: float = 0.5) -> T:
    """``read()`` until ``done`` says its answer is final or ``timeout`` seconds have passed; the
    last answer either way (the records a command waits for are written by another process)."""
    deadline = time.monotonic() + timeout
    while True:
        answer = read()
        if done(answer) or time.monotonic() >= deadline:
            return answer
        time.sleep(interval)


def await_found(ledger: Ledger, given: str, *, timeout: float) -> Found:
    """:func:`find`, waiting up to ``timeout`` for a run just submitted to be accepted; an id no
    delivery could make is answered at once."""
    return poll(
        lambda: find(ledger, given),
        lambda found: (
            found.record is not None or found.rejection is not None or not identity.could_be_produced(given)
        ),
        timeout=timeout,
    )


def not_found(given: str) -> CliError:
    """The answer for an id the ledger does not have: a shape no delivery makes is a typo."""
    if not identity.could_be_produced(given):
        return CliError(
            ExitCode.NOT_FOUND,
            f"{given!r} is not an id rlpipe makes (r followed by 11 of a-z and 2-7); `rlpipe list` shows the runs",
        )
    return CliError(ExitCode.NOT_FOUND, f"no run {given}; `rlpipe list` shows the runs")
