"""What ``tpu.provisioning`` implies for the rest of a request (docs/provisioning.md).

* Defaults that follow from the mode when the request leaves them unset: flex-start runs through
  the queue whose ClusterQueue has Kueue's ProvisioningRequest admission check; spot gets a
  checkpoint period that bounds the steps one reclaim can lose (``presets.SPOT_MAX_STEPS_AT_RISK``
  of the run, the rule ``rlpipe plan`` states).
* Problems: a reservation name only means something in reservation mode.
* Warnings (``warnings``): a preemptible mode with no checkpoint before the final step loses the
  whole run to one reclaim.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator
from typing import Any

from rlpipe.core import presets, steps
from rlpipe.core.problems import Problem

PREEMPTIBLE = frozenset({"spot"})


def _effective(doc: dict[str, Any], period: int | None) -> steps.TrainingSteps | None:
    try:
        found = steps.document_steps(doc)
    except steps.ConfigProblem:
        return None  # reported by the training-steps check
    if found is None or not isinstance(period, int) or isinstance(period, bool) or period < 1:
        return found
    return dataclasses.replace(found, checkpoint_period=period)


def spot_checkpoint_period(final_step: int) -> int:
    """The largest period that keeps one reclaim's loss within ``SPOT_MAX_STEPS_AT_RISK`` of the run."""
    return max(1, math.floor(final_step * presets.SPOT_MAX_STEPS_AT_RISK))


def apply_defaults(merged: dict[str, Any], doc: dict[str, Any]) -> None:
    """Fill the mode's defaults into ``merged`` where the request itself (``doc``) set nothing."""
    tpu, asked = merged.get("tpu"), doc.get("tpu")
    asked = asked if isinstance(asked, dict) else {}
    if not isinstance(tpu, dict):
        return
    mode = tpu.get("provisioning")
    if mode == "flex-start" and "queue" not in asked:
        tpu["queue"] = presets.FLEX_START_QUEUE
    training, asked_training = merged.get("training"), doc.get("training")
    asked_training = asked_training if isinstance(asked_training, dict) else {}
    if mode == "spot" and isinstance(training, dict) and "checkpoint_period" not in asked_training:
        effective = _effective(merged, None)
        if effective is not None:
            training["checkpoint_period"] = spot_checkpoint_period(effective.final_step)


def problems(doc: dict[str, Any]) -> Iterator[Problem]:
    tpu = doc.get("tpu")
    if not isinstance(tpu, dict):
        return
    mode = tpu.get("provisioning")
    if tpu.get("reservation") and mode != "reservation":
        yield Problem(
            "tpu.reservation",
            f"a reservation is named but tpu.provisioning is {mode!r}, which does not use it",
            "remove tpu.reservation, or set tpu.provisioning: reservation",
        )


def steps_at_risk(doc: dict[str, Any]) -> int | None:
    """Steps one preemption can lose: from the last committed checkpoint to the next one (at most
    the period; the whole run when nothing is committed before the final step)."""
    period = (doc.get("training") or {}).get("checkpoint_period")
    effective = _effective(doc, period if isinstance(period, int) and not isinstance(period, bool) else None)
    if effective is None:
        return None
    # A checkpoint is committed before the final step exactly when the first multiple of the
    # period comes before it (counted, not listed: the schedule can be long).
    committed_before_final = effective.checkpoint_period < effective.final_step
    return effective.checkpoint_period if committed_before_final else effective.final_step


def warnings(doc: dict[str, Any]) -> list[str]:
    tpu = doc.get("tpu") or {}
    mode = tpu.get("provisioning")
    found: list[str] = []
    if mode == "flex-start" and tpu.get("queue") != presets.FLEX_START_QUEUE:
        found.append(
            f"tpu.provisioning flex-start with tpu.queue {tpu.get('queue')!r}: that queue's ClusterQueue must "
            "have the ProvisioningRequest admission check (infra/cluster/k8s/flex-start), or the slice "
            f"is never provisioned; the default is {presets.FLEX_START_QUEUE!r}"
        )
    at_risk = steps_at_risk(doc)
    effective = _effective(doc, (doc.get("training") or {}).get("checkpoint_period"))
    if mode in PREEMPTIBLE and effective is not None and at_risk == effective.final_step:
        found.append(
            f"tpu.provisioning {mode} is preemptible, but no checkpoint is committed before the final step "
            f"{effective.final_step}: one reclaim restarts training from step 0; lower "
            "training.checkpoint_period"
        )
    return found
