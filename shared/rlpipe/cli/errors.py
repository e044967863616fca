"""How ``rlpipe`` answers a mistake: one plain line that names the fix, or with ``--json`` one JSON
object on stdout, and an exit code from the table (``exit_codes.py``, docs/cli.md). Never a
traceback: a person reads the line, a script branches on the code.

Kept in one place, at the top of ``main``, because the same few library exceptions (a missing file,
no credentials, a server that does not answer) can come out of every command; translating them at
each call site would miss the next command added.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any

from rlpipe.cli.exit_codes import CliError, ExitCode

DEBUG_ENV = "RLPIPE_DEBUG"  # set to 1: an unexpected error also prints its traceback
# What a shell reports for a process that wrote to a closed pipe and was killed by SIGPIPE
# (128 + 13): ``rlpipe status RUN | head`` ends as ``yes | head`` does, quietly.
BROKEN_PIPE = 141


def _no_stack_hint(cwd: Path) -> str:
    return (
        f"no local stack here (no .rlpipe/local/state.json in {cwd} or a folder above it) and no Google "
        "Cloud credentials: run `rlpipe local up` (or run this where you ran it), or set "
        "RLPIPE_TARGET=gcp with the deployment's RLPIPE_* settings and "
        "`gcloud auth application-default login` (docs/deploy.md)"
    )


def explain(exc: BaseException, command: str) -> CliError:
    """The answer to ``exc``: a known condition named with its fix, else an internal error."""
    if isinstance(exc, CliError):
        return exc
    from rlpipe.core.problems import RequestInvalid

    if isinstance(exc, RequestInvalid):
        return CliError(ExitCode.INVALID_INPUT, exc.render())
    if isinstance(exc, OSError) and exc.filename is not None:  # a path given that cannot be read or written
        return CliError(ExitCode.INVALID_INPUT, f"{exc.filename}: {exc.strerror}; check the path")
    if _is_no_credentials(exc):
        return CliError(ExitCode.USAGE, _no_stack_hint(Path.cwd()))
    unreachable = _unreachable(exc)
    if unreachable is not None:
        return CliError(ExitCode.TRANSIENT, unreachable)
    return CliError(
        ExitCode.INTERNAL_ERROR,
        f"unexpected error ({type(exc).__name__}: {str(exc)[:300]}); this is a bug in rlpipe: "
        f"run again with {DEBUG_ENV}=1 for the traceback to report",
    )


def _is_no_credentials(exc: BaseException) -> bool:
    try:
        from google.auth.exceptions import DefaultCredentialsError
    except ImportError:  # pragma: no cover - google-auth is a dependency of the CLI
        return False
    return isinstance(exc, DefaultCredentialsError)


def _unreachable(exc: BaseException) -> str | None:
    """A server that did not answer (the local stack stopped, a network error): worth trying again."""
    import requests

    target = "the local stack" if os.environ.get("RLPIPE_LOCAL") else "the deployment"
    if isinstance(exc, requests.ConnectionError | requests.Timeout):
        return (
            f"{target} did not answer ({type(exc).__name__}); check it is up "
            "(`rlpipe local status` for the local stack) and try again"
        )
    try:
        from google.api_core import exceptions as gexc
    except ImportError:  # pragma: no cover
        return None
    if isinstance(exc, gexc.ServiceUnavailable | gexc.DeadlineExceeded | gexc.RetryError):
        return f"{target} did not answer ({type(exc).__name__}: {str(exc)[:200]}); try again"
    return None


def answer(exc: BaseException, command: str, *, as_json: bool) -> int:
    """Print the answer to ``exc`` and return its exit code."""
    error = explain(exc, command)
    if error.code == ExitCode.INTERNAL_ERROR and os.environ.get(DEBUG_ENV):
        traceback.print_exception(exc, file=sys.stderr)
    if as_json:
        print(json.dumps(error_object(error)), flush=True)
    else:
        print(f"rlpipe {command}: {error.message}", file=sys.stderr, flush=True)
    return int(error.code)


def error_object(error: CliError) -> dict[str, Any]:
    """What ``--json`` prints for an error (docs/cli.md, "Errors")."""
    return {"error": {"code": int(error.code), "name": error.code.name, "message": error.message}}


def quiet_broken_pipe() -> int:
    """stdout was closed under us (``| head``): point it at /dev/null so the interpreter's final
    flush does not raise again, and end as a process killed by SIGPIPE does."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout has no descriptor (tests capture it): nothing to flush
        pass
    return BROKEN_PIPE
