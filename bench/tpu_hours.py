"""1. TPU chips held outside training, per preset, from the rendered manifests.

Nothing runs: the figure is computed from what ``rlpipe.core.manifests.render`` would submit, which is
exactly what the cluster would schedule. Chips held by a workload = Σ over its pod templates of
``google.com/tpu`` (limits, else requests; init containers included) × the number of pods, where
pods = ``parallelism`` for a Job (default 1) and replicas × parallelism per replicated Job for a
JobSet. The baseline is the tutorials' placement (``tpu-slice``: an Indexed Job across every host
of the slice, only index 0 working); it is computed the same way from the same renderer.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from bench.common import Section, table

TPU = "google.com/tpu"
STAGES_OUTSIDE_TRAINING = ("convert", "export")


def _chips_per_pod(pod_spec: dict[str, Any]) -> int:
    total = 0
    for container in [*(pod_spec.get("initContainers") or []), *(pod_spec.get("containers") or [])]:
        resources = container.get("resources") or {}
        value = (resources.get("limits") or {}).get(TPU, (resources.get("requests") or {}).get(TPU, 0))
        total += int(value)
    return total


def chips_held(obj: dict[str, Any]) -> tuple[int, int]:
    """(pods, chips) a rendered Job or JobSet holds while it runs."""
    if obj["kind"] == "Job":
        spec = obj["spec"]
        pods = int(spec.get("parallelism", 1))
        return pods, pods * _chips_per_pod(spec["template"]["spec"])
    pods = chips = 0
    for rjob in obj["spec"]["replicatedJobs"]:
        spec = rjob["template"]["spec"]
        n = int(rjob.get("replicas", 1)) * int(spec.get("parallelism", 1))
        pods += n
        chips += n * _chips_per_pod(spec["template"]["spec"])
    return pods, chips


def measure(presets: list[str], hours: dict[str, float]) -> list[dict[str, Any]]:
    from rlpipe.core import manifests
    from rlpipe.core.request import validate_request

    rows = []
    for preset in presets:
        ctx = manifests.RenderContext(run_id="rbenchtpuhrs", bucket="bench-artifacts")
        by_placement: dict[str, dict[str, Any]] = {}
        for placement in ("cpu", "tpu-slice"):
            req = validate_request(
                {
                    "model": "gemma4-26b",
                    "hf_repo": "google/gemma-4-26b-a4b-it",
                    "preset": preset,
                    "placement": placement,
                }
            )
            stages = {}
            for stage in STAGES_OUTSIDE_TRAINING:
                pods, chips = chips_held(manifests.render(req, stage, 1, ctx))
                stages[stage] = {"pods": pods, "chips": chips, "chip_hours": chips * hours[stage]}
            train_pods, train_chips = chips_held(manifests.render(req, "train", 1, ctx))
            convert = manifests.render(req, "convert", 1, ctx)["spec"]["template"]["spec"]
            by_placement[placement] = {
                "stages": stages,
                "train_chips": train_chips,
                "train_pods": train_pods,
                "chip_hours": sum(s["chip_hours"] for s in stages.values()),
                "node_selector": convert.get("nodeSelector", {}),
                "requests": convert["containers"][0].get("resources", {}).get("requests", {}),
            }
        rows.append({"preset": preset, **by_placement})
    return rows


def run(args: argparse.Namespace) -> Section:
    started = time.monotonic()
    hours = {"convert": args.convert_hours, "export": args.export_hours}
    rows = measure(["v6e-32", "v6e-64"], hours)
    body_rows = []
    headline = []
    for row in rows:
        cpu, tpu = row["cpu"], row["tpu-slice"]
        for stage in STAGES_OUTSIDE_TRAINING:
            c, t = cpu["stages"][stage], tpu["stages"][stage]
            body_rows.append(
                [
                    row["preset"],
                    stage,
                    f"{hours[stage]:g} h",
                    f"{c['pods']} pod, {c['chips']} chips",
                    f"{t['pods']} pods, {t['chips']} chips",
                    f"{c['chip_hours']:g}",
                    f"{t['chip_hours']:g}",
                    f"{t['chip_hours'] - c['chip_hours']:g}",
                ]
            )
        saved = tpu["chip_hours"] - cpu["chip_hours"]
        body_rows.append(
            [
                f"**{row['preset']}**",
                "**convert + export**",
                "",
                "",
                "",
                f"**{cpu['chip_hours']:g}**",
                f"**{tpu['chip_hours']:g}**",
                f"**{saved:g}**",
            ]
        )
        headline.append(
            (
                f"TPU chip-hours outside training, {row['preset']}",
                f"{cpu['chip_hours']:g} (cpu placement)",
                f"{tpu['chip_hours']:g} with tpu-slice: {saved:g} chip-hours saved per run",
            )
        )
    body = (
        f"Stage durations (flags `--convert-hours {hours['convert']:g} --export-hours {hours['export']:g}`) are "
        "the user's figures, not measured. Both columns are computed from `rlpipe.core.manifests.render` for the same "
        "request; `tpu-slice` (the tutorials' way) is the baseline.\n\n"
        + table(
            [
                "preset",
                "stage",
                "duration",
                "cpu placement (default)",
                "tpu-slice placement (baseline)",
                "chip-hours, cpu",
                "chip-hours, tpu-slice",
                "difference",
            ],
            body_rows,
        )
        + "\n\nInstead of a slice, the `cpu` placement runs each of the two stages as one pod on "
        + ", ".join(f"`{k}={v}`" for k, v in rows[0]["cpu"]["node_selector"].items())
        + " requesting "
        + ", ".join(f"{k} {v}" for k, v in rows[0]["cpu"]["requests"].items())
        + ". This counts chips the pipeline's own workloads hold; a reservation left idle meanwhile is the "
        "reservation's cost, not a workload's.\n\nFor scale: the training JobSet itself holds "
        + ", ".join(f"{r['cpu']['train_chips']} chips ({r['preset']})" for r in rows)
        + " in both placements; it is the only stage that should."
    )
    return Section(
        "tpu",
        "1. TPU chips held outside training",
        body,
        headline,
        data={"hours": hours, "rows": rows},
        seconds=time.monotonic() - started,
    )
