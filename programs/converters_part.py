"""The ``convert`` and ``export`` parts: MaxText's two converters on the tiny Gemma 4 fixture.

``convert`` runs ``to_maxtext`` with the canonical example's convert argv (mapped by
``rlpipe.local.simulator.testbed``); what it wrote into the bucket's folder is kept beside the
result (``bucket/``), since export reads it. ``export`` runs ``to_huggingface`` with the example's
export argv on that conversion, placed where the argv names a trained step (no training runs
here), into the local directory its argv names, made just before as the export script makes it;
what it wrote there is kept beside the result (``hf-export/``): the tests run rlpipe's own
manifest step over those files.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from programs import process
from rlpipe.local.simulator import testbed

KEPT_EXPORT = "hf-export"  # the export's own files, beside its result
JSON_WRITTEN = ("config.json", "model.safetensors.index.json")


def run_convert(job: dict[str, Any], run: process.Run) -> dict[str, Any]:
    job = process.resolve(job, run.work)
    process.stage(job["stage_folders"])
    result = process.program(run.python, job["module"], job["args"], run.work, "convert")
    kept = run.keep / testbed.BUCKET_DIR
    if Path(job["bucket"]).exists():
        shutil.move(job["bucket"], kept)
    result["objects"] = process.listing(kept)
    return result


def run_export(job: dict[str, Any], run: process.Run) -> dict[str, Any]:
    job = process.resolve(job, run.work)
    process.stage(job["stage_folders"])
    converted = run.kept_by("convert") / testbed.BUCKET_DIR / job["stage_converted"]["from"]
    if not converted.is_dir():
        raise process.TierError(f"export reads the conversion's items, and {converted} is missing")
    shutil.copytree(converted, job["stage_converted"]["to"])
    output = Path(job["output"])
    output.mkdir(parents=True)  # the export script's `mkdir "$RLPIPE_EXPORT_DIR"`: a fresh directory
    result = process.program(run.python, job["module"], job["args"], run.work, "export")
    kept = run.keep / KEPT_EXPORT
    shutil.copytree(output, kept)
    result["exported"] = process.listing(kept)
    for name in JSON_WRITTEN:
        if (kept / name).exists():
            result[name] = json.loads((kept / name).read_text())
    if result["exit_code"] == 0:
        fixture = str(process.ROOT / job["fixture"])
        result["tensors"] = process.driver(
            run.python, "read_tensors.py", {"input": fixture, "output": str(kept)}, run.work
        )
    return result
