"""Which verified caller may call which ``stage`` operation: the workflow's, or an operator's.

Why: IAM (``roles/run.invoker``) lets several identities reach the stage function: the
workflow's service account, the operators' one, and ``var.stage_invokers``. IAM cannot tell
operations apart, so without this check any of them could plan, launch, clean up or finish any
run (a ``finish`` with ``outcome: failed`` and an invented cause, from a person's own token).
So the operations the workflow drives a run with are accepted from **the workflow's identity**
only; the operators' own operations (cancel, retry, promote) from any caller IAM let in, who is
then recorded beside what the run became (control/adapters/callers.py says how the caller is read).

Which identity is the workflow's is a deployment setting, ``RLPIPE_WORKFLOW_IDENTITY`` (the
workflow's service account's e-mail; infra/terraform/functions.tf sets it). Locally there is no
Cloud Run: the stack plays the identities (rlpipe/local/identities.py) and names them the same way.

A call with NO verified caller: on Google Cloud it cannot reach the function (IAM rejects it
first), so one that does is refused, like a deployment that names no workflow identity. The one
exception is a local deployment that names none (``Settings.local`` and the setting unset: unit
tests calling the handler directly, a local stack older than the played identities): there no
identity is known at all, and every call is accepted as it was before identities were checked.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

WORKFLOW_IDENTITY_ENV = "RLPIPE_WORKFLOW_IDENTITY"
# The operations only the workflow makes (workflows/pipeline.yaml, call_stage).
WORKFLOW_OPS = frozenset({"plan", "launch", "status", "gate", "select", "finish", "cleanup"})
# The operations a person makes through the CLI (rlpipe cancel, retry, promote).
OPERATOR_OPS = frozenset({"cancel", "retry", "promote"})


def workflow_identity() -> str | None:
    """The workflow's identity this deployment names; None when it names none."""
    return os.environ.get(WORKFLOW_IDENTITY_ENV, "").strip() or None


@dataclass(frozen=True)
class CallerPolicy:
    """Who may call what, for one deployment: ``workflow`` is the workflow's identity (None: not
    named), ``local`` whether the deployment is the local stack or a test's emulators."""

    workflow: str | None
    local: bool

    @property
    def plays_no_identities(self) -> bool:
        """A local deployment that names no identity: no call carries one, every call is let in."""
        return self.local and self.workflow is None

    def refusal(self, op: object, caller: str | None) -> str | None:
        """Why ``caller`` may not call ``op`` (a sentence a person reads), or None when it may.

        An op that is neither list's is let through: the dispatcher refuses it as unknown (400),
        and it changes nothing."""
        if not isinstance(op, str) or (op not in WORKFLOW_OPS and op not in OPERATOR_OPS):
            return None
        if self.plays_no_identities:
            return None
        if self.workflow is None:
            return (
                f"this deployment names no workflow identity ({WORKFLOW_IDENTITY_ENV}), so no call "
                f"can be told to be the workflow's; set it to the workflow's service account"
            )
        if caller is None:
            return f"{op} needs a verified caller (an ID token Cloud Run checked) and this call has none"
        if op in OPERATOR_OPS or caller == self.workflow:
            return None
        return (
            f"{op} is the workflow's own operation and {caller} is not the workflow's identity; "
            "a person cancels, retries or promotes a run with rlpipe cancel, retry or promote"
        )


def caller_policy(*, local: bool) -> CallerPolicy:
    """This deployment's, from the environment (read on every call: the setting is one variable)."""
    return CallerPolicy(workflow=workflow_identity(), local=local)
