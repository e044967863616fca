"""The stage function's answer to an operator's cancel, in its real shape (core.operator_contract),
for tests that play the stage function: a fake that answers less than the real one would let the
CLI read a field the real answer lacks."""

from __future__ import annotations

from typing import Any

from rlpipe.core.operator_contract import CancelAnswer


def cancelled(
    run_id: str, *, deleted: list[str] | None = None, cleanup_error: str | None = None
) -> CancelAnswer:
    """A run's status message once cancelled by an operator, with what cleanup deleted."""
    fields: dict[str, Any] = {
        "run_id": run_id,
        "state": "cancelled",
        "team": "default",
        "message": f"run {run_id} cancelled",
        "failure": {"tag": "cancelled", "message": "cancelled by rlpipe cancel"},
        "attempts": {},
        "lineage": {},
        "request_id": None,
        "model": None,
        "hf_repo": None,
        "results": {},
        "gate": None,
        "chip_hours": 0.0,
        "sweep": None,
        "deleted": deleted or [],
    }
    if cleanup_error is not None:
        fields["cleanup_error"] = cleanup_error
    return CancelAnswer.model_validate(fields)
