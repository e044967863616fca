"""The exit codes of ``rlpipe``: one table, the same for every command (docs/cli.md).

A script branches on the code, not on the text: ``3`` means the run is not there, ``4`` that it is
there but its state does not allow what was asked, ``75`` that asking again later may work.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """What an ``rlpipe`` command's exit status means."""

    OK = 0
    """Success: the command did what was asked (``watch``: the run succeeded)."""

    INVALID_INPUT = 1
    """Invalid input: a request file, watch list or argument value was refused (validation
    problems are printed on stderr, each naming its field)."""

    USAGE = 2
    """The command line itself is wrong (argparse's own exit: an unknown option, a missing
    argument), or a deployment setting is invalid (``plan``: ``RLPIPE_PRICES`` or a quota file;
    any command: no stage function URL set)."""

    NOT_FOUND = 3
    """No such run: the ledger has no record of the run id given."""

    REFUSED_BY_STATE = 4
    """The run exists but its state does not allow the operation (retry of a running or succeeded
    run, promote of a run that is not gated, cancel of a finished run)."""

    RUN_FAILED = 5
    """``watch``: the run ended ``failed`` or ``cancelled``."""

    RUN_GATED = 6
    """``watch``: the run ended ``gated`` (the quality gate held the model back; ``promote``
    ships it anyway)."""

    INTERNAL_ERROR = 70
    """An error rlpipe did not expect (EX_SOFTWARE): a bug. One line names it; ``RLPIPE_DEBUG=1``
    shows the traceback to report."""

    TRANSIENT = 75
    """Try again later (EX_TEMPFAIL): the stage function or the Hub did not answer, a reconcile
    repair failed (the next pass retries it), an upstream check entry errored, or ``watch`` timed
    out before the run ended."""


def for_ended(state: str) -> ExitCode:
    """The code ``watch`` exits with for a run that ended in ``state``."""
    if state in ("succeeded", "stopped"):  # stopped: its sweep's rule ended it, as the request asked
        return ExitCode.OK
    if state == "gated":
        return ExitCode.RUN_GATED
    if state in ("failed", "cancelled"):
        return ExitCode.RUN_FAILED
    return ExitCode.TRANSIENT  # not ended: watch timed out


class CliError(Exception):
    """A mistake or a condition the user can act on: ``message`` names it and the fix, ``code`` is
    the exit status from the table above. ``rlpipe``'s ``main`` prints it (as a JSON object with
    ``--json``) instead of a traceback."""

    def __init__(self, code: ExitCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
